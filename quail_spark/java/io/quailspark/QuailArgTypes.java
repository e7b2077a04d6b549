package io.quailspark;

import java.util.List;
import java.util.Locale;

import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
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
 * Check rule (after analysis, so with the optimizer rules on or off): the document
 * arguments of every AI call are strings, or the query fails before any work with an
 * error that names the function, the argument and its expression.
 *
 * <pre>
 * ai_if('Is {0} high?', stars)   -- stars INT
 * AnalysisException: ai_if: argument 2 (stars) is INT; a document argument must be a
 * string: write CAST(stars AS STRING)
 * </pre>
 *
 * <p>Arguments: {@code ai_if | ai_filter | ai_score (template, col, ...[, hint])},
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
        String name = udf.name().toLowerCase(Locale.ROOT);
        List<Expression> args = CollectionConverters.asJava(udf.children());
        int end = args.size();
        if (end > 0 && AiCalls.isHint(args.get(end - 1).dataType())) end--;
        int first = 1;
        if (name.equals("ai_classify")) {
            if (end > 0 && args.get(end - 1).dataType() instanceof ArrayType) end--;  // the labels
            if (end == 1) first = 0;  // ai_classify(col, labels): no template
        }
        for (int i = first; i < end; i++) {
            Expression a = args.get(i);
            DataType t = a.dataType();
            if (!isText(t)) {
                String sql = a.sql();
                throw AiCalls.analysisError(name + ": argument " + (i + 1) + " (" + sql + ") is " + t.sql()
                    + "; a document argument must be a string: write CAST(" + sql + " AS STRING)");
            }
        }
    }

    private static boolean isText(DataType t) {
        return t instanceof StringType || t instanceof CharType || t instanceof VarcharType || t instanceof NullType;
    }
}
