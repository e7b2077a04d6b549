package io.quailspark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.analysis.UnresolvedFunction;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.JsonToStructs;
import org.apache.spark.sql.catalyst.expressions.JsonToStructs$;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.CharType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.StructType$;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.types.VarcharType;
import scala.Option;
import scala.Tuple3;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * The SQL function {@code ai_extract(col, schema[, instruction][, hint])}, injected by
 * {@link QuailExtensions} (so it exists with the rules on and off, and under Spark Connect).
 * A Python UDF has one return type, but ai_extract's is the struct its schema argument
 * describes: the function is Spark's own {@code from_json} over the JSON text of the object
 * that the registered Python UDF {@code quail_extract} (gpu_worker.ai_calls.EXTRACT_UDF) returns.
 *
 * <pre>
 * before: ai_extract(body, 'name STRING, age INT', map('max_tokens', 16))
 * after:  from_json(quail_extract(body, '{"type":"struct","fields":[...]}', NULL, map('max_tokens', 16)))
 *         -- the struct&lt;name: string, age: int&gt; of the schema
 * </pre>
 *
 * <p>{@code schema}: DDL text ('name STRING, tags ARRAY&lt;STRING&gt;'), Spark's JSON of a struct, or
 * {@code array('name', 'city')} (STRING fields). A schema Spark cannot parse, or a field type the
 * grammar cannot express (mirroring gpu_worker.grammar.check_fields: string, int, bigint,
 * smallint, tinyint, double, float, boolean, date, timestamp, arrays and structs of these),
 * fails analysis naming the call and the type, before any job runs. The Python UDF is named
 * unresolved and resolved by the analyzer from the session's function registry (what install()
 * registered), on every path.
 */
final class AiExtractFunction extends AbstractFunction1<Seq<Expression>, Expression> implements Serializable {
    static final String NAME = Contract.EXTRACT_FUNCTION;
    static final String UDF = Contract.EXTRACT_UDF;

    static Tuple3<FunctionIdentifier, ExpressionInfo, scala.Function1<Seq<Expression>, Expression>> description() {
        ExpressionInfo info = new ExpressionInfo(AiExtractFunction.class.getName(), null, NAME,
            "ai_extract(col, schema[, instruction][, hint]) - the fields of schema read from col by the model",
            "", "", "", "", "", "", "");
        return new Tuple3<>(FunctionIdentifier.apply(NAME), info, new AiExtractFunction());
    }

    @Override
    public Expression apply(Seq<Expression> children) {
        List<Expression> args = new ArrayList<>(CollectionConverters.asJava(children));
        try {
            return built(args);
        } catch (Refusal r) {
            // the call as written, unwrapped: QuailArgTypes (a check rule) refuses it naming the problem
            // (an exception thrown from a function builder reaches PySpark without an error class)
            return udf(args);
        }
    }

    /** Refuses, as an analysis error naming the call, the arguments of a quail_extract call that
     * {@link #apply} could not build (a schema argument that is no struct of Spark's JSON). */
    static void check(List<Expression> args) {
        try {
            built(new ArrayList<>(args));
        } catch (Refusal r) {
            throw Catalyst.analysisError(r.getMessage());
        }
    }

    private static Expression built(List<Expression> args) {
        String call = "ai_extract(" + sqlOf(args) + ")";
        Expression hint = null;
        if (args.size() >= 3 && Hints.isHint(args.get(args.size() - 1).dataType())) {
            hint = args.remove(args.size() - 1);
        }
        if (args.size() < 2 || args.size() > 3) {
            throw new Refusal(call + ": expected (column, schema[, instruction][, hint]), got "
                + (args.size() + (hint == null ? 0 : 1)) + " argument(s)");
        }
        StructType schema = schema(call, args.get(1));
        for (StructField f : schema.fields()) check(call, "field '" + f.name() + "'", f.dataType());
        Expression instruction = args.size() == 3 ? args.get(2) : Literal$.MODULE$.create(null, DataTypes.StringType);
        if (!instruction.foldable() || !(instruction.dataType() instanceof StringType)) {
            throw new Refusal(call + ": argument 3 (the instruction) expected a literal string, got "
                + instruction.sql());
        }
        List<Expression> udfArgs = new ArrayList<>(List.of(args.get(0), Catalyst.literal(schema.json()), instruction));
        if (hint != null) udfArgs.add(hint);
        return new JsonToStructs(schema, scala.collection.immutable.Map$.MODULE$.<String, String>empty(),
            udf(udfArgs), Option.empty(), JsonToStructs$.MODULE$.apply$default$5());
    }

