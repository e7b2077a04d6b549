package io.quailspark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.CharType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.NullType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.VarcharType;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Check rule (after analysis, so with the optimizer rules on or off): every AI call has
 * a template and at least one column argument, a literal template's placeholders are
 * {0}..{n-1} for its n columns (the renderer's rule), the document
 * arguments are strings and its hint names known keys with valid values,
 * or the query fails before any work with an error that names the function, the argument
 * or hint, and what was written.
 *
 * <pre>
 * ai_if('Is {0} high?', stars)   -- stars INT
 * AnalysisException: ai_if: argument 2 (stars) is INT; a document argument must be a
 * string: write CAST(stars AS STRING)
 * ai_if('Is {0} late?', body, map('selectivity', 1.5))
 * AnalysisException: ai_if: hint 'selectivity': expected a number in [0, 1], got 1.5
 * </pre>
 *
 * <p>Hints: {@code selectivity} (a number in [0, 1]), {@code anchor} (checked by
 * {@link QuailAnchorHint}), {@code tokens} and {@code tokens_1}, {@code tokens_2} ... (a
 * positive number of tokens per value of argument {0}, {1}, ...); decode calls take no selectivity:
 * ai_generate {@code max_tokens} (a whole number >= 1) and {@code stop}, ai_extract {@code max_tokens}
 * (per field), ai_summarize none (its max_words is argument 2).
 *
 * <p>Arguments: {@code ai_if | ai_filter | ai_score | ai_generate (template, col, ...[, hint])},
 * {@code ai_summarize(col[, max_words])}, {@code quail_extract(col, schema, instruction[, hint])} (what
 * ai_extract builds, {@link AiExtractFunction}),
 * {@code ai_classify(col, labels[, hint])} or {@code ai_classify(template, col, ..., labels[, hint])};
 * a hint is a map or struct, the labels an array.
 */
final class QuailArgTypes extends AbstractFunction1<LogicalPlan, BoxedUnit> {

    @Override
    public BoxedUnit apply(LogicalPlan plan) {
        plan.foreachWithSubqueries(new AbstractFunction1<LogicalPlan, BoxedUnit>() {
            @Override
            public BoxedUnit apply(LogicalPlan node) {
                for (Expression e : CollectionConverters.asJava(node.expressions())) {
                    e.foreach(new AbstractFunction1<Expression, BoxedUnit>() {
                        @Override
                        public BoxedUnit apply(Expression x) {
                            if (AiCalls.isAi(x)) check((PythonUDF) x);
                            return BoxedUnit.UNIT;
                        }
                    });
                }
                return BoxedUnit.UNIT;
            }
        });
        return BoxedUnit.UNIT;
    }

    static void check(PythonUDF udf) {
        String kind = AiCalls.kind(udf);
        String name = kind.equals("extract") ? AiExtractFunction.NAME : udf.name().toLowerCase(Locale.ROOT);
        List<Expression> args = CollectionConverters.asJava(udf.children());
        int end = args.size();
        if (end > 0 && Hints.isHint(args.get(end - 1).dataType())) {
            end--;
            checkHint(name, kind, args.get(end));
        }
        if (kind.equals("extract")) AiExtractFunction.check(args);
        if (kind.equals("summarize") || kind.equals("extract")) {
            checkDecode(name, kind, args.subList(0, end));
            return;
        }
        int first = 1;
        if (kind.equals("classify")) {
            if (end > 0 && args.get(end - 1).dataType() instanceof ArrayType) {
                end--;  // the labels
                checkLabels(args.get(end));
            }
            if (end == 1) first = 0;  // ai_classify(col, labels): no template
        }
        if (end - first < 1) {
            throw Catalyst.analysisError(name + ": expected " + (first == 1 ? "a template and " : "")
                + "at least one column argument, got " + args.size() + " argument(s)"
                + (args.isEmpty() ? "" : " (" + sqlOf(args) + ")")
                + (end < args.size() && Hints.isHint(args.get(args.size() - 1).dataType())
                    ? "; the last one, a map or struct, is the hint" : ""));
        }
        if (first == 1) checkTemplate(name, kind, args.get(0), end - 1);
        for (int i = first; i < end; i++) {
            Expression a = args.get(i);
            DataType t = a.dataType();
            if (!isText(t)) {
                String sql = a.sql();
                throw Catalyst.analysisError(name + ": argument " + (i + 1) + " (" + sql + ") is " + t.sql()
                    + "; a document argument must be a string: write CAST(" + sql + " AS STRING)");
            }
        }
    }

    /** A literal template uses placeholders {0}..{n-1}, each column once at least (the renderer's rule,
     * gpu_worker/ai_calls.py); ai_classify's bare '{0}' too. A template read from a column is checked per row. */
    private static void checkTemplate(String name, String kind, Expression template, int n) {
        if (!template.foldable() || !isText(template.dataType())) return;
        Object v = template.eval(null);
        if (v == null || (kind.equals("classify") && v.toString().trim().equals("{0}"))) return;
        java.util.Set<Integer> used = new java.util.TreeSet<>();
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("\\{(\\d+)\\}").matcher(v.toString());
        while (m.find()) used.add(Integer.parseInt(m.group(1)));
        java.util.Set<Integer> want = new java.util.TreeSet<>();
        for (int i = 0; i < n; i++) want.add(i);
        if (!used.equals(want)) {
            throw Catalyst.analysisError(name + ": template '" + v + "' must use placeholders {0}..{" + (n - 1)
                + "}, one per column argument (" + n + "); found " + (used.isEmpty() ? "none" : used.toString()));
        }
    }

    private static String sqlOf(List<Expression> args) {
        List<String> out = new ArrayList<>();
        for (Expression a : args) out.add(a.sql());
        return String.join(", ", out);
    }

    /** Literal labels: at least two, none NULL (a NULL label has no text to offer the model). */
    private static void checkLabels(Expression labels) {
        if (!labels.foldable()) return;
        Object v = labels.eval(null);
        if (!(v instanceof ArrayData)) return;
        ArrayData a = (ArrayData) v;
        DataType t = ((ArrayType) labels.dataType()).elementType();
        List<String> text = new ArrayList<>();
        for (int i = 0; i < a.numElements(); i++) {
            if (a.isNullAt(i)) {
                throw Catalyst.analysisError("ai_classify: label " + (i + 1) + " of " + labels.sql()
                    + " is NULL; the labels must be strings");
            }
            text.add(String.valueOf(a.get(i, t)));
        }
        if (text.size() < 2) throw Catalyst.analysisError("ai_classify: expected at least 2 labels, got " + text);
    }

    /** ai_summarize(col[, max_words]): a text column and a whole number of words >= 1;
     * quail_extract(col, schema, instruction): a text column (ai_extract checked its schema when built). */
    private static void checkDecode(String name, String kind, List<Expression> args) {
        int n = kind.equals("summarize") ? 2 : 3;
        if (args.isEmpty() || args.size() > n || (kind.equals("extract") && args.size() != 3)) {
            throw Catalyst.analysisError(name + ": expected " + (kind.equals("summarize") ? "(column[, max_words])"
                : "(column, schema[, instruction][, hint])") + ", got " + args.size() + " argument(s)"
                + (args.isEmpty() ? "" : " (" + sqlOf(args) + ")"));
        }
        Expression doc = args.get(0);
        if (!isText(doc.dataType())) {
            throw Catalyst.analysisError(name + ": argument 1 (" + doc.sql() + ") is " + doc.dataType().sql()
                + "; a document argument must be a string: write CAST(" + doc.sql() + " AS STRING)");
        }
        if (kind.equals("summarize") && args.size() == 2) {
            Expression w = args.get(1);
            Object v = w.foldable() ? w.eval(null) : null;
            if (!(w.dataType() instanceof org.apache.spark.sql.types.IntegralType) || !(v instanceof Number)
                    || ((Number) v).longValue() < 1) {
                throw Catalyst.analysisError(name + ": argument 2 (max_words, " + w.sql()
                    + ") expected a literal whole number >= 1");
            }
        }
    }

    private static void checkHint(String name, String kind, Expression hint) {
        if (!hint.foldable()) return;  // not a hint of literals: the function itself reads it
        boolean decode = kind.equals("generate") || kind.equals("summarize") || kind.equals("extract");
        String known = decode ? (kind.equals("generate") ? "max_tokens, stop, anchor, tokens, tokens_1, ..."
            : kind.equals("extract") ? "max_tokens, tokens" : "none") : "selectivity, anchor, tokens, tokens_1, tokens_2, ...";
        for (Map.Entry<String, String> h : Hints.read(hint).entrySet()) {
            String key = h.getKey(), value = h.getValue();
            Double x = Hints.number(value);
            String expected = null;
            boolean ok = true;
            if (key.equals("selectivity")) {
                ok = !decode;
                if (x == null || !(x >= 0.0 && x <= 1.0)) expected = "a number in [0, 1]";
            } else if (key.equals("tokens") || key.matches("tokens_[1-9][0-9]*")) {
                ok = !kind.equals("summarize");
                if (x == null || !(x > 0.0) || x.isInfinite()) expected = "a positive number of tokens";
            } else if (key.equals("max_tokens")) {
                ok = kind.equals("generate") || kind.equals("extract");
                if (x == null || !(x >= 1.0) || x.isInfinite() || x != Math.rint(x)) {
                    expected = "a whole number of tokens >= 1";
                }
            } else if (key.equals("stop")) {
                ok = kind.equals("generate");
            } else {
                ok = (key.equals("anchor") && !kind.equals("extract") && !kind.equals("summarize"))
                    || key.equals(QuailAnchorHint.FIELD);
            }
            if (!ok) {
                throw Catalyst.analysisError(name + ": hint '" + key + "': unknown hint of " + name
                    + "; expected one of " + known);
            }
            if (expected != null) {
                throw Catalyst.analysisError(name + ": hint '" + key + "': expected " + expected + ", got " + value);
            }
        }
    }

    private static boolean isText(DataType t) {
        return t instanceof StringType || t instanceof CharType || t instanceof VarcharType || t instanceof NullType;
    }
}
