package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.ArrayFilter;
import org.apache.spark.sql.catalyst.expressions.ArrayTransform;
import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetArrayItem;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LambdaFunction;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.NamedLambdaVariable;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression$;
import org.apache.spark.sql.catalyst.expressions.aggregate.CollectList;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType$;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The partner rows that match each row of a preserved side under a condition with
 * AI predicates: the building block of outer, semi and anti AI joins (the rules
 * {@link QuailOuterJoin} and {@link QuailAiSubquery}).
 *
 * <pre>
 * preserved p, partner q, condition (p.k = q.k AND q.n &lt; 3 AND ai_if('Does {0} mention {1}?', p.body, q.term)):
 *
 * Project [p.*, filter(parts, (x, i) -&gt; m0[i]) AS matched]
 * +- Project [p.*, parts, quail_match(spec, transform(parts, x -&gt; p.body), transform(parts, x -&gt; x.term)) AS m0]
 *    +- Project [p.*, filter(coalesce(parts, []), x -&gt; x.n &lt; 3) AS parts]
 *       +- Join LeftOuter, (p.k = k0)                  (no equality conjunct: no key, one partner row)
 *          :- p
 *          +- Aggregate [q.k AS k0], [q.k AS k0, collect_list(struct(q.*)) AS parts]
 *             +- q
 * </pre>
 *
 * Each preserved row appears once, with the list of its partner rows (equality
 * conjuncts of the condition group the partners, a hash join; otherwise every row
 * sees the one list of all partners); relational conjuncts thin the list; one
 * {@code quail_match} call per AI predicate evaluates it on every (row, partner)
 * pair through gpu_worker/ai_calls (the one renderer and NULL rule); the matched
 * partners are those for which the whole condition is TRUE (a NULL is not a match).
 *
 * <p>An AI call that quail_match does not evaluate pairwise (ai_classify, a decode call, or a call
 * holding one) reading one side only is that side's column, evaluated once per row below the
 * match as in a SELECT list: {@code ai_if('Is {0} related to {1}?', ai_classify(q.term, ...), p.grp)}
 * reads {@code q.quail_side0}, a column of Project [q.*, ai_classify(q.term, ...) AS quail_side0] over q.
 * One that reads both sides is refused, naming it.
 */
final class PartnerMatch {
    /** preserved.output followed by {@link #matched}. */
    final LogicalPlan plan;
    /** array&lt;struct&lt;c0, c1, ...&gt;&gt;: the matching partner rows, fields in partner output order. */
    final Attribute matched;
    final List<Attribute> partner;

    private PartnerMatch(LogicalPlan plan, Attribute matched, List<Attribute> partner) {
        this.plan = plan;
        this.matched = matched;
        this.partner = partner;
    }

    /** Whether {@code cond} holds an AI call this rewrite evaluates pairwise (an ai_if / ai_filter). */
    static boolean applies(Expression cond) {
        return AiCalls.containsAi(cond);
    }