    private static Expression udf(List<Expression> args) {
        return new UnresolvedFunction(Catalyst.seq(List.of(UDF)), Catalyst.seq(args), false,
            Option.empty(), Option.empty(), Catalyst.seq(new ArrayList<>()), false);
    }

    /** Why a call cannot be built; said by {@link #check} at the check of the analyzed plan. */
    private static final class Refusal extends RuntimeException {
        Refusal(String message) {
            super(message, null, false, false);
        }
    }

    /** The struct of the schema argument: DDL text, Spark's JSON of a struct, or an array of field names. */
    private static StructType schema(String call, Expression arg) {
        if (!arg.foldable()) {
            throw new Refusal(call + ": the schema expected a literal ('name STRING, age INT' or "
                + "array('name', 'city')), got " + arg.sql());
        }
        Object v = arg.eval(null);
        if (v instanceof ArrayData && arg.dataType() instanceof ArrayType) {
            ArrayData a = (ArrayData) v;
            StructType out = new StructType();
            for (int i = 0; i < a.numElements(); i++) {
                if (a.isNullAt(i)) throw new Refusal(call + ": field name " + (i + 1) + " is NULL");
                String name = a.getUTF8String(i).toString();
                if (out.getFieldIndex(name).isDefined()) {
                    throw new Refusal(call + ": field '" + name + "' is named twice");
                }
                out = out.add(name, DataTypes.StringType);
            }
            if (out.isEmpty()) throw new Refusal(call + ": expected at least one field name");
            return out;
        }
        String text = v == null ? "" : v.toString().trim();
        try {
            DataType t = text.startsWith("{") ? DataType.fromJson(text) : StructType$.MODULE$.fromDDL(text);
            if (t instanceof StructType && !((StructType) t).isEmpty()) return (StructType) t;
        } catch (Exception e) {
            String msg = String.valueOf(e.getMessage()).trim().split("\n")[0];
            throw new Refusal(call + ": schema '" + text + "' is not a struct Spark can parse: " + msg);
        }
        throw new Refusal(call + ": schema '" + text + "' expected at least one field ('name STRING')");
    }

    /** A type the grammar can express, else an analysis error naming the call, the field and the type. */
    private static void check(String call, String where, DataType t) {
        if (t instanceof ArrayType) {
            check(call, where + " (array element)", ((ArrayType) t).elementType());
            return;
        }
        if (t instanceof StructType) {
            for (StructField f : ((StructType) t).fields()) check(call, where + "." + f.name(), f.dataType());
            return;
        }
        if (t instanceof StringType || t instanceof CharType || t instanceof VarcharType || t instanceof IntegerType
                || t instanceof LongType || t instanceof ShortType || t instanceof ByteType || t instanceof DoubleType
                || t instanceof FloatType || t instanceof BooleanType || t instanceof DateType
                || t instanceof TimestampType) return;
        throw new Refusal(call + ": " + where + " has type " + t.sql() + ", which the answer grammar "
            + "cannot express; expected STRING, INT, BIGINT, SMALLINT, TINYINT, DOUBLE, FLOAT, BOOLEAN, DATE, "
            + "TIMESTAMP, or an ARRAY or STRUCT of these");
    }

    private static String sqlOf(List<Expression> args) {
        List<String> out = new ArrayList<>();
        for (Expression a : args) out.add(a.sql());
        return String.join(", ", out);
    }
}
