package io.quailspark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.UUID;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.internal.SQLConf;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A token budget per query ({@code spark.quail.maxTokensPerQuery}): a plan whose AI operators are
 * estimated to request more tokens than the budget fails before any AI work, naming the estimate
 * and the limit; otherwise every operator's spec carries the budget and an id of the query
 * ({@code "budget": {"max_tokens": N, "query": id}}), and the executors stop the query once the
 * tokens they requested for it, summed over the session's metrics folder, pass the budget.
 *
 * <pre>
 * before: Filter quail_chain({"calls": [...], "cost": {"requested": 2458, ...}}, text)
 * after:  Filter quail_chain({"calls": [...], "cost": {...}, "budget": {"max_tokens": 5000, "query": "9f.."}}, text)
 * </pre>
 */
final class QuailBudget extends Rule<LogicalPlan> {
    static final String CONF = "spark.quail.maxTokensPerQuery";
    private static final List<String> PRICED = List.of(AiCalls.CHAIN, AiCalls.JOIN, AiCalls.JOIN_SCORE, AiCalls.EVAL);

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        long limit = limit();
        if (limit <= 0) return plan;
        List<JsonNode> specs = new ArrayList<>();
        collect(plan, specs);
        if (specs.isEmpty()) return plan;
        double requested = 0;
        String query = null;
        for (JsonNode s : specs) {
            requested += s.path("cost").path("requested").asDouble(0);
            if (s.has("budget")) query = s.path("budget").path("query").asText();
        }
        if (requested > limit) {
            throw Catalyst.analysisError(String.format(Locale.ROOT, "quail: the query's AI operators are estimated to "
                + "request %,.0f tokens, more than %s=%,d; raise the budget, or narrow the query (a WHERE before "
                + "the AI calls, a LIMIT)", requested, CONF, limit));
        }
        JsonNode budget = Json.tree(new Specs.Budget(limit, query != null ? query : UUID.randomUUID().toString()));
        return plan.transformAllExpressionsWithSubqueries(new Rewrite<Expression>(e -> {
            JsonNode s = Json.read(spec(e));
            if (s == null || !s.isObject() || s.has("budget")) return null;
            com.fasterxml.jackson.databind.node.ObjectNode with = ((com.fasterxml.jackson.databind.node.ObjectNode) s)
                .deepCopy();
            with.set("budget", budget);
            List<Expression> kids = new ArrayList<>(CollectionConverters.asJava(e.children()));
            kids.set(0, Catalyst.literal(Json.text(with)));
            return e.withNewChildren(CollectionConverters.asScala(kids).toSeq());
        }));
    }

    static long limit() {
        try {
            return Long.parseLong(SQLConf.get().getConfString(CONF, "0").trim());
        } catch (NumberFormatException e) {
            throw Catalyst.analysisError(CONF + ": expected a whole number of tokens, got "
                + SQLConf.get().getConfString(CONF, ""));
        }
    }

    /** The spec text of a priced internal call, or null. */
    private static String spec(Expression e) {
        if (!(e instanceof PythonUDF) || PRICED.stream().noneMatch(n -> AiCalls.isInternal(e, n))) return null;
        Expression first = e.children().head();
        if (!(first instanceof Literal) || ((Literal) first).value() == null) return null;
        return ((Literal) first).value().toString();
    }

    private static void collect(LogicalPlan plan, List<JsonNode> out) {
        for (Expression e : CollectionConverters.asJava(plan.expressions())) collect(e, out);
        for (LogicalPlan c : CollectionConverters.asJava(plan.children())) collect(c, out);
        for (LogicalPlan s : CollectionConverters.asJava(plan.subqueries())) collect(s, out);
    }

    private static void collect(Expression e, List<JsonNode> out) {
        JsonNode n = Json.read(spec(e));
        if (n != null && n.has("cost")) out.add(n);
        for (Expression c : CollectionConverters.asJava(e.children())) collect(c, out);
    }
}
