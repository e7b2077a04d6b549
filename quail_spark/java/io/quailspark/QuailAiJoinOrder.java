package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Several AI joins in one tree of inner joins, ordered by the cost model (Selinger-style over the
 * AI predicates: ai_if, and comparisons of ai_score with a literal bound): every left-deep order
 * of the tables (up to five, so up to four AI joins) in which each table joins by an AI predicate
 * is priced with survivor-thinned totals, and the cheapest is built.
 *
 * <pre>
 * before: Join Inner, ai_if('Is {0} about {1}?', body, cat, map('selectivity', 0.1))
 *           :- Join Inner, ai_if('Does {0} mention {1}?', body, term, map('selectivity', 0.9))
 *           :  :- notes
 *           :  +- terms
 *           +- cats
 * after:  Project [notes..., terms..., cats...]
 *           +- Join Inner, ai_if('Does {0} mention {1}?', body, term, named_struct(selectivity, 0.9))   [tagged]
 *              :- Join Inner, ai_if('Is {0} about {1}?', body, cat, named_struct(selectivity, 0.1))   [tagged]
 *              :  :- notes
 *              :  +- cats
 *              +- terms
 * </pre>
 *
 * Cost of an order: the tuples entering each join are the survivors of the joins before it
 * (rows of each table from Spark's statistics, times each applied predicate's selectivity);
 * each AI predicate is priced by {@link AiCost#join} at those tuples with the cheaper anchor
 * (or the hinted one), its anchors the live documents of the anchor's table. The order as
 * written is kept unless another is strictly cheaper. The chosen order, its cost and the cost
 * of the written order ride on each AI predicate's call as the tag {@link #ORDER} (JSON), which
 * {@link QuailAiJoin} copies into each quail_join spec for explain, and each predicate's
 * priced pairs and live documents as the tag {@link #PRICED}, which QuailAiJoin prices the
 * join with (so the joins' costs add up to the chosen order's); the user's hint is left as
 * written. A tree whose predicates carry the tag is left as it is (the rule is idempotent). Trees with a relational condition
 * between two tables, join hints, or an AI predicate over three tables or with a column
 * argument over two tables ({@code x.title || z.label}) are Spark's to order.
 * Rows are those of an inner join whatever the order; a Project restores the column order.
 */
public class QuailAiJoinOrder extends AiRule<Join> {
    /** The chosen order, its cost and the written order's, on each AI predicate's call. */
    static final TreeNodeTag<Specs.JoinOrder> ORDER = new TreeNodeTag<>("quail.join_order");
    /** [pairs, live documents of column 1, of column 2] as the order priced them, on each call. */
    static final TreeNodeTag<double[]> PRICED = new TreeNodeTag<>("quail.join_priced");
    private static final int MAX_TABLES = 5;

    public QuailAiJoinOrder(SparkSession session) {
        super(session, Join.class);
    }

    @Override
    LogicalPlan rewrite(Join p) {
        List<LogicalPlan> tables = new ArrayList<>();
        List<Expression> conds = new ArrayList<>();
        if (!flatten(p, tables, conds) || tables.size() < 3 || tables.size() > MAX_TABLES) return p;
        AiCost model = AiCost.session();
        List<Edge> edges = new ArrayList<>();
        List<Expression> local = new ArrayList<>();
        for (Expression c : conds) {
            int[] refs = tablesOf(c, tables);
            AiCalls.Predicate ai = AiCalls.predicate(c);
            if (ai == null) ai = AiCalls.scoreCompared(c);  // ai_score(...) > x and the like join as ai_if does
            if (ai != null && ai.columns.size() == 2 && refs.length == 2) {
                if (ai.tag(ORDER) != null) return p;  // already ordered
                Edge same = sameScore(edges, ai);
                if (same != null) {  // a second bound on one score (BETWEEN): one edge, one evaluation
                    same.also.add(c);
                    continue;
                }
                Edge edge = new Edge(model, ai, c, tables);
                if (edge.side[0] < 0 || edge.side[1] < 0) return p;  // a column over two tables: Spark's order
                edges.add(edge);
            } else if (refs.length <= 1 && !AiCalls.containsAi(c)) {
                local.add(c);
            } else {
                return p;  // a relational join condition, or an AI call over three tables: Spark's order
            }
        }
        if (edges.size() < 2) return p;
        double[] rows = new double[tables.size()];
        for (int i = 0; i < rows.length; i++) {
            Double r = AiCost.rows(tables.get(i));
            rows[i] = r != null ? r : AiCost.DEFAULT_ROWS;
        }
        int[] written = new int[tables.size()];
        for (int i = 0; i < written.length; i++) written[i] = i;
        double writtenCost = cost(written, edges, rows, model, null);
        int[] best = written;
        double bestCost = writtenCost;
        for (int[] order : permutations(tables.size())) {
            double c = cost(order, edges, rows, model, null);
            if (c < bestCost * (1 - 1e-9)) {
                best = order;
                bestCost = c;
            }
        }
        Specs.JoinOrder chosen = new Specs.JoinOrder(names(best, edges, tables), Json.figure(bestCost),
            names(written, edges, tables), Json.figure(writtenCost));
        double[][] priced = new double[edges.size()][];
        cost(best, edges, rows, model, priced);
        LogicalPlan out = build(best, tables, edges, local, chosen, priced);
        List<Attribute> want = CollectionConverters.asJava(p.output());
        if (want.equals(CollectionConverters.asJava(out.output()))) return out;
        return new Project(Catalyst.seq(new ArrayList<NamedExpression>(want)), out);
    }

    /**
     * The tables and conjuncts of a tree of inner joins without hints (looking through the
     * column-pruning Projects between them); false when the joins have hints.
     */
    private static boolean flatten(LogicalPlan p, List<LogicalPlan> tables, List<Expression> conds) {
        if (p instanceof Project && isJoin(((Project) p).child())
                && ((Project) p).projectList().forall(new scala.runtime.AbstractFunction1<NamedExpression, Object>() {
                    @Override
                    public Object apply(NamedExpression x) {
                        return x instanceof Attribute;
                    }
                })) {
            return flatten(((Project) p).child(), tables, conds);
        }
        if (isJoin(p)) {
            Join j = (Join) p;
            if (j.hint().leftHint().isDefined() || j.hint().rightHint().isDefined()) return false;
            if (!flatten(j.left(), tables, conds) || !flatten(j.right(), tables, conds)) return false;
            if (j.condition().isDefined()) conds.addAll(Catalyst.conjuncts(j.condition().get()));
            return true;
        }
        tables.add(p);
        return true;
    }

    private static boolean isJoin(LogicalPlan p) {
        return p instanceof Join && ((Join) p).joinType() == Inner$.MODULE$;
    }

    /** Indices of the tables an expression references. */
    private static int[] tablesOf(Expression e, List<LogicalPlan> tables) {
        List<Integer> out = new ArrayList<>();
        for (int i = 0; i < tables.size(); i++) {
            AttributeSet r = e.references().intersect(tables.get(i).outputSet());
            if (!r.isEmpty()) out.add(i);
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    /** The edge whose predicate compares the same ai_score call as {@code p}, else null. */
    private static Edge sameScore(List<Edge> edges, AiCalls.Predicate p) {
        for (Edge e : edges) {
            if (e.p.sameScore(p)) return e;
        }
        return null;
    }

    /** One AI predicate between two tables: its tables per column, tokens and selectivity. */
    private static final class Edge {
        final AiCalls.Predicate p;
        final Expression cond;
        final List<Expression> also = new ArrayList<>();  // more comparisons of the same score
        final int[] side = new int[2];
        final double[] tokens = new double[2];
        final String[] name = new String[2];

        Edge(AiCost model, AiCalls.Predicate p, Expression cond, List<LogicalPlan> tables) {
            this.p = p;
            this.cond = cond;
            for (int i = 0; i < 2; i++) {
                int[] t = tablesOf(p.columns.get(i), tables);
                side[i] = t.length == 1 ? t[0] : -1;
                tokens[i] = AiCost.docTokens(p.columns.get(i), tables.get(Math.max(side[i], 0)), p.tokensHint(i)).tokens;
                String sql = p.columns.get(i).sql();
                name[i] = sql.contains(".") ? sql.substring(0, sql.lastIndexOf('.')) : sql;
            }
        }

        /** SoL seconds over {@code tuples} pairs with {@code live} documents per table, the cheaper anchor. */
        double seconds(AiCost model, double tuples, double[] live) {
            double best = Double.MAX_VALUE;
            for (int a = 0; a < 2; a++) {
                if (p.anchorArg() != null && p.anchorArg() != a) continue;
                double anchors = Math.max(1.0, Math.min(live[side[a]], tuples));
                double s = model.join(anchors, tokens[a], tuples / anchors, tokens[1 - a], p.questionTokens()).seconds;
                best = Math.min(best, s);
            }
            return best;
        }
    }

    /**
     * Survivor-thinned cost of a left-deep order: each table joins the tuples so far, each AI
     * predicate runs once both its tables are in, on the tuples left by the predicates before it;
     * infinite when a table would join without an AI predicate (a cross product).
     */
    private static double cost(int[] order, List<Edge> edges, double[] rows, AiCost model, double[][] priced) {
        boolean[] in = new boolean[rows.length], applied = new boolean[edges.size()];
        double[] live = rows.clone();
        in[order[0]] = true;
        double tuples = rows[order[0]], total = 0;
        for (int k = 1; k < order.length; k++) {
            in[order[k]] = true;
            tuples *= rows[order[k]];
            boolean joined = false;
            for (int e = 0; e < edges.size(); e++) {
                Edge x = edges.get(e);
                if (applied[e] || !in[x.side[0]] || !in[x.side[1]]) continue;
                total += x.seconds(model, tuples, live);
                if (priced != null) priced[e] = new double[] {tuples, live[x.side[0]], live[x.side[1]]};
                tuples *= x.p.selectivity();
                applied[e] = joined = true;
            }
            if (!joined) return Double.POSITIVE_INFINITY;
            for (int t = 0; t < live.length; t++) if (in[t]) live[t] = Math.min(rows[t], tuples);
        }
        return total;
    }

    private static List<int[]> permutations(int n) {
        List<int[]> out = new ArrayList<>();
        permute(new int[n], new boolean[n], 0, out);
        return out;
    }

    private static void permute(int[] cur, boolean[] used, int k, List<int[]> out) {
        if (k == cur.length) {
            out.add(cur.clone());
            return;
        }
        for (int i = 0; i < cur.length; i++) {
            if (used[i]) continue;
            used[i] = true;
            cur[k] = i;
            permute(cur, used, k + 1, out);
            used[i] = false;
        }
    }

    /** JSON list of the tables in order, named by the qualifiers of the AI columns over them. */
    private static List<String> names(int[] order, List<Edge> edges, List<LogicalPlan> tables) {
        List<String> out = new ArrayList<>();
        for (int t : order) {
            String name = "table " + (t + 1);
            for (Edge e : edges) {
                if (e.side[0] == t) name = e.name[0];
                else if (e.side[1] == t) name = e.name[1];
            }
            out.add(name);
        }
        return out;
    }

    /** The left-deep tree of ``order``: each conjunct at the first join where its tables are in. */
    private static LogicalPlan build(int[] order, List<LogicalPlan> tables, List<Edge> edges,
                                     List<Expression> local, Specs.JoinOrder chosen, double[][] priced) {
        List<Expression> pending = new ArrayList<>(local);
        for (int i = 0; i < edges.size(); i++) {
            Edge e = edges.get(i);
            double[] at = {Json.figure(priced[i][0]), Json.figure(priced[i][1]), Json.figure(priced[i][2])};
            pending.add(withOrder(e.cond, chosen, at));
            for (Expression c : e.also) pending.add(withOrder(c, chosen, at));  // the same call: still one
        }
        LogicalPlan cur = tables.get(order[0]);
        for (int k = 1; k < order.length; k++) {
            LogicalPlan right = tables.get(order[k]);
            AttributeSet out = cur.outputSet().$plus$plus(right.outputSet());
            List<Expression> here = new ArrayList<>();
            for (Expression c : new ArrayList<>(pending)) {
                if (c.references().subsetOf(out)) {
                    here.add(c);
                    pending.remove(c);
                }
            }
            Option<Expression> cond = here.isEmpty() ? Option.empty() : Option.apply(Catalyst.and(here));
            cur = new Join(cur, right, Inner$.MODULE$, cond, JoinHint.NONE());
        }
        return cur;
    }

    /** The AI predicate with its call tagged with the order and its priced pairs (not in the user's hint). */
    private static Expression withOrder(Expression cond, Specs.JoinOrder chosen, double[] priced) {
        return AiCalls.tagged(AiCalls.tagged(cond, ORDER, chosen), PRICED, priced);
    }
}
