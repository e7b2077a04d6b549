package io.quailspark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * Relational conjuncts first; the AI predicates over one document fused into one chain,
 * ordered by the cost model ({@link AiCost}).
 *
 * <pre>
 * before: Filter (ai_if('Q1 {0}', body) AND id > 3 AND ai_if('Q2 {0}', body, map('selectivity', 0.1)))
 *           +- child
 * after:  Filter quail_chain('{"doc": "body", "doc_tokens": 300, "rows": ..., "calls": [Q2 (rank), Q1 (rank)],
 *                              "cost": {...}}', body)
 *           +- Filter (id > 3)
 *              +- child
 * </pre>
 *
 * The chain's predicates are ordered by rank = cost / (1 - selectivity) (Hellerstein),
 * cost the speed-of-light seconds of what a predicate computes per row: the document's KV
 * is computed once and kept, so in a chain of several a predicate costs its question (with
 * its attention over the document); selectivity from the optional hint, else the default.
 * Chains over different documents run in the order of their own ranks (expected cost per
 * row with short-circuit, document included, over 1 - the chain's selectivity). The spec
 * carries the estimates (document tokens and their source, rows, each predicate's
 * selectivity, cost, rank and rows evaluated, the chain's cost): explain prints them.
 * quail_chain is a non-deterministic Python UDF (install() registers it): Spark neither
 * pushes it below the local sort that {@link QuailLocalSort} puts under it nor merges it
 * with the relational filter. Its answer is the AND of the predicates (NULL for a NULL
 * document), so the rows are those of the filter before; only the order of evaluation,
 * the short-circuit and the kept KV differ. The fused predicates leave no ai_if in the
 * filter: applying the rule again changes nothing.
 */
public class QuailFilterChain extends AiRule<Filter> {
    public QuailFilterChain(SparkSession session) {
        super(session, Filter.class);
    }


    @Override
    LogicalPlan rewrite(Filter f) {
        List<Expression> relational = new ArrayList<>(), otherAi = new ArrayList<>();
        Map<Expression, List<AiCalls.Predicate>> byDoc = new LinkedHashMap<>();
        for (Expression c : Catalyst.conjuncts(f.condition())) {
            AiCalls.Predicate p = AiCalls.predicate(c);
            if (p != null && p.columns.size() == 1) {
                Expression doc = p.columns.get(0).canonicalized();
                byDoc.computeIfAbsent(doc, k -> new ArrayList<>()).add(p);
            } else if (AiCalls.containsAi(c) || !c.deterministic()) {
                otherAi.add(c);
            } else {
                relational.add(c);
            }
        }
        if (byDoc.isEmpty()) return f;
        LogicalPlan child = relational.isEmpty() ? f.child() : new Filter(Catalyst.and(relational), f.child());
        AiCost model = AiCost.session();
        Double rows = AiCost.rows(child);
        List<Chain> chains = new ArrayList<>();
        for (List<AiCalls.Predicate> members : byDoc.values()) chains.add(new Chain(model, members, child, rows));
        chains.sort((a, b) -> Double.compare(a.rank, b.rank));
        List<Expression> top = new ArrayList<>();
        for (Chain ch : chains) {
            Expression call = Catalyst.call(session, AiCalls.CHAIN, ch.args());
            if (call == null) return f;
            top.add(call);
        }
        top.addAll(otherAi);
        return new Filter(Catalyst.and(top), child);
    }

    /** The predicates over one document in rank order, with the cost model's estimates. */
    private static final class Chain {
        final List<AiCalls.Predicate> ordered;
        final Expression doc;
        final AiCost.Tokens tokens;
        final double rows, rank;
        final String rowsSource;
        final double[] perRow, ranks, evaluated;
        final AiCost.Cost cost;

        Chain(AiCost model, List<AiCalls.Predicate> members, LogicalPlan child, Double knownRows) {
            doc = members.get(0).columns.get(0);
            Double hinted = null;
            for (AiCalls.Predicate p : members) if (hinted == null) hinted = p.tokensHint(0);
            tokens = AiCost.docTokens(doc, child, hinted);
            rows = knownRows != null ? knownRows : AiCost.DEFAULT_ROWS;
            rowsSource = AiCost.rowsSource(child);
            boolean shared = members.size() > 1;  // the document's KV is computed once and kept
            List<double[]> keyed = new ArrayList<>();
            for (int i = 0; i < members.size(); i++) {
                double sec = model.filter(tokens.tokens, members.get(i).questionTokens(), shared).seconds;
                keyed.add(new double[] {AiCost.rank(sec, members.get(i).selectivity()), i, sec});
            }
            keyed.sort((a, b) -> Double.compare(a[0], b[0]));  // stable: ties keep the written order
            ordered = new ArrayList<>();
            perRow = new double[keyed.size()];
            ranks = new double[keyed.size()];
            evaluated = new double[keyed.size()];
            AiCost.Cost total = AiCost.ZERO;
            double alive = rows, kept = 1.0;
            for (int k = 0; k < keyed.size(); k++) {
                AiCalls.Predicate p = members.get((int) keyed.get(k)[1]);
                ordered.add(p);
                ranks[k] = keyed.get(k)[0];
                perRow[k] = keyed.get(k)[2];
                evaluated[k] = alive;
                total = total.plus(model.filter(tokens.tokens, p.questionTokens(), k > 0).times(alive));
                alive *= p.selectivity();
                kept *= p.selectivity();
            }
            cost = total;
            rank = AiCost.rank(total.seconds / Math.max(rows, 1e-9), kept);
        }

        /** quail_chain(spec, document): spec is JSON of the ordered templates and the estimates. */
        List<Expression> args() {
            List<Specs.ChainCall> calls = new ArrayList<>();
            for (int i = 0; i < ordered.size(); i++) {
                AiCalls.Predicate p = ordered.get(i);
                calls.add(new Specs.ChainCall(p.template, Json.figure(p.selectivity()), p.selectivitySource(),
                    Json.figure(perRow[i]), Json.figure(ranks[i]), Json.figure(evaluated[i])));
            }
            Specs.Chain spec = new Specs.Chain(doc.sql(), Json.figure(tokens.tokens), tokens.source,
                Json.figure(rows), rowsSource, calls, cost.spec());
            List<Expression> args = new ArrayList<>();
            args.add(Catalyst.literal(Json.spec(spec)));
            args.add(doc);
            return args;
        }
    }
}