    /** The plan of matches, or null when quail_match cannot evaluate the condition's AI calls (an odd
     *  hint, a non-string argument) or install() did not register it in this session. An AI call it does
     *  not evaluate pairwise over one side is that side's column; over both sides, refused. */
    static PartnerMatch build(SparkSession session, LogicalPlan preserved, LogicalPlan partnerPlan,
                              Expression cond) {
        // calls quail_match does not evaluate, over one side: that side's columns (the partner's last in its rows)
        List<Alias> pCalls = new ArrayList<>(), qCalls = new ArrayList<>();
        cond = oneSided(cond, preserved.outputSet(), partnerPlan.outputSet(), pCalls, qCalls);
        List<Attribute> partnerOut = CollectionConverters.asJava(partnerPlan.output());
        LogicalPlan output = preserved;  // the match's rows: preserved.output, then matched
        if (!pCalls.isEmpty()) preserved = project(preserved, pCalls, preserved);
        if (!qCalls.isEmpty()) partnerPlan = project(partnerPlan, qCalls, partnerPlan);

        AttributeSet pSide = preserved.outputSet(), qSide = partnerPlan.outputSet();
        List<Expression> pKeys = new ArrayList<>(), qKeys = new ArrayList<>(), rel = new ArrayList<>(),
            ai = new ArrayList<>();
        List<Boolean> nullSafe = new ArrayList<>();
        for (Expression c : Catalyst.conjuncts(cond)) {
            Expression[] key = equiKey(c, pSide, qSide);
            if (key != null) {
                pKeys.add(key[0]);
                qKeys.add(key[1]);
                nullSafe.add(c instanceof EqualNullSafe);
            } else if (AiCalls.containsAi(c)) {
                ai.add(c);
            } else {
                rel.add(c);
            }
        }
        List<PythonUDF> calls = aiCalls(ai);
        if (calls == null) return null;  // none left over both sides: Spark evaluates a one-sided call on its side

        List<Attribute> q = CollectionConverters.asJava(partnerPlan.output());
        List<Expression> fields = new ArrayList<>();
        for (int i = 0; i < q.size(); i++) {
            fields.add(Catalyst.literal("c" + i));
            fields.add(q.get(i));
        }
        Expression struct = new CreateNamedStruct(Catalyst.seq(fields));
        ArrayType partsType = new ArrayType(struct.dataType(), false);

        // partners grouped by the equality keys: at most one group per preserved row
        List<NamedExpression> aggs = new ArrayList<>();
        List<Expression> joinKeys = new ArrayList<>();
        for (int i = 0; i < qKeys.size(); i++) {
            Alias k = alias(qKeys.get(i), "quail_key" + i);
            aggs.add(k);
            Expression pk = pKeys.get(i), qk = k.toAttribute();
            joinKeys.add(nullSafe.get(i) ? new EqualNullSafe(pk, qk) : new EqualTo(pk, qk));
        }
        Alias parts = alias(AggregateExpression$.MODULE$.apply(new CollectList(struct), Complete$.MODULE$, false,
            Option.empty()), "quail_partners");
        aggs.add(parts);
        LogicalPlan grouped = new Aggregate(Catalyst.seq(qKeys), Catalyst.seq(aggs), partnerPlan, Option.empty());
        Option<Expression> on = joinKeys.isEmpty() ? Option.empty() : Option.apply(Catalyst.and(joinKeys));
        LogicalPlan joined = new Join(preserved, grouped, LeftOuter$.MODULE$, on, JoinHint$.MODULE$.NONE());

        // no group (no partner with this key): the empty list; relational conjuncts thin it
        Attribute grouped0 = parts.toAttribute().withNullability(true);  // NULL: the outer join found no group
        Expression list = new If(new IsNull(grouped0), Literal.create(new GenericArrayData(new Object[0]), partsType),
            grouped0);
        if (!rel.isEmpty()) list = new ArrayFilter(list, lambda(Catalyst.and(rel), q, struct.dataType(), null));
        Alias thinned = alias(list, "quail_partners");
        LogicalPlan withParts = project(preserved, List.of(thinned), joined);
        Attribute partsAttr = thinned.toAttribute();

        // one quail_match per AI call: its answer on every (row, partner) pair; a call whose argument
        // holds another AI call (CASE WHEN ai_if(...) THEN ...) is evaluated after it, reading its answers
        List<PythonUDF> ordered = new ArrayList<>();
        List<Alias> answers = new ArrayList<>();
        List<NamedExpression> carried = new ArrayList<>(List.of(partsAttr));
        LogicalPlan evaluated = withParts;
        for (List<PythonUDF> layer : layers(calls)) {
            List<Alias> here = new ArrayList<>();
            for (PythonUDF call : layer) {
                Expression m = matchCall(session, call, partsAttr, q, struct.dataType(), ordered, answers);
                if (m == null) return null;
                here.add(alias(m, AiCalls.MATCH + (answers.size() + here.size())));
            }
            evaluated = project(preserved, concat(carried, here), evaluated);
            for (Alias a : here) carried.add(a.toAttribute());
            ordered.addAll(layer);
            answers.addAll(here);
        }
        calls = ordered;

        // matched = the partners for which the whole AI condition is TRUE
        Expression aiCond = Catalyst.and(ai);
        NamedLambdaVariable index = index();
        Expression byPair = replaceCalls(aiCond, calls, answers, index);
        Expression matchedExpr = new ArrayFilter(partsAttr, lambda(byPair, q, struct.dataType(), index));
        Alias matched = alias(matchedExpr, "quail_matched");
        LogicalPlan out = project(output, List.of(matched), evaluated);
        return new PartnerMatch(out, matched.toAttribute(), partnerOut);
    }

