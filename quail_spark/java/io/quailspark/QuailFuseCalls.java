package io.quailspark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Ascending$;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetArrayItem;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The AI calls of a SELECT list, an aggregate, an ORDER BY (top-k) or a filter
 * that is not a plain AND of one-column ai_if (OR, CASE, {@code ai_score(...) > x},
 * multi-column ai_if) evaluated together: one {@code quail_eval} call per
 * document, under a partition-local sort on it, its struct's fields in place of
 * the calls.
 *
 * <pre>
 * before: Project [id, ai_if('Q1 {0}', body) AS a, ai_score('Q2 {0}', body) AS s]
 *           +- child
 * after:  Project [id, quail_eval#9.flags[0] AS a, quail_eval#9.scores[0] AS s]
 *           +- Project [child.output..., quail_eval('{"calls": [...]}', Q1 {0}, body, Q2 {0}) AS quail_eval#9]
 *              +- Sort [body ASC NULLS FIRST], false
 *                 +- child
 *
 * before: Filter (ai_if('Q1 {0}', body) OR ai_score('Q2 {0}', body) > 0.5) AND year > 2019
 *           +- child
 * after:  Project [child.output...]
 *           +- Filter (quail_eval#9.flags[0] OR quail_eval#9.scores[0] > 0.5)
 *              +- Project [child.output..., quail_eval(...) AS quail_eval#9]
 *                 +- Sort [body ASC NULLS FIRST], false
 *                    +- Filter (year > 2019)
 *                       +- child
 * </pre>
 *
 * An Aggregate ({@code count_if(ai_if(...))}, {@code avg(ai_score(...))},
 * GROUP BY an AI call) reads the fields the same way; a Sort (ORDER BY
 * ai_score(...) LIMIT k) sorts on them and a Project above it drops the struct.
 * The calls are grouped by their document (their first column argument); each
 * group's quail_eval receives the distinct arguments of its calls and a JSON
 * spec naming each call's function and argument positions, so the executor
 * parses every call as the plain UDF does (the same prompts, each call's NULL
 * rule on its own columns) and asks the questions over one document together,
 * its KV computed once. The struct holds one array per result type (flags,
 * scores, labels, texts of ai_generate / ai_summarize, jsons of ai_extract's quail_extract, which
 * its from_json reads), one element per call of that kind in spec order. Decode calls fuse with the
 * others over the same document: one ai_extract, one ai_generate and two ai_if over {@code body}
 * compute {@code body} once per row.
 *
 * quail_eval is non-deterministic (install() registers it so): Spark neither
 * collapses its Project into the node above, nor pushes filters through it, nor
 * removes the local sort under it (EliminateSorts looks only through
 * deterministic projects). A filter that is a plain AND of one-column ai_if is
 * {@link QuailFilterChain}'s (it runs first); the fused calls leave no user AI
 * call in the node, so applying the rule again changes nothing. Calls nested in
 * another AI call, with no column argument, with a hint that is not literals
 * (it tells the plan nothing; the function reads it per row), or over columns
 * the node's child does not produce (a lambda variable, an outer reference)
 * stay as they are.
 */
public class QuailFuseCalls extends AiRule<LogicalPlan> {
    static final String[] FIELDS = {"flags", "scores", "labels", "texts", "jsons"};

    public QuailFuseCalls(SparkSession session) {
        super(session, LogicalPlan.class);
    }


    @Override
    LogicalPlan rewrite(LogicalPlan p) {
        if (p instanceof Project) return project((Project) p);
        if (p instanceof Aggregate) return aggregate((Aggregate) p);
        if (p instanceof Filter) return filter((Filter) p);
        if (p instanceof Sort) return sort((Sort) p);
        return p;
    }

    private LogicalPlan project(Project p) {
        Fused f = fuse(list(p.projectList()), p.child());
        return f == null ? p : new Project(Catalyst.seq(named(f.replace(list(p.projectList())))), f.below);
    }

    private LogicalPlan aggregate(Aggregate a) {
        List<Expression> exprs = list(a.groupingExpressions());
        int n = exprs.size();
        exprs.addAll(list(a.aggregateExpressions()));
        Fused f = fuse(exprs, a.child());
        if (f == null) return a;
        List<Expression> out = f.replace(exprs);
        return new Aggregate(Catalyst.seq(out.subList(0, n)), Catalyst.seq(named(out.subList(n, out.size()))),
                f.below, a.hint());
    }

    /** The conjuncts with AI calls above the fused evaluation, the others below it. */
    private LogicalPlan filter(Filter flt) {
        List<Expression> ai = new ArrayList<>(), rest = new ArrayList<>();
        for (Expression c : Catalyst.conjuncts(flt.condition())) {
            // other non-deterministic conjuncts keep their place above the sort; quail_chain / quail_join go below
            boolean internal = AiCalls.isInternal(c, AiCalls.CHAIN) || AiCalls.isInternal(c, AiCalls.JOIN);
            (AiCalls.containsAi(c) || !(c.deterministic() || internal) ? ai : rest).add(c);
        }
        if (ai.isEmpty()) return flt;
        LogicalPlan child = rest.isEmpty() ? flt.child() : new Filter(Catalyst.and(rest), flt.child());
        Fused f = fuse(ai, child);
        if (f == null) return flt;
        return new Project(Catalyst.seq(attrs(flt.output())), new Filter(Catalyst.and(f.replace(ai)), f.below));
    }

    private LogicalPlan sort(Sort s) {
        List<Expression> order = list(s.order());
        Fused f = fuse(order, s.child());
        if (f == null) return s;
        List<SortOrder> replaced = new ArrayList<>();
        for (Expression e : f.replace(order)) replaced.add((SortOrder) e);
        Sort sorted = new Sort(Catalyst.seq(replaced), s.global(), f.below, s.hint());
        return new Project(Catalyst.seq(attrs(s.output())), sorted);
    }

    /** The fusable AI calls of {@code exprs}, one quail_eval per document over {@code child}; null if none. */
    private Fused fuse(List<Expression> exprs, LogicalPlan child) {
        Map<Expression, List<PythonUDF>> byDoc = new LinkedHashMap<>();
        for (Expression e : exprs) {
            for (PythonUDF call : calls(e)) {
                List<Expression> cols = columns(call);
                if (cols.isEmpty() || Hints.fromColumns(call)
                    || !call.references().subsetOf(child.outputSet())) continue;
                List<PythonUDF> group = byDoc.computeIfAbsent(cols.get(0).canonicalized(), k -> new ArrayList<>());
                if (group.stream().noneMatch(y -> AiCalls.same(call, y))) group.add(call);
            }
        }
        if (byDoc.isEmpty()) return null;
        Fused f = new Fused(child);
        for (List<PythonUDF> group : byDoc.values()) {
            if (!f.add(group)) return null;
        }
        return f;
    }

    /** The AI calls in {@code e} with no AI call among their arguments (the outer call of a nested pair stays). */
    private static List<PythonUDF> calls(Expression e) {
        List<PythonUDF> out = new ArrayList<>();
        e.foreach(new scala.runtime.AbstractFunction1<Expression, scala.runtime.BoxedUnit>() {
            @Override
            public scala.runtime.BoxedUnit apply(Expression x) {
                if (AiCalls.isAi(x) && list(x.children()).stream().noneMatch(AiCalls::containsAi)) {
                    out.add((PythonUDF) x);
                }
                return scala.runtime.BoxedUnit.UNIT;
            }
        });
        return out;
    }

    /** The column arguments of a call (its non-literal arguments), the document first. */
    private static List<Expression> columns(PythonUDF call) {
        List<Expression> out = new ArrayList<>();
        for (Expression a : list(call.children())) {
            if (!a.foldable() && out.stream().noneMatch(y -> AiCalls.same(a, y))) out.add(a);
        }
        return out;
    }

    /** Field of the struct holding a call's result, by its kind. */
    private static int field(PythonUDF call) {
        switch (AiCalls.kind(call)) {
            case "score": return 1;
            case "classify": return 2;
            case "generate": case "summarize": return 3;
            case "extract": return 4;  // the JSON text, which ai_extract's from_json above reads
            default: return 0;
        }
    }

    /** The evaluations of one node: each group's quail_eval in a Project over a local sort, stacked. */
    private final class Fused {
        LogicalPlan below;
        final List<Expression> calls = new ArrayList<>(), results = new ArrayList<>();

        Fused(LogicalPlan child) {
            below = child;
        }

        boolean add(List<PythonUDF> group) {
            List<Expression> args = new ArrayList<>();
            List<Specs.EvalCall> specCalls = new ArrayList<>();
            int[] perKind = new int[FIELDS.length];
            List<Expression> picks = new ArrayList<>();
            Estimate est = new Estimate(group, below);
            for (int i = 0; i < group.size(); i++) {
                PythonUDF call = group.get(i);
                List<Integer> at = new ArrayList<>();
                for (Expression a : list(call.children())) at.add(indexOf(args, a));
                specCalls.add(new Specs.EvalCall(call.name(), at, template(call), Json.figure(est.perRow[i]),
                    AiCalls.isDecode(call) ? Double.valueOf(Json.figure(AiCalls.outputTokens(call))) : null));
                picks.add(Literal$.MODULE$.apply(perKind[field(call)]++));
            }
            List<Expression> udfArgs = new ArrayList<>();
            udfArgs.add(Catalyst.literal(Json.spec(est.spec(specCalls))));
            udfArgs.addAll(args);
            Expression eval = Catalyst.call(session, AiCalls.EVAL, udfArgs);
            if (eval == null) return false;
            Alias alias = new Alias(eval, AiCalls.EVAL, NamedExpression$.MODULE$.newExprId(),
                    Catalyst.seq(new ArrayList<String>()), Option.empty(), Catalyst.seq(new ArrayList<String>()));
            Attribute q = alias.toAttribute();
            for (int i = 0; i < group.size(); i++) {
                int fld = field(group.get(i));
                calls.add(group.get(i));
                results.add(new GetArrayItem(new GetStructField(q, fld, Option.apply(FIELDS[fld])), picks.get(i), false));
            }
            List<NamedExpression> out = new ArrayList<>(attrs(below.output()));
            out.add(alias);
            below = new Project(Catalyst.seq(out), localSort(group, below));
            return true;
        }

        private LogicalPlan localSort(List<PythonUDF> group, LogicalPlan child) {
            if (AiCalls.userOrdered(child)) return child;  // an ORDER BY's rows keep its order
            List<Expression> keys = new ArrayList<>();
            for (PythonUDF call : group) {
                for (Expression c : QuailFuseCalls.columns(call)) {
                    if (keys.stream().noneMatch(y -> AiCalls.same(c, y))) keys.add(c);
                }
            }
            List<SortOrder> order = new ArrayList<>();
            for (Expression k : keys) {
                order.add(new SortOrder(k, Ascending$.MODULE$, Ascending$.MODULE$.defaultNullOrdering(),
                        Catalyst.seq(new ArrayList<Expression>())));
            }
            return new Sort(Catalyst.seq(order), false, child, Option.empty());
        }

        /** {@code exprs} with every fused call replaced by its field of the struct. */
        List<Expression> replace(List<Expression> exprs) {
            List<Expression> out = new ArrayList<>();
            for (Expression e : exprs) {
                out.add(e.transformUp(new Rewrite<Expression>(x -> {
                    if (!AiCalls.isAi(x)) return null;
                    for (int i = 0; i < calls.size(); i++) {
                        if (AiCalls.same(calls.get(i), x)) return results.get(i);
                    }
                    return null;
                })));
            }
            return out;
        }
    }

    /**
     * The cost model's estimate of one group (AiCost): every row asks every call; the document's
     * KV is computed by the first call and kept, so each later call computes its question (and
     * any other column it places), as a fused chain's later predicates do.
     */
    private static final class Estimate {
        final Expression doc;
        final AiCost.Tokens tokens;
        final double rows;
        final String rowsSource;
        final double[] perRow;
        AiCost.Cost cost = AiCost.ZERO;

        Estimate(List<PythonUDF> group, LogicalPlan child) {
            AiCost model = AiCost.session();
            doc = columns(group.get(0)).get(0);
            Double hinted = null;
            for (PythonUDF c : group) if (hinted == null) hinted = Hints.number(Hints.of(c).get("tokens"));
            tokens = AiCost.docTokens(doc, child, hinted);
            Double known = AiCost.rows(child);
            rows = known != null ? known : AiCost.DEFAULT_ROWS;
            rowsSource = AiCost.rowsSource(child);
            perRow = new double[group.size()];
            for (int i = 0; i < group.size(); i++) {
                PythonUDF call = group.get(i);
                List<Expression> cols = columns(call);
                double ask = AiCalls.askedTokens(call);
                for (int k = 1; k < cols.size(); k++) {
                    ask += AiCost.docTokens(cols.get(k), child,
                        Hints.number(Hints.of(call).get("tokens_" + k))).tokens;
                }
                AiCost.Cost one = AiCalls.isDecode(call)
                    ? model.decode(tokens.tokens, ask, i > 0, AiCalls.outputTokens(call),
                        AiCalls.kind(call).equals("extract") ? AiCalls.extractFields(call) : 1)
                    : model.filter(tokens.tokens, ask, i > 0);
                perRow[i] = one.seconds;
                cost = cost.plus(one.times(rows));
            }
        }

        /** The spec of {@code calls} with this estimate: the document, its tokens, the rows and the cost. */
        Specs.Eval spec(List<Specs.EvalCall> calls) {
            return new Specs.Eval(calls, doc.sql(), Json.figure(tokens.tokens), tokens.source, Json.figure(rows),
                rowsSource, cost.spec());
        }
    }

    /** A call's template (its literal first argument), '{0}' for a call without one (ai_classify(col, labels),
     * ai_summarize, ai_extract: the document is the question, as gpu_worker.ai_calls.Call reads them), else "". */
    private static String template(PythonUDF call) {
        Expression first = call.children().apply(0);
        Object v = first.foldable() && !Hints.isHint(first.dataType()) ? first.eval(null) : null;
        if (v instanceof org.apache.spark.unsafe.types.UTF8String) return v.toString();
        String k = AiCalls.kind(call);
        return k.equals("classify") || k.equals("summarize") || k.equals("extract") ? "{0}" : "";
    }

    private static int indexOf(List<Expression> args, Expression e) {
        for (int i = 0; i < args.size(); i++) {
            if (AiCalls.same(args.get(i), e)) return i;
        }
        args.add(e);
        return args.size() - 1;
    }

    private static List<Expression> list(scala.collection.Seq<?> xs) {
        List<Expression> out = new ArrayList<>();
        for (Object x : CollectionConverters.asJava(xs)) out.add((Expression) x);
        return out;
    }

    private static List<NamedExpression> attrs(scala.collection.Seq<Attribute> xs) {
        return new ArrayList<NamedExpression>(CollectionConverters.asJava(xs));
    }

    private static List<NamedExpression> named(List<Expression> xs) {
        List<NamedExpression> out = new ArrayList<>();
        for (Expression x : xs) out.add((NamedExpression) x);
        return out;
    }
}
