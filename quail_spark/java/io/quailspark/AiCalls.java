package io.quailspark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.Length;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Offset;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.NumericType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.StringType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * What the rules share about AI calls: recognising them (the public functions by kind, the internal
 * Python UDFs that install() registers, {@link #INTERNAL} as gpu_worker.ai_calls.INTERNAL lists them),
 * reading an ai_if or a score comparison as a {@link Predicate}, and the document a call places first.
 * Their hints are {@link Hints}'; Catalyst's helpers {@link Catalyst}'s.
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
        Double hinted = Hints.number(Hints.of(call).get("max_tokens"));
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
        return e.exists(AiCalls::isAi);
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

        /** The value a rule tagged the call with ({@link AiCalls#tagged}), or null. */
        <T> T tag(TreeNodeTag<T> t) {
            return udf.getTagValue(t).getOrElse(() -> null);
        }

        /** Whether this and {@code o} are comparisons of the same ai_score call (two bounds of one range). */
        boolean sameScore(Predicate o) {
            return scoreOp != null && o.scoreOp != null && same(udf, o.udf);
        }

        /** The selectivity hint, else the default (written once, in AiCost). */
        double selectivity() {
            Double h = Hints.number(hints.get("selectivity"));
            return h != null ? h : AiCost.DEFAULT_SELECTIVITY;
        }

        String selectivitySource() {
            return Hints.number(hints.get("selectivity")) != null ? "hint" : "default";
        }

        /** The column argument the anchor hint names (resolved by QuailAnchorHint), or null. */
        Integer anchorArg() {
            Double a = Hints.number(hints.get(QuailAnchorHint.FIELD));
            return a == null ? null : a.intValue();
        }

        /** The tokens hint of column argument {@code i}: 'tokens' for {0}, 'tokens_1' for {1} ... */
        Double tokensHint(int i) {
            return Hints.number(hints.get(i == 0 ? "tokens" : "tokens_" + i));
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
        List<Expression> args = Hints.without((PythonUDF) e);
        if (args == null || args.size() < 2 || args.get(0).foldable()
            || !(args.get(0).dataType() instanceof StringType)) return null;
        return args;
    }

    private static Predicate parsed(PythonUDF udf) {
        List<Expression> args = Hints.without(udf);
        if (args == null || args.size() < 2 || !args.get(0).foldable()
            || !(args.get(0).dataType() instanceof StringType)) return null;
        Object t = args.get(0).eval(null);
        if (t == null) return null;
        return new Predicate(udf, t.toString(), new ArrayList<>(args.subList(1, args.size())), Hints.of(udf));
    }

    /** Tokens of the literal text of an AI call (template, labels), hints excluded: what it asks. */
    static double askedTokens(PythonUDF call) {
        StringBuilder text = new StringBuilder();
        for (Expression a : CollectionConverters.asJava(call.children())) {
            if (!a.foldable() || Hints.isHint(a.dataType())) continue;
            Object v = a.eval(null);
            if (v != null) text.append(v instanceof ArrayData ? a.sql() : v.toString());
        }
        return AiCost.textTokens(text.toString());
    }

    /**
     * {@code e} (an AI predicate, or a comparison of an ai_score call) with its call tagged {@code tag =
     * value}: planner state that later rules read ({@link Predicate#tag}), never part of the user's hint. The
     * call is copied first: the analyzed plan shares it, and a tag on it would reach every later plan of the
     * query. Anything else is returned as it is.
     */
    static <T> Expression tagged(Expression e, TreeNodeTag<T> tag, T value) {
        Predicate p = predicate(e);
        if (p == null && scoreCompared(e) != null) {  // a score comparison: its ai_score call is tagged
            List<Expression> kids = new ArrayList<>();
            for (Expression k : CollectionConverters.asJava(e.children())) {
                Predicate s = score(k);
                kids.add(s == null ? k : tagged(s.udf, tag, value));
            }
            return e.makeCopy(kids.toArray());  // not withNewChildren: the tagged copy equals the call it replaces
        }
        return p == null ? e : tagged(p.udf, tag, value);
    }

    private static <T> Expression tagged(PythonUDF call, TreeNodeTag<T> tag, T value) {
        Expression copy = call.clone();
        copy.setTagValue(tag, value);
        return copy;
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

}
