package io.quailspark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.StringType;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * What the rules share: recognising AI calls, their hints, conjuncts, and
 * building calls of the internal Python UDFs that install() registers
 * ({@code quail_chain}, {@code quail_join}).
 */
final class AiCalls {
    static final String ENABLED = "spark.quail.optimizer.enabled";
    static final String CHAIN = "quail_chain";
    static final String JOIN = "quail_join";
    static final double DEFAULT_SELECTIVITY = 0.5;

    private AiCalls() {}

    static boolean enabled() {
        return !"false".equalsIgnoreCase(SQLConf.get().getConfString(ENABLED, "true").trim());
    }

    /** A user-visible AI function call (ai_if, ai_filter, ai_score, ai_classify). */
    static boolean isAi(Expression e) {
        if (!(e instanceof PythonUDF)) return false;
        String n = ((PythonUDF) e).name().toLowerCase(Locale.ROOT);
        return n.equals("ai_if") || n.equals("ai_filter") || n.equals("ai_score") || n.equals("ai_classify");
    }

    static boolean isPredicate(Expression e) {
        if (!(e instanceof PythonUDF)) return false;
        String n = ((PythonUDF) e).name().toLowerCase(Locale.ROOT);
        return n.equals("ai_if") || n.equals("ai_filter");
    }

    static boolean isInternal(Expression e, String name) {
        return e instanceof PythonUDF && ((PythonUDF) e).name().equalsIgnoreCase(name);
    }

    static boolean containsAi(Expression e) {
        return e.exists(new scala.runtime.AbstractFunction1<Expression, Object>() {
            @Override
            public Object apply(Expression x) {
                return isAi(x);
            }
        });
    }

    /** One AI predicate: literal template, column arguments, selectivity hint. */
    static final class Predicate {
        final PythonUDF udf;
        final String template;
        final List<Expression> columns;
        final double selectivity;

        Predicate(PythonUDF udf, String template, List<Expression> columns, double selectivity) {
            this.udf = udf;
            this.template = template;
            this.columns = columns;
            this.selectivity = selectivity;
        }

        /** Hellerstein's rank = cost / (1 - selectivity); cost from the template's length. */
        double rank() {
            double sel = Math.min(Math.max(selectivity, 0.0), 0.999);
            return template.length() / (1.0 - sel);
        }
    }

    /** The predicate of an ai_if/ai_filter call with a literal template, else null. */
    static Predicate predicate(Expression e) {
        if (!isPredicate(e)) return null;
        PythonUDF udf = (PythonUDF) e;
        List<Expression> args = CollectionConverters.asJava(udf.children());
        if (args.size() < 2 || !args.get(0).foldable() || !(args.get(0).dataType() instanceof StringType)) return null;
        Object t = args.get(0).eval(null);
        if (t == null) return null;
        double sel = DEFAULT_SELECTIVITY;
        int end = args.size();
        Expression last = args.get(end - 1);
        if (isHint(last.dataType())) {
            if (!last.foldable()) return null;
            Object v = last.eval(null);
            Double hinted = last.dataType() instanceof MapType
                    ? hint(v, (MapType) last.dataType(), "selectivity")
                    : structHint(v, (StructType) last.dataType(), "selectivity");
            if (hinted != null) sel = hinted;
            end -= 1;
        }
        List<Expression> cols = new ArrayList<>(args.subList(1, end));
        if (cols.isEmpty()) return null;
        return new Predicate(udf, t.toString(), cols, sel);
    }

    /** The optional last argument of an AI call is a hint: map('selectivity', ...) or its named_struct. */
    static boolean isHint(DataType t) {
        return t instanceof MapType || t instanceof StructType;
    }

    private static Double hint(Object map, MapType type, String key) {
        if (!(map instanceof MapData)) return null;
        MapData m = (MapData) map;
        ArrayData keys = m.keyArray(), values = m.valueArray();
        for (int i = 0; i < m.numElements(); i++) {
            Object k = keys.get(i, type.keyType());
            if (k != null && k.toString().equalsIgnoreCase(key)) {
                return number(values.get(i, type.valueType()));
            }
        }
        return null;
    }

    /** The hint as named_struct('selectivity', 0.25, 'anchor', 'n') (a map's values share one type). */
    private static Double structHint(Object row, StructType type, String key) {
        if (!(row instanceof InternalRow)) return null;
        for (int i = 0; i < type.fields().length; i++) {
            if (type.fields()[i].name().equalsIgnoreCase(key) && !((InternalRow) row).isNullAt(i)) {
                return number(((InternalRow) row).get(i, type.fields()[i].dataType()));
            }
        }
        return null;
    }

    private static Double number(Object v) {
        try {
            return v == null ? null : Double.valueOf(v.toString());
        } catch (NumberFormatException ex) {
            return null;
        }
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

    static Expression literal(String s) {
        return Literal$.MODULE$.apply(s);
    }

    static <T> scala.collection.immutable.Seq<T> seq(List<T> xs) {
        return CollectionConverters.asScala(xs).toList();
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
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
