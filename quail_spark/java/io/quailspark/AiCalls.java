package io.quailspark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.Length;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Offset;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.NumericType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.StringType;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * What the rules share: recognising AI calls, their hints, conjuncts, and
 * building calls of the internal Python UDFs that install() registers
 * ({@link #INTERNAL}, as gpu_worker.ai_calls.INTERNAL lists them).
 */
final class AiCalls {
    static final String ENABLED = "spark.quail.optimizer.enabled";
    static final String CHAIN = Contract.internal("quail_chain");
    static final String JOIN = Contract.internal("quail_join");
    static final String EVAL = Contract.internal("quail_eval");
    static final String MATCH = Contract.internal("quail_match");
    static final String MATCH_SCORE = Contract.internal("quail_match_score");
    static final String JOIN_SCORE = Contract.internal("quail_join_score");
    static final List<String> INTERNAL = Contract.INTERNAL;

    private AiCalls() {}

    static boolean enabled() {
        return !"false".equalsIgnoreCase(SQLConf.get().getConfString(ENABLED, "true").trim());
    }

    /**
     * The AI functions as install() registers them, by kind: gpu_worker.ai_calls.FUNCTIONS through the
     * jar's contract (ai_extract is {@link AiExtractFunction}: from_json over the registered
     * {@code quail_extract}, EXTRACT_UDF).
     */
    static final Map<String, String> KINDS = Contract.KINDS;
    /** Output tokens a decode call allows when its hint does not say (gpu_worker.ai_calls.DEFAULT_MAX_TOKENS). */
    static final int GENERATE_TOKENS = Contract.GENERATE_TOKENS, FIELD_TOKENS = Contract.FIELD_TOKENS,
        SUMMARY_WORDS = Contract.SUMMARY_WORDS;

    /** A user-visible AI function call (ai_if, ai_filter, ai_score, ai_classify, ai_generate, ai_summarize,
     * and quail_extract, the call inside ai_extract's from_json). */
    static boolean isAi(Expression e) {
        return kind(e) != null;
    }

    /** The kind of an AI call (if, score, classify, generate, summarize, extract), else null. */
    static String kind(Expression e) {
        if (!(e instanceof PythonUDF)) return null;
        return KINDS.get(((PythonUDF) e).name().toLowerCase(Locale.ROOT));
    }

    /** A call that decodes text (ai_generate, ai_summarize, ai_extract's quail_extract). */
    static boolean isDecode(Expression e) {
        String k = kind(e);
        return k != null && (k.equals("generate") || k.equals("summarize") || k.equals("extract"));
    }

    /**
     * A decode call's output tokens at most, the cost model's estimate of what it decodes: ai_generate's
     * max_tokens hint (default 128); ai_summarize's 2 * max_words + 16 (gpu_worker.ai_calls.Call.output_tokens);
     * ai_extract's fields x the per-field max_tokens (default 32). 0 for the other calls.
     */
    static double outputTokens(PythonUDF call) {
        String k = kind(call);
        if (k == null) return 0;
        Double hinted = number(hintsOf(call).get("max_tokens"));
        List<Expression> args = CollectionConverters.asJava(call.children());
        switch (k) {
            case "generate": return hinted != null ? hinted : GENERATE_TOKENS;
            case "summarize": {
                Object n = args.size() > 1 && args.get(1).foldable() ? args.get(1).eval(null) : null;
                return 2.0 * (n instanceof Number ? ((Number) n).doubleValue() : SUMMARY_WORDS) + 16;
            }
            case "extract": return extractFields(call) * (hinted != null ? hinted : FIELD_TOKENS);
            default: return 0;
        }
    }

    /** The number of fields of a quail_extract call (its schema argument, Spark's JSON of the struct). */
    static int extractFields(PythonUDF call) {
        Expression schema = call.children().apply(1);
        if (!schema.foldable()) return 1;
        try {
            return ((StructType) DataType.fromJson(String.valueOf(schema.eval(null)))).fields().length;
        } catch (RuntimeException e) {
            return 1;
        }
    }

    static boolean isPredicate(Expression e) {
        return "if".equals(kind(e));
    }

    static boolean isScore(Expression e) {
        return "score".equals(kind(e));
    }

    static boolean isInternal(Expression e, String name) {
        return e instanceof PythonUDF && ((PythonUDF) e).name().equalsIgnoreCase(name);
    }

    /** A call of any of the internal UDFs the rules make. */
    static boolean isInternal(Expression e) {
        return INTERNAL.stream().anyMatch(name -> isInternal(e, name));
    }

    /**
     * The same expression up to expression ids. Unlike {@code semanticEquals}, true for
     * non-deterministic ones too: an AI call held in place is marked so ({@link QuailKeepRepartition},
     * {@link QuailEvaluateOnce}) and is still one call wherever it is repeated.
     */
    static boolean same(Expression a, Expression b) {
        return a.canonicalized().equals(b.canonicalized());
    }

    /**
     * Whether the rows of {@code p} come in an order the query asked for: a global sort (ORDER BY),
     * seen through the nodes that keep their child's order (Project, Filter, a subquery alias, LIMIT,
     * OFFSET). A local sort put over such rows would change the order, and which rows a LIMIT
     * above keeps: no local sort goes there.
     */
    static boolean userOrdered(LogicalPlan p) {
        while (true) {
            if (p instanceof Sort) return ((Sort) p).global();
            if (!(p instanceof Project || p instanceof Filter || p instanceof SubqueryAlias
                    || p instanceof LocalLimit || p instanceof GlobalLimit || p instanceof Offset)) return false;
            p = p.children().head();
        }
    }

    static boolean containsAi(Expression e) {
        return e.exists(new scala.runtime.AbstractFunction1<Expression, Object>() {
            @Override
            public Object apply(Expression x) {
                return isAi(x);
            }
        });
    }

    /**
     * One AI predicate: literal template, column arguments, hints (as written, keys lower-cased);
     * for a score comparison such as {@code ai_score(...) > x} (see {@link #scoreCompared}) the operator
     * with the score on its left ({@code >}, {@code >=}, {@code <}, {@code <=}) and the bound x.
     */
    static final class Predicate {
        final PythonUDF udf;
        final String template;
        final List<Expression> columns;
        final Map<String, String> hints;
        final String scoreOp;
        final Double scoreBound;

        Predicate(PythonUDF udf, String template, List<Expression> columns, Map<String, String> hints) {
            this(udf, template, columns, hints, null, null);
        }

        Predicate(PythonUDF udf, String template, List<Expression> columns, Map<String, String> hints,
                  String scoreOp, Double scoreBound) {
            this.udf = udf;
            this.template = template;
            this.columns = columns;
            this.hints = hints;
            this.scoreOp = scoreOp;
            this.scoreBound = scoreBound;
        }

        /** Whether this and {@code o} are comparisons of the same ai_score call (two bounds of one range). */
        boolean sameScore(Predicate o) {
            return scoreOp != null && o.scoreOp != null && same(udf, o.udf);
        }

        /** The selectivity hint, else the default (written once, in AiCost). */
        double selectivity() {
            Double h = number(hints.get("selectivity"));
            return h != null ? h : AiCost.DEFAULT_SELECTIVITY;
        }

        String selectivitySource() {
            return number(hints.get("selectivity")) != null ? "hint" : "default";
        }

        /** The column argument the anchor hint names (resolved by QuailAnchorHint), or null. */
        Integer anchorArg() {
            Double a = number(hints.get(QuailAnchorHint.FIELD));
            return a == null ? null : a.intValue();
        }

        /** The tokens hint of column argument {@code i}: 'tokens' for {0}, 'tokens_1' for {1} ... */
        Double tokensHint(int i) {
            return number(hints.get(i == 0 ? "tokens" : "tokens_" + i));
        }

        /** Tokens of the template's question (its text without the placeholders' documents). */
        double questionTokens() {
            return AiCost.textTokens(template);
        }
    }

    /** The predicate of an ai_if/ai_filter call with a literal template, else null. */
    static Predicate predicate(Expression e) {
        return isPredicate(e) ? parsed((PythonUDF) e) : null;
    }

    /**
     * {@code ai_score(...) > x}, {@code >=}, {@code <} or {@code <=}, the score on either side, with a
     * literal template and a literal bound, as a predicate carrying the comparison (the score on its
     * left: {@code x < ai_score(...)} is {@code ai_score(...) > x}); else null. The score is P(yes) of
     * the same prompt as ai_if's, so the comparison is evaluated on it as written.
     */
    static Predicate scoreCompared(Expression c) {
        Compared s = compared(c);
        if (s == null || !s.bound.foldable() || !(s.bound.dataType() instanceof NumericType)) return null;
        Object x = s.bound.eval(null);
        if (x == null) return null;
        Predicate p = s.score;
        return new Predicate(p.udf, p.template, p.columns, p.hints, s.op(), Double.valueOf(x.toString()));
    }

    /**
     * {@code ai_score(...) > e}, {@code >=}, {@code <} or {@code <=}, the score on either side, where
     * {@code e} is not a literal (a column, an expression of columns) and holds no AI call: the
     * comparison with its score's call as a predicate (no bound: Spark compares each row's score with
     * its {@code e}); else null.
     */
    static Compared scoreAgainstColumn(Expression c) {
        Compared s = compared(c);
        if (s == null || s.bound.foldable() || !(s.bound.dataType() instanceof NumericType) || containsAi(s.bound)
            || !s.bound.deterministic()) return null;
        return s;
    }

    /** An ordering comparison of an ai_score call (literal template) with {@code bound}, the other side. */
    record Compared(BinaryComparison comparison, Predicate score, Expression bound, boolean scoreLeft) {
        /** The operator as read with the score on the left ({@code x < ai_score(...)} is {@code >}). */
        String op() {
            Expression c = comparison;
            boolean greater = c instanceof GreaterThan || c instanceof GreaterThanOrEqual;
            boolean orEqual = c instanceof GreaterThanOrEqual || c instanceof LessThanOrEqual;
            return (greater == scoreLeft ? ">" : "<") + (orEqual ? "=" : "");
        }
    }

    private static Compared compared(Expression c) {
        if (!(c instanceof GreaterThan || c instanceof GreaterThanOrEqual
              || c instanceof LessThan || c instanceof LessThanOrEqual)) return null;
        BinaryComparison b = (BinaryComparison) c;
        boolean scoreLeft = score(b.left()) != null;
        Predicate p = scoreLeft ? score(b.left()) : score(b.right());
        return p == null ? null : new Compared(b, p, scoreLeft ? b.right() : b.left(), scoreLeft);
    }

    /** The quail_join_score call that conjunct {@code c} compares (either side), else null. */
    static PythonUDF comparedJoinScore(Expression c) {
        if (!(c instanceof BinaryComparison)) return null;
        for (Expression k : CollectionConverters.asJava(c.children())) {
            if (isInternal(k, JOIN_SCORE)) return (PythonUDF) k;
        }
        return null;
    }

    /** An ai_score call with a literal template, as a predicate (no bound), else null. */
    static Predicate score(Expression e) {
        return isScore(e) ? parsed((PythonUDF) e) : null;
    }

    /**
     * The template and document columns of an ai_if / ai_filter / ai_score whose template is an
     * expression (a column of questions: each row its own), a literal hint dropped; else null.
     */
    static List<Expression> rowTemplate(Expression e) {
        if (!isPredicate(e) && !isScore(e)) return null;
        List<Expression> args = withoutHint((PythonUDF) e);
        if (args == null || args.size() < 2 || args.get(0).foldable()
            || !(args.get(0).dataType() instanceof StringType)) return null;
        return args;
    }

    private static Predicate parsed(PythonUDF udf) {
        List<Expression> args = withoutHint(udf);
        if (args == null || args.size() < 2 || !args.get(0).foldable()
            || !(args.get(0).dataType() instanceof StringType)) return null;
        Object t = args.get(0).eval(null);
        if (t == null) return null;
        return new Predicate(udf, t.toString(), new ArrayList<>(args.subList(1, args.size())), hintsOf(udf));
    }

    /** A call's arguments without its hint (a map or struct last); null when that hint is not a literal. */
    private static List<Expression> withoutHint(PythonUDF udf) {
        List<Expression> args = new ArrayList<>(CollectionConverters.asJava(udf.children()));
        if (!args.isEmpty() && isHint(args.get(args.size() - 1).dataType())) {
            if (!args.get(args.size() - 1).foldable()) return null;
            args.remove(args.size() - 1);
        }
        return args;
    }

    /** Whether a call's hint (a map or struct last) is not made of literals: {@code map('selectivity', col)}. */
    static boolean columnHint(PythonUDF call) {
        List<Expression> args = CollectionConverters.asJava(call.children());
        return !args.isEmpty() && isHint(args.get(args.size() - 1).dataType()) && !args.get(args.size() - 1).foldable();
    }

    /** The hints of any AI call (its foldable last argument when that is a map or struct), else empty. */
    static Map<String, String> hintsOf(PythonUDF call) {
        List<Expression> args = CollectionConverters.asJava(call.children());
        if (args.isEmpty()) return new LinkedHashMap<>();
        Expression last = args.get(args.size() - 1);
        return isHint(last.dataType()) && last.foldable() ? hints(last) : new LinkedHashMap<>();
    }

    /** Tokens of the literal text of an AI call (template, labels), hints excluded: what it asks. */
    static double askedTokens(PythonUDF call) {
        StringBuilder text = new StringBuilder();
        for (Expression a : CollectionConverters.asJava(call.children())) {
            if (!a.foldable() || isHint(a.dataType())) continue;
            Object v = a.eval(null);
            if (v != null) text.append(v instanceof ArrayData ? a.sql() : v.toString());
        }
        return AiCost.textTokens(text.toString());
    }

    /** The optional last argument of an AI call is a hint: map('selectivity', ...) or its named_struct. */
    static boolean isHint(DataType t) {
        return t instanceof MapType || t instanceof StructType;
    }

    /**
     * The AI call {@code e} (an ai_if, or the ai_score of a score comparison) with {@code key} set in
     * its hint: a named_struct of the hints it has, as text (every reader parses them from text), and
     * the new one.
     */
    static Expression withHint(Expression e, String key, Expression value) {
        Predicate p = predicate(e);
        if (p == null && scoreCompared(e) != null) {  // a score comparison: its ai_score call gains the hint
            List<Expression> kids = new ArrayList<>();
            for (Expression k : CollectionConverters.asJava(e.children())) {
                Predicate s = score(k);
                kids.add(s == null ? k : hinted(s, key, value));
            }
            return e.withNewChildren(seq(kids));
        }
        return p == null ? e : hinted(p, key, value);
    }

    private static Expression hinted(Predicate p, String key, Expression value) {
        List<Expression> args = new ArrayList<>(CollectionConverters.asJava(p.udf.children()));
        if (isHint(args.get(args.size() - 1).dataType())) args.remove(args.size() - 1);
        List<Expression> kv = new ArrayList<>();
        for (Map.Entry<String, String> h : p.hints.entrySet()) {
            if (h.getKey().equals(key)) continue;
            kv.add(literal(h.getKey()));
            kv.add(literal(h.getValue()));
        }
        kv.add(literal(key));
        kv.add(value);
        args.add(new org.apache.spark.sql.catalyst.expressions.CreateNamedStruct(seq(kv)));
        // a copy, not withNewChildren: a call written without a hint gains an argument
        PythonUDF u = p.udf;
        return u.copy(u.name(), u.func(), u.dataType(), seq(args), u.evalType(), u.udfDeterministic(), u.resultId());
    }

    /** A foldable hint's keys (lower-cased) and values as text, in the order written. */
    static Map<String, String> hints(Expression hint) {
        Map<String, String> out = new LinkedHashMap<>();
        Object v = hint.eval(null);
        if (hint.dataType() instanceof MapType && v instanceof MapData) {
            MapType type = (MapType) hint.dataType();
            MapData m = (MapData) v;
            ArrayData keys = m.keyArray(), values = m.valueArray();
            for (int i = 0; i < m.numElements(); i++) {
                Object k = keys.get(i, type.keyType()), x = values.get(i, type.valueType());
                if (k != null && x != null) out.put(k.toString().toLowerCase(Locale.ROOT), x.toString());
            }
        } else if (hint.dataType() instanceof StructType && v instanceof InternalRow) {
            StructType type = (StructType) hint.dataType();
            for (int i = 0; i < type.fields().length; i++) {
                if (((InternalRow) v).isNullAt(i)) continue;
                Object x = ((InternalRow) v).get(i, type.fields()[i].dataType());
                out.put(type.fields()[i].name().toLowerCase(Locale.ROOT), x.toString());
            }
        }
        return out;
    }

    static Double number(String v) {
        try {
            return v == null ? null : Double.valueOf(v);
        } catch (NumberFormatException ex) {
            return null;
        }
    }

    /**
     * The document a quail_chain / quail_join / quail_join_score call places first in each row's
     * prompt, as the renderer does: the chain's document; a join's hinted column (anchor_arg in its spec), else
     * the longer of two values (a tie keeps template order); {0} of three or more columns.
     */
    static Expression placedFirst(PythonUDF internal) {
        List<Expression> args = CollectionConverters.asJava(internal.children());
        boolean join = isInternal(internal, JOIN) || isInternal(internal, JOIN_SCORE);
        if (!join || args.size() != 3) return args.get(1);
        com.fasterxml.jackson.databind.JsonNode spec = Json.read(String.valueOf(args.get(0).eval(null)));
        if (spec != null && spec.path("anchor_arg").canConvertToInt()) {
            return args.get(1 + spec.path("anchor_arg").asInt());
        }
        Expression c0 = args.get(1), c1 = args.get(2);
        return new If(new GreaterThan(new Length(c1), new Length(c0)), c1, c0);
    }

    static List<Expression> conjuncts(Expression e) {
        List<Expression> out = new ArrayList<>();
        if (e instanceof And) {
            out.addAll(conjuncts(((And) e).left()));
            out.addAll(conjuncts(((And) e).right()));
        } else {
            out.add(e);
        }
        return out;
    }

    static Expression and(List<Expression> es) {
        Expression out = null;
        for (Expression e : es) out = out == null ? e : new And(out, e);
        return out;
    }

    /** A call of a function registered in this session (install() registers the internal UDFs), or null. */
    static Expression call(SparkSession session, String name, List<Expression> args) {
        try {
            org.apache.spark.sql.classic.SparkSession s = (org.apache.spark.sql.classic.SparkSession) session;
            scala.Option<Expression> e = s.sessionState().catalog().resolveBuiltinOrTempFunction(name, seq(args));
            return e.isDefined() ? e.get() : null;
        } catch (RuntimeException | AssertionError ex) {
            return null;  // quail_spark.install() was not called in this session: leave the plan as it is
        }
    }

    /** Spark's AnalysisException (checked in Java), thrown unchecked: the analyzer reports it as usual. */
    static RuntimeException analysisError(String message) {
        throw AiCalls.<RuntimeException>unchecked(new org.apache.spark.sql.AnalysisException(message,
            scala.Option.empty(), scala.Option.empty(), scala.Option.empty(), scala.Option.empty(),
            scala.collection.immutable.Map$.MODULE$.empty(), new org.apache.spark.QueryContext[0]));
    }

    @SuppressWarnings("unchecked")
    private static <E extends Throwable> E unchecked(Throwable t) throws E {
        throw (E) t;
    }

    static Expression literal(String s) {
        return Literal$.MODULE$.apply(s);
    }

    static <T> scala.collection.immutable.Seq<T> seq(List<T> xs) {
        return CollectionConverters.asScala(xs).toList();
    }

    /** A PartialFunction over expressions defined where {@code f} gives non-null, for resolveExpressions. */
    static final class ExpressionRewrite extends AbstractPartialFunction<Expression, Expression> {
        private final java.util.function.Function<Expression, Expression> f;

        ExpressionRewrite(java.util.function.Function<Expression, Expression> f) {
            this.f = f;
        }

        @Override
        public boolean isDefinedAt(Expression e) {
            return f.apply(e) != null;
        }

        @Override
        public <A1 extends Expression, B1> B1 applyOrElse(A1 e, scala.Function1<A1, B1> dflt) {
            Expression out = f.apply(e);
            @SuppressWarnings("unchecked")
            B1 b = out != null ? (B1) out : dflt.apply(e);
            return b;
        }
    }

    /** A PartialFunction defined everywhere, for transformUp from Java. */
    abstract static class PlanRewrite extends AbstractPartialFunction<LogicalPlan, LogicalPlan> {
        abstract LogicalPlan rewrite(LogicalPlan p);

        @Override
        public boolean isDefinedAt(LogicalPlan p) {
            return true;
        }

        @Override
        public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 p, scala.Function1<A1, B1> dflt) {
            @SuppressWarnings("unchecked")
            B1 out = (B1) rewrite(p);
            return out;
        }
    }
}
