package io.quailspark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The hint of an AI call, its optional last argument ({@code map('selectivity', 0.25)} or its
 * named_struct): read as text keys (lower-cased) and values, and written back with one key more.
 */
final class Hints {
    private Hints() {}

    /** Whether an argument of type {@code t} is a hint: a map or a struct. */
    static boolean isHint(DataType t) {
        return t instanceof MapType || t instanceof StructType;
    }

    /** The hints of any AI call (its foldable last argument when that is a map or struct), else empty. */
    static Map<String, String> of(PythonUDF call) {
        List<Expression> args = CollectionConverters.asJava(call.children());
        if (args.isEmpty()) return new LinkedHashMap<>();
        Expression last = args.get(args.size() - 1);
        return isHint(last.dataType()) && last.foldable() ? read(last) : new LinkedHashMap<>();
    }

    /** Whether a call's hint is not made of literals: {@code map('selectivity', col)}. */
    static boolean fromColumns(PythonUDF call) {
        List<Expression> args = CollectionConverters.asJava(call.children());
        return !args.isEmpty() && isHint(args.get(args.size() - 1).dataType()) && !args.get(args.size() - 1).foldable();
    }

    /** A call's arguments without its hint; null when that hint is not a literal. */
    static List<Expression> without(PythonUDF udf) {
        List<Expression> args = new ArrayList<>(CollectionConverters.asJava(udf.children()));
        if (!args.isEmpty() && isHint(args.get(args.size() - 1).dataType())) {
            if (!args.get(args.size() - 1).foldable()) return null;
            args.remove(args.size() - 1);
        }
        return args;
    }

    /** A foldable hint's keys (lower-cased) and values as text, in the order written. */
    static Map<String, String> read(Expression hint) {
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

    /** A hint's value as a number, or null (absent, or not a number). */
    static Double number(String v) {
        try {
            return v == null ? null : Double.valueOf(v);
        } catch (NumberFormatException ex) {
            return null;
        }
    }
}
