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
 * Relational conjuncts first; the AI predicates over one document fused into one chain.
 *
 * <pre>
 * before: Filter (ai_if('Q1 {0}', body) AND id > 3 AND ai_if('Q2 {0}', body, map('selectivity', 0.1)))
 *           +- child
 * after:  Filter quail_chain('{"doc":0,"calls":[Q2 (rank), Q1 (rank)]}', body)
 *           +- Filter (id > 3)
 *              +- child
 * </pre>
 *
 * The chain's predicates are ordered by rank = cost / (1 - selectivity)
 * (Hellerstein), cost from the template's length, selectivity from the
 * optional hint (default 0.5). quail_chain is a non-deterministic Python UDF
 * (install() registers it): Spark neither pushes it below the local sort that
 * {@link QuailLocalSort} puts under it nor merges it with the relational filter.
 * Its answer is the AND of the predicates (NULL for a NULL document), so the
 * rows are those of the filter before; only the order of evaluation, the
 * short-circuit and the kept KV differ. The fused predicates leave no ai_if in
 * the filter: applying the rule again changes nothing.
 */
public class QuailFilterChain extends AiRule {
    public QuailFilterChain(SparkSession session) {
        super(session);
    }


    @Override
    LogicalPlan rewrite(LogicalPlan p) {
        return p instanceof Filter ? rewriteFilter((Filter) p) : p;
    }

    private LogicalPlan rewriteFilter(Filter f) {
        List<Expression> relational = new ArrayList<>(), otherAi = new ArrayList<>();
        Map<Expression, List<AiCalls.Predicate>> byDoc = new LinkedHashMap<>();
        for (Expression c : AiCalls.conjuncts(f.condition())) {
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
        List<List<AiCalls.Predicate>> chains = new ArrayList<>(byDoc.values());
        for (List<AiCalls.Predicate> ch : chains) ch.sort((a, b) -> Double.compare(a.rank(), b.rank()));
        chains.sort((a, b) -> Double.compare(a.get(0).rank(), b.get(0).rank()));
        List<Expression> top = new ArrayList<>();
        for (List<AiCalls.Predicate> ch : chains) {
            Expression call = chainCall(ch);
            if (call == null) return f;
            top.add(call);
        }
        top.addAll(otherAi);
        LogicalPlan child = relational.isEmpty() ? f.child() : new Filter(AiCalls.and(relational), f.child());
        return new Filter(AiCalls.and(top), child);
    }

    /** quail_chain(spec, document): spec is JSON of the ordered templates with their hints. */
    private Expression chainCall(List<AiCalls.Predicate> ordered) {
        StringBuilder spec = new StringBuilder("{\"calls\": [");
        for (int i = 0; i < ordered.size(); i++) {
            AiCalls.Predicate p = ordered.get(i);
            if (i > 0) spec.append(", ");
            spec.append("{\"template\": ").append(AiCalls.json(p.template))
                .append(", \"selectivity\": ").append(p.selectivity)
                .append(", \"rank\": ").append(String.format(java.util.Locale.ROOT, "%.1f", p.rank())).append('}');
        }
        spec.append("]}");
        List<Expression> args = new ArrayList<>();
        args.add(AiCalls.literal(spec.toString()));
        args.add(ordered.get(0).columns.get(0));
        return AiCalls.call(session, AiCalls.CHAIN, args);
    }
}
