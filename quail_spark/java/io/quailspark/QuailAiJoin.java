package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.logical.BROADCAST$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.HintInfo;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.JoinStrategyHint;
import scala.Option;

/**
 * An inner join whose ON has an AI predicate over one column of each side:
 * evaluated anchor by anchor, the partner side broadcast.
 *
 * <pre>
 * before: Join Inner, (ai_if('Does {0} mention {1}?', body, term) AND a.x = k.x)
 *           :- a
 *           +- k
 * after:  Filter quail_join('{"template": ...}', body, term)
 *           +- Join Inner, (a.x = k.x)             (no equality: broadcast hint on the smaller side)
 *              :- a
 *              +- k
 * </pre>
 *
 * {@link QuailLocalSort} then sorts the pairs by the anchor column ({0}, the
 * DOCUMENT whose KV is shared) inside each partition, so each anchor's prefix
 * is computed once while its partners stream. The template fixes the prompt
 * ({0} is always the DOCUMENT): the side chosen for broadcast by cost (the
 * smaller one, from the optimizer's statistics) changes only the physical join,
 * never a prompt or an answer. Equality conjuncts of the ON stay in the join (a
 * hash join). quail_join is non-deterministic, so Spark does not push it back
 * into the join; the rewritten join has no ai_if left: applying the rule again
 * changes nothing.
 */
public class QuailAiJoin extends AiRule {
    public QuailAiJoin(SparkSession session) {
        super(session);
    }


    @Override
    LogicalPlan rewrite(LogicalPlan p) {
        return p instanceof Join ? rewriteJoin((Join) p) : p;
    }

    private LogicalPlan rewriteJoin(Join j) {
        if (j.joinType() != Inner$.MODULE$ || j.condition().isEmpty()) return j;
        AttributeSet left = j.left().outputSet(), right = j.right().outputSet();
        List<Expression> rest = new ArrayList<>(), calls = new ArrayList<>();
        boolean equiKeys = false;
        for (Expression c : AiCalls.conjuncts(j.condition().get())) {
            AiCalls.Predicate p = AiCalls.predicate(c);
            if (p != null && p.columns.size() >= 2 && splitsSides(p.columns, left, right)) {
                Expression call = joinCall(p);
                if (call == null) return j;
                calls.add(call);
            } else {
                rest.add(c);
                equiKeys |= isEquiKey(c, left, right);
            }
        }
        if (calls.isEmpty()) return j;
        JoinHint hint = j.hint();
        if (!equiKeys && hint.leftHint().isEmpty() && hint.rightHint().isEmpty()) {
            Option<HintInfo> bc = Option.apply(new HintInfo(Option.<JoinStrategyHint>apply(BROADCAST$.MODULE$)));
            boolean leftSmaller = j.left().stats().sizeInBytes().compare(j.right().stats().sizeInBytes()) < 0;
            hint = leftSmaller ? new JoinHint(bc, Option.empty()) : new JoinHint(Option.empty(), bc);
        }
        Option<Expression> cond = rest.isEmpty() ? Option.empty() : Option.apply(AiCalls.and(rest));
        Join inner = new Join(j.left(), j.right(), j.joinType(), cond, hint);
        return new Filter(AiCalls.and(calls), inner);
    }

    /** Column 0 (the anchor, {0}) from one side, every other column from the other side. */
    private static boolean splitsSides(List<Expression> cols, AttributeSet left, AttributeSet right) {
        AttributeSet a = cols.get(0).references();
        if (a.isEmpty()) return false;
        AttributeSet anchorSide = a.subsetOf(left) ? left : a.subsetOf(right) ? right : null;
        if (anchorSide == null) return false;
        AttributeSet partnerSide = anchorSide == left ? right : left;
        for (Expression c : cols.subList(1, cols.size())) {
            if (c.references().isEmpty() || !c.references().subsetOf(partnerSide)) return false;
        }
        return true;
    }

    private static boolean isEquiKey(Expression c, AttributeSet left, AttributeSet right) {
        Expression l, r;
        if (c instanceof EqualTo) {
            l = ((EqualTo) c).left();
            r = ((EqualTo) c).right();
        } else if (c instanceof EqualNullSafe) {
            l = ((EqualNullSafe) c).left();
            r = ((EqualNullSafe) c).right();
        } else {
            return false;
        }
        return (l.references().subsetOf(left) && r.references().subsetOf(right))
            || (l.references().subsetOf(right) && r.references().subsetOf(left));
    }

    /** quail_join(spec, anchor, partner columns...): spec is JSON of the template and its hint. */
    private Expression joinCall(AiCalls.Predicate p) {
        String spec = "{\"template\": " + AiCalls.json(p.template) + ", \"selectivity\": " + p.selectivity + "}";
        List<Expression> args = new ArrayList<>();
        args.add(AiCalls.literal(spec));
        args.addAll(p.columns);
        return AiCalls.call(session, AiCalls.JOIN, args);
    }
}