    /**
     * {@code cond} with each AI call that quail_match does not evaluate (see {@link #pairwise}), or that holds
     * one, and that reads one side only, replaced by a new column of that side ({@code pCalls}, {@code qCalls}:
     * the calls aliased, one per distinct call); outermost calls first.
     */
    private static Expression oneSided(Expression cond, AttributeSet pSide, AttributeSet qSide, List<Alias> pCalls,
                                       List<Alias> qCalls) {
        return cond.transformDown(new Rewrite<Expression>(e -> {
            if (!AiCalls.isAi(e) || !e.exists(x -> AiCalls.isAi(x) && !pairwise(x))) return null;
            boolean partner = e.references().subsetOf(qSide);
            if (!partner && !e.references().subsetOf(pSide)) {
                if (pairwise(e)) return null;  // the calls it holds are its arguments' business
                throw Catalyst.analysisError(e.sql() + " reads columns of both sides of an outer, semi or anti"
                    + " join's ON (or of a correlated EXISTS / IN subquery and its query): on each pair of rows"
                    + " only ai_if, ai_filter and ai_score are evaluated; call it over the columns of one side");
            }
            List<Alias> side = partner ? qCalls : pCalls;
            for (Alias a : side) {
                if (AiCalls.same(a.child(), e)) return a.toAttribute();
            }
            Alias a = alias(e, "quail_side" + (pCalls.size() + qCalls.size()));
            side.add(a);
            return a.toAttribute();
        }));
    }

    /** Whether quail_match evaluates {@code call} on each pair: an ai_if / ai_filter / ai_score (a literal
     *  template, or each row's). */
    private static boolean pairwise(Expression call) {
        return AiCalls.predicate(call) != null || AiCalls.score(call) != null || AiCalls.rowTemplate(call) != null;
    }

    /** (preserved side, partner side) of an equality between the two sides, else null. */
    private static Expression[] equiKey(Expression c, AttributeSet pSide, AttributeSet qSide) {
        if (!(c instanceof EqualTo || c instanceof EqualNullSafe) || AiCalls.containsAi(c) || !c.deterministic()) {
            return null;
        }
        Expression l = c.children().apply(0), r = c.children().apply(1);
        if (on(l, pSide) && on(r, qSide)) return new Expression[] {l, r};
        if (on(r, pSide) && on(l, qSide)) return new Expression[] {r, l};
        return null;
    }

    private static boolean on(Expression e, AttributeSet side) {
        return !e.references().isEmpty() && e.references().subsetOf(side);
    }

    /** The AI calls of the conjuncts, each an ai_if / ai_filter / ai_score (a literal template, or each
     *  row's, see {@link AiCalls#rowTemplate}); else (another call, or none) null. */
    private static List<PythonUDF> aiCalls(List<Expression> conjuncts) {
        List<PythonUDF> out = new ArrayList<>();
        boolean[] ok = {true};
        for (Expression c : conjuncts) {
            c.foreach(new scala.runtime.AbstractFunction1<Expression, scala.runtime.BoxedUnit>() {
                @Override
                public scala.runtime.BoxedUnit apply(Expression x) {
                    if (AiCalls.isAi(x)) {
                        if (!pairwise(x)) ok[0] = false;
                        else if (out.stream().noneMatch(y -> AiCalls.same(x, y))) out.add((PythonUDF) x);
                    }
                    return scala.runtime.BoxedUnit.UNIT;
                }
            });
        }
        return ok[0] && !out.isEmpty() ? out : null;
    }

    /**
     * The calls in layers: each call after the AI calls its arguments hold (the first layer holds none),
     * so a call's arguments read the answers of earlier layers; one layer when nothing is nested.
     */
    private static List<List<PythonUDF>> layers(List<PythonUDF> calls) {
        List<List<PythonUDF>> out = new ArrayList<>();
        List<PythonUDF> left = new ArrayList<>(calls), done = new ArrayList<>();
        while (!left.isEmpty()) {
            List<PythonUDF> ready = new ArrayList<>();
            for (PythonUDF c : left) {
                if (nested(c).stream().allMatch(n -> done.stream().anyMatch(d -> AiCalls.same(d, n)))) ready.add(c);
            }
            left.removeAll(ready);
            done.addAll(ready);
            out.add(ready);
        }
        return out;
    }

    /** The AI calls inside the arguments of {@code call}. */
    private static List<Expression> nested(PythonUDF call) {
        List<Expression> out = new ArrayList<>();
        for (Expression arg : CollectionConverters.asJava(call.children())) {
            arg.foreach(new scala.runtime.AbstractFunction1<Expression, scala.runtime.BoxedUnit>() {
                @Override
                public scala.runtime.BoxedUnit apply(Expression x) {
                    if (AiCalls.isAi(x)) out.add(x);
                    return scala.runtime.BoxedUnit.UNIT;
                }
            });
        }
        return out;
    }

