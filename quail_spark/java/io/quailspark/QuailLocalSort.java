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
 * A partition-local sort on the document placed first in the prompt under each chain or
 * AI-join evaluation, so rows sharing a prompt prefix arrive together.
 *
 * <pre>
 * before: Filter quail_chain(spec, body)          Filter quail_join(spec, term, body)
 *           +- child                                +- Join ...
 * after:  Filter quail_chain(spec, body)          Filter quail_join(spec, term, body)
 *           +- Sort [body ASC NULLS FIRST], false   +- Sort [if ((length(body) > length(term))) body else term
 *              +- child                                 ASC NULLS FIRST], false
 *                                                      +- Join ...
 * </pre>
 *
 * A join's sort key is the renderer's placement ({@code gpu_worker/ai_calls.py}): the
 * column the anchor hint names, else per row the longer of the two values (a tie keeps
 * template order); calls of three or more columns sort by {0}.
 *
 * The sort survives Spark's EliminateSorts below order-insensitive aggregates
 * and joins: that rule only looks through deterministic filters, and the
 * internal UDFs are non-deterministic. A filter already over a local sort on
 * the same keys is left as it is (idempotent), and so are rows in an order the query asked
 * for (an ORDER BY below, seen through projections, filters and limits): a local sort would
 * change it, and which rows a LIMIT above keeps.
 */
public class QuailLocalSort extends AiRule<Filter> {

    public QuailLocalSort(SparkSession session) {
        super(session, Filter.class);
    }


    @Override
    LogicalPlan rewrite(Filter f) {
        return sortUnder(f);
    }

    private static LogicalPlan sortUnder(Filter f) {
        List<Expression> keys = new ArrayList<>();
        for (Expression c : Catalyst.conjuncts(f.condition())) {
            PythonUDF call = AiCalls.isInternal(c, AiCalls.CHAIN) || AiCalls.isInternal(c, AiCalls.JOIN)
                ? (PythonUDF) c : AiCalls.comparedJoinScore(c);  // quail_join_score(...) > column: its pairs too
            if (call != null) {
                Expression doc = AiCalls.placedFirst(call);
                if (keys.stream().noneMatch(y -> AiCalls.same(doc, y))) keys.add(doc);
            }
        }
        if (keys.isEmpty() || sortedBy(f.child(), keys) || AiCalls.userOrdered(f.child())) return f;
        List<SortOrder> order = new ArrayList<>();
        for (Expression k : keys) {
            order.add(new SortOrder(k, Ascending$.MODULE$, Ascending$.MODULE$.defaultNullOrdering(),
                    Catalyst.seq(new ArrayList<Expression>())));
        }
        return new Filter(f.condition(), new Sort(Catalyst.seq(order), false, f.child(), Option.empty()));
    }

    private static boolean sortedBy(LogicalPlan child, List<Expression> keys) {
        if (!(child instanceof Sort)) return false;
        List<SortOrder> order = CollectionConverters.asJava(((Sort) child).order());
        if (order.size() < keys.size()) return false;
        for (int i = 0; i < keys.size(); i++) {
            if (!AiCalls.same(order.get(i).child(), keys.get(i))) return false;
        }
        return true;
    }
}
