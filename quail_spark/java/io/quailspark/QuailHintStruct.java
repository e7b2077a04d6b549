package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.CreateMap;
import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Analysis rule (post-hoc resolution, so it runs with the optimizer rules on or off):
 * a hint written as a map of literals, the last argument of an AI call, becomes the
 * named_struct of the same keys and the literals as written.
 *
 * <p>Spark gives a map's values one type: in
 * {@code ai_if('Is {0} late?', body, map('selectivity', 0.25, 'anchor', 'n'))} the
 * analyzer casts 'n' to DOUBLE, which fails when the optimizer folds the map. A
 * struct keeps each value's own type, and every path reads both spellings.
 *
 * <pre>
 * before: ai_if(template, body, map(selectivity, 0.25, anchor, cast(n as double)))
 * after:  ai_if(template, body, named_struct(selectivity, 0.25, anchor, n))
 * </pre>
 */
final class QuailHintStruct extends Rule<LogicalPlan> {

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        // resolveExpressions: the analyzer forbids transformUp/Down in its rules (checked under
        // SPARK_TESTING); subquery plans are analyzed on their own and meet this rule there.
        return plan.resolveExpressions(new Rewrite<Expression>(QuailHintStruct::rewritten));
    }

    /** The AI call with its map hint as a struct, or null when there is nothing to rewrite. */
    static Expression rewritten(Expression e) {
        if (!AiCalls.isAi(e)) return null;
        PythonUDF udf = (PythonUDF) e;
        List<Expression> args = new ArrayList<>(CollectionConverters.asJava(udf.children()));
        if (args.isEmpty() || !(args.get(args.size() - 1) instanceof CreateMap)) return null;
        List<Expression> kv = CollectionConverters.asJava(((CreateMap) args.get(args.size() - 1)).children());
        List<Expression> fields = new ArrayList<>();
        for (Expression x : kv) {
            Expression v = x;
            while (v instanceof Cast) v = ((Cast) v).child();  // the implicit casts of the map's value type
            if (!(v instanceof Literal)) return null;  // not a hint of literals: leave it to the function
            fields.add(v);
        }
        args.set(args.size() - 1, new CreateNamedStruct(Catalyst.seq(fields)));
        return udf.withNewChildren(Catalyst.seq(args));
    }
}