    private static NamedLambdaVariable index() {
        return new NamedLambdaVariable("i", IntegerType$.MODULE$, false, NamedExpression$.MODULE$.newExprId(),
            new java.util.concurrent.atomic.AtomicReference<>());
    }

    /**
     * quail_match(spec, transform(parts, x -&gt; col0), ...): the call's answer per partner, as an array
     * (quail_match_score: an ai_score call's scores, which the condition then compares as written).
     * An AI call inside an argument is read from its answers ({@code done}, {@code answers}) at the
     * partner's index: {@code transform(parts, (x, i) -> CASE WHEN m0[i] THEN x.c1 END)}.
     */
    private static Expression matchCall(SparkSession session, PythonUDF call, Attribute parts, List<Attribute> q,
                                        DataType elem, List<PythonUDF> done, List<Alias> answers) {
        boolean score = AiCalls.isScore(call);
        AiCalls.Predicate p = score ? AiCalls.score(call) : AiCalls.predicate(call);
        Double anchorArg = Hints.number(Hints.of(call).get(QuailAnchorHint.FIELD));
        // p == null: each row's template, read from a column: one more per-pair list, first
        List<Expression> cols = p == null ? AiCalls.rowTemplate(call) : p.columns;
        Specs.Match spec = new Specs.Match(p == null ? Boolean.TRUE : null, p == null ? null : p.template,
            anchorArg == null ? null : anchorArg.intValue(), score ? "score" : null);
        List<Expression> args = new ArrayList<>();
        args.add(Catalyst.literal(Json.spec(spec)));
        for (Expression col : cols) {
            if (!(col.dataType() instanceof StringType)) return null;
            NamedLambdaVariable i = AiCalls.containsAi(col) ? index() : null;
            Expression body = i == null ? col : replaceCalls(col, done, answers, i);
            args.add(new ArrayTransform(parts, lambda(body, q, elem, i)));
        }
        return Catalyst.call(session, score ? AiCalls.MATCH_SCORE : AiCalls.MATCH, args);
    }

    /** A lambda over a partner struct x (and its index): partner attributes read as x's fields. */
    private static LambdaFunction lambda(Expression body, List<Attribute> q, DataType elem, NamedLambdaVariable index) {
        NamedLambdaVariable x = new NamedLambdaVariable("x", elem, false, NamedExpression$.MODULE$.newExprId(),
            new java.util.concurrent.atomic.AtomicReference<>());
        StructType st = (StructType) elem;
        Expression fn = body.transform(new Rewrite<Expression>(e -> {
            if (!(e instanceof Attribute)) return null;
            for (int i = 0; i < q.size(); i++) {
                if (q.get(i).exprId().equals(((Attribute) e).exprId())) {
                    return new GetStructField(x, i, Option.apply(st.fields()[i].name()));
                }
            }
            return null;
        }));
        List<NamedExpression> vars = new ArrayList<>(List.of(x));
        if (index != null) vars.add(index);
        return new LambdaFunction(fn, Catalyst.seq(vars), false);
    }

    /** The condition with each AI call read from its answers at the partner's index. */
    private static Expression replaceCalls(Expression cond, List<PythonUDF> calls, List<Alias> answers,
                                           NamedLambdaVariable index) {
        return cond.transform(new Rewrite<Expression>(e -> {
            for (int k = 0; k < calls.size(); k++) {
                if (AiCalls.same(calls.get(k), e)) {
                    return new GetArrayItem(answers.get(k).toAttribute(), index, false);
                }
            }
            return null;
        }));
    }

    static Alias alias(Expression e, String name) {
        return alias(e, name, NamedExpression$.MODULE$.newExprId());
    }

    /** An alias with a given id (a rewritten plan keeps the ids its parents read). */
    static Alias alias(Expression e, String name, ExprId id) {
        return new Alias(e, name, id, Catalyst.seq(new ArrayList<String>()), Option.empty(),
            Catalyst.seq(new ArrayList<String>()));
    }

    /** Project [child's preserved columns ++ extra] over child. */
    static LogicalPlan project(LogicalPlan preserved, List<? extends NamedExpression> extra, LogicalPlan child) {
        List<NamedExpression> cols = new ArrayList<>(CollectionConverters.asJava(preserved.output()));
        cols.addAll(extra);
        return new Project(Catalyst.seq(cols), child);
    }

    private static List<NamedExpression> concat(List<? extends NamedExpression> a, List<? extends NamedExpression> b) {
        List<NamedExpression> out = new ArrayList<>(a);
        out.addAll(b);
        return out;
    }
}
