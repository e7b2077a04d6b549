package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Ascending$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A partition-local sort on the document (or join anchor) column under each
 * chain or AI-join evaluation, so rows sharing a prompt prefix arrive together.
 *
 * <pre>
 * before: Filter quail_chain(spec, body)          Filter quail_join(spec, body, term)
 *           +- child                                +- Join ...
 * after:  Filter quail_chain(spec, body)          Filter quail_join(spec, body, term)
 *           +- Sort [body ASC NULLS FIRST], false   +- Sort [body ASC NULLS FIRST], false
 *              +- child                                +- Join ...
 * </pre>
 *
 * The sort survives Spark's EliminateSorts below order-insensitive aggregates
 * and joins: that rule only looks through deterministic filters, and the
 * internal UDFs are non-deterministic. A filter already over a local sort on
 * the same keys is left as it is (idempotent).
 */
public class QuailLocalSort extends AiRule {

    public QuailLocalSort(SparkSession session) {
        super(session);
    }


    @Override
    LogicalPlan rewrite(LogicalPlan p) {
        return p instanceof Filter ? sortUnder((Filter) p) : p;
    }

    private static LogicalPlan sortUnder(Filter f) {
        List<Expression> keys = new ArrayList<>();
        for (Expression c : AiCalls.conjuncts(f.condition())) {
            if (AiCalls.isInternal(c, AiCalls.CHAIN) || AiCalls.isInternal(c, AiCalls.JOIN)) {
                Expression doc = CollectionConverters.asJava(((PythonUDF) c).children()).get(1);
                if (keys.stream().noneMatch(doc::semanticEquals)) keys.add(doc);
            }
        }
        if (keys.isEmpty() || sortedBy(f.child(), keys)) return f;
        List<SortOrder> order = new ArrayList<>();
        for (Expression k : keys) {
            order.add(new SortOrder(k, Ascending$.MODULE$, Ascending$.MODULE$.defaultNullOrdering(),
                    AiCalls.seq(new ArrayList<Expression>())));
        }
        return new Filter(f.condition(), new Sort(AiCalls.seq(order), false, f.child(), Option.empty()));
    }

    private static boolean sortedBy(LogicalPlan child, List<Expression> keys) {
        if (!(child instanceof Sort)) return false;
        List<SortOrder> order = CollectionConverters.asJava(((Sort) child).order());
        if (order.size() < keys.size()) return false;
        for (int i = 0; i < keys.size(); i++) {
            if (!order.get(i).child().semanticEquals(keys.get(i))) return false;
        }
        return true;
    }
}
