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
 * An inner join whose ON has an AI predicate over columns of both sides: evaluated anchor
 * by anchor, the partner side broadcast; the anchor chosen by the cost model ({@link AiCost}).
 *
 * <pre>
 * before: Join Inner, (ai_if('Is {0} mentioned in {1}?', term, body) AND a.x = k.x)
 *           :- k
 *           +- a
 * after:  Filter quail_join('{"template": ..., "anchor": "body", "why": "cost model", "sides": [...],
 *                             "anchor_costs": [...], "cost": {...}}', term, body)
 *           +- Join Inner, (a.x = k.x)      (no equality: broadcast hint on the partner side, here k)
 *              :- k
 *              +- a
 * </pre>
 *
 * The anchor is the document whose KV is shared: its prefix (header, document, question) is
 * computed once per anchor, the partner and the answer cue once per pair. For a two-column
 * call the rule prices either column as the anchor (rows from Spark's statistics, tokens
 * from column statistics, a {@code tokens} hint or the default) and takes the cheaper one; an
 * {@code anchor} hint (resolved to {@code anchor_arg} by {@link QuailAnchorHint}) forces a
 * side. This agrees with the prompt, which never depends on the plan: the renderer places
 * the hinted column first, else the row's longer value, so the cost model's anchor (the
 * side with the longer documents) is the document placed first for the typical row.
 * Calls of three or more columns keep {0} as the anchor. {@link QuailLocalSort} sorts the
 * pairs by the document placed first in each row's prompt. Equality conjuncts of the ON
 * stay in the join (a hash join). quail_join is non-deterministic, so Spark does not push
 * it back into the join; the rewritten join has no ai_if left: applying the rule again
 * changes nothing. The spec carries the estimates; explain prints them.
 */
public class QuailAiJoin extends AiRule<Join> {
    public QuailAiJoin(SparkSession session) {
        super(session, Join.class);
    }


    @Override
    LogicalPlan rewrite(Join j) {
        if (j.joinType() != Inner$.MODULE$ || j.condition().isEmpty()) return j;
        AttributeSet left = j.left().outputSet(), right = j.right().outputSet();
        List<Expression> rest = new ArrayList<>(), calls = new ArrayList<>();
        boolean equiKeys = false;
        Boolean broadcastLeft = null;
        AiCost model = AiCost.session();
        List<AiCalls.Predicate> preds = new ArrayList<>();
        List<boolean[]> predSides = new ArrayList<>();
        List<List<Object[]>> bounds = new ArrayList<>();  // per predicate: its score comparisons, [op, bound]
        // per predicate: ai_score(...) compared with a column (Spark compares each pair's score), else null
        List<AiCalls.Compared> againstColumns = new ArrayList<>();
        for (Expression c : Catalyst.conjuncts(j.condition().get())) {
            AiCalls.Predicate p = AiCalls.predicate(c);
            if (p == null) p = AiCalls.scoreCompared(c);  // ai_score(...) > x, < x ...: the same prompt, its P(yes) compared
            AiCalls.Compared column = p == null ? AiCalls.scoreAgainstColumn(c) : null;
            if (column != null) p = column.score();
            boolean[] onLeft = p != null && p.columns.size() >= 2 ? sides(p.columns, left, right) : null;
            if (onLeft == null) {
                rest.add(c);
                equiKeys |= isEquiKey(c, left, right);
                continue;
            }
            Object[] bound = p.scoreOp == null ? null : new Object[] {p.scoreOp, p.scoreBound};
            int same = -1;  // the same ai_score compared twice (BETWEEN, a range): one call checks both
            for (int k = 0; k < preds.size() && bound != null && same < 0; k++) {
                if (againstColumns.get(k) == null && preds.get(k).sameScore(p)) same = k;
            }
            if (same >= 0) {
                bounds.get(same).add(bound);
                continue;
            }
            preds.add(p);
            predSides.add(onLeft);
            List<Object[]> own = new ArrayList<>();
            if (bound != null) own.add(bound);
            bounds.add(own);
            againstColumns.add(column);
        }
        for (int k = 0; k < preds.size(); k++) {
            Anchor a = new Anchor(model, preds.get(k), predSides.get(k), j);
            AiCalls.Compared column = againstColumns.get(k);
            Expression call;
            if (column != null) {  // the score of each pair, compared with its column by Spark
                Expression other = column.bound();
                Expression score = Catalyst.call(session, AiCalls.JOIN_SCORE,
                        a.args(List.of(), column.op() + " " + other.sql()));
                if (score == null) return j;
                call = column.comparison().withNewChildren(
                        Catalyst.seq(column.scoreLeft() ? List.of(score, other) : List.of(other, score)));
            } else {
                call = Catalyst.call(session, AiCalls.JOIN, a.args(bounds.get(k), null));
                if (call == null) return j;
            }
            calls.add(call);
            if (broadcastLeft == null) broadcastLeft = !predSides.get(k)[a.chosen];  // broadcast the partners
        }
        if (calls.isEmpty()) return j;
        JoinHint hint = j.hint();
        if (!equiKeys && hint.leftHint().isEmpty() && hint.rightHint().isEmpty()) {
            Option<HintInfo> bc = Option.apply(new HintInfo(Option.<JoinStrategyHint>apply(BROADCAST$.MODULE$)));
            hint = broadcastLeft ? new JoinHint(bc, Option.empty()) : new JoinHint(Option.empty(), bc);
        }
        Option<Expression> cond = rest.isEmpty() ? Option.empty() : Option.apply(Catalyst.and(rest));
        Join inner = new Join(j.left(), j.right(), j.joinType(), cond, hint);
        return new Filter(Catalyst.and(calls), inner);
    }

    /**
     * Per column argument, whether it comes from the left side; null unless the call joins the
     * sides: two columns from opposite sides, or {0} from one side and the others from the other.
     */
    private static boolean[] sides(List<Expression> cols, AttributeSet left, AttributeSet right) {
        boolean[] onLeft = new boolean[cols.size()];
        for (int i = 0; i < cols.size(); i++) {
            AttributeSet r = cols.get(i).references();
            if (r.isEmpty()) return null;
            if (r.subsetOf(left)) onLeft[i] = true;
            else if (!r.subsetOf(right)) return null;
            if (i > 0 && onLeft[i] == onLeft[0]) return null;
        }
        return onLeft;
    }

    /** The anchor of one AI join call: either column of a two-column call priced as the anchor. */
    private static final class Anchor {
        final AiCalls.Predicate p;
        final double[] rows, tokens;
        final String[] rowsSource, tokensSource;
        final AiCost.Cost[] costs;
        final int chosen;
        final String why;
        final Double pairs;  // the pairs the join order priced (survivor-thinned), or null

        Anchor(AiCost model, AiCalls.Predicate p, boolean[] onLeft, Join j) {
            this.p = p;
            int n = Math.min(p.columns.size(), 2);
            rows = new double[n];
            tokens = new double[n];
            rowsSource = new String[n];
            tokensSource = new String[n];
            double[] priced = n == 2 ? p.tag(QuailAiJoinOrder.PRICED) : null;
            pairs = priced != null ? Double.valueOf(priced[0]) : null;
            for (int i = 0; i < n; i++) {
                LogicalPlan side = onLeft[i] ? j.left() : j.right();
                Double r = priced != null ? Double.valueOf(priced[1 + i]) : AiCost.rows(side);
                rows[i] = r != null ? r : AiCost.DEFAULT_ROWS;
                rowsSource[i] = priced != null ? "join order, survivor-thinned" : AiCost.rowsSource(side);
                AiCost.Tokens t = AiCost.docTokens(p.columns.get(i), side, p.tokensHint(i));
                tokens[i] = t.tokens;
                tokensSource[i] = t.source;
            }
            costs = new AiCost.Cost[n];
            double q = p.questionTokens();
            if (priced != null && n == 2) {  // the pairs the order priced, each column's live documents as anchors
                for (int a = 0; a < 2; a++) {
                    double anchors = Math.max(1.0, Math.min(priced[1 + a], priced[0]));
                    costs[a] = model.join(anchors, tokens[a], priced[0] / anchors, tokens[1 - a], q);
                }
            } else {
                costs[0] = model.join(rows[0], tokens[0], rows[1], tokens[1], q);
                if (n == 2) costs[1] = model.join(rows[1], tokens[1], rows[0], tokens[0], q);
            }
            if (p.anchorArg() != null) {
                chosen = p.anchorArg();
                why = "hint";
            } else if (p.columns.size() > 2) {
                chosen = 0;
                why = "template: {0} of a call with three or more columns";
            } else {
                int larger = n == 2 && "default".equals(tokensSource[0]) && "default".equals(tokensSource[1])
                    ? AiCost.largerSide(onLeft[0] ? j.left() : j.right(), onLeft[1] ? j.left() : j.right()) : -1;
                if (larger >= 0) {  // no lengths: the side with more bytes (longer documents, or more of them)
                    chosen = larger;
                    why = "no document lengths (no column statistics or tokens hint): the larger side in bytes";
                } else {
                    chosen = costs[1].seconds < costs[0].seconds ? 1 : 0;  // a tie keeps template order
                    why = "cost model";
                }
            }
        }

        /**
         * quail_join(spec, columns...): spec is JSON of the template, the hints and the estimates; for
         * score comparisons ({@code bounds}, JSON pairs [op, bound]) the rows kept satisfy all of them.
         * For quail_join_score, {@code compared}: the comparison Spark makes with each pair's score
         * (the operator's name and the other side, for explain).
         */
        List<Expression> args(List<Object[]> bounds, String compared) {
            List<Specs.ScoreBound> scoreBounds = new ArrayList<>();  // kept rows: ai_score(...) <op> bound, every pair
            for (Object[] b : bounds) scoreBounds.add(new Specs.ScoreBound((String) b[0], (Double) b[1]));
            List<Specs.Side> sides = new ArrayList<>();
            for (int i = 0; i < rows.length; i++) {
                sides.add(new Specs.Side(p.columns.get(i).sql(), Json.figure(rows[i]), rowsSource[i],
                    Json.figure(tokens[i]), tokensSource[i], costs[i].spec()));
            }
            Specs.Join spec = new Specs.Join(p.template, Json.figure(p.selectivity()), p.selectivitySource(),
                p.anchorArg(), scoreBounds.isEmpty() ? null : scoreBounds, compared, p.columns.get(chosen).sql(), why,
                sides, costs[chosen].spec(), p.tag(QuailAiJoinOrder.ORDER),
                pairs != null ? Double.valueOf(Json.figure(pairs)) : null);
            List<Expression> args = new ArrayList<>();
            args.add(Catalyst.literal(Json.spec(spec)));
            args.addAll(p.columns);
            return args;
        }
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
}
