package io.quailspark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.OuterReference;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Analysis rule (post-hoc resolution, after {@link QuailHintStruct}, with the optimizer
 * rules on or off): the {@code anchor} hint of a two-column AI call, a table alias or a
 * column name, resolved to the position of the column argument it names, added to the
 * hint as {@code anchor_arg}. The executor sees values, not names: the renderer
 * ({@code gpu_worker/ai_calls.py}) places that column first in the prompt on every path.
 *
 * <pre>
 * before: ai_if('Is {0} in {1}?', t.term, n.body, named_struct(anchor, n))
 * after:  ai_if('Is {0} in {1}?', t.term, n.body, named_struct(anchor, n, anchor_arg, 1))
 * </pre>
 *
 * Calls with one column (nothing to place) keep the hint as written.
 * A hint that names neither column argument fails analysis, naming the call and the
 * columns it could have named. A hint that already has {@code anchor_arg} is left as it is.
 */
final class QuailAnchorHint extends Rule<LogicalPlan> {
    static final String FIELD = "anchor_arg";

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        return plan.resolveExpressions(new Rewrite<Expression>(QuailAnchorHint::resolved));
    }

    /** The AI call with anchor_arg added to its struct hint, or null when there is nothing to add. */
    static Expression resolved(Expression e) {
        if (!AiCalls.isAi(e) || !e.childrenResolved()) return null;
        PythonUDF udf = (PythonUDF) e;
        List<Expression> args = new ArrayList<>(CollectionConverters.asJava(udf.children()));
        Expression last = args.isEmpty() ? null : args.get(args.size() - 1);
        if (!(last instanceof CreateNamedStruct)) return null;
        List<Expression> kv = new ArrayList<>(CollectionConverters.asJava(((CreateNamedStruct) last).children()));
        String anchor = null;
        for (int i = 0; i + 1 < kv.size(); i += 2) {
            String key = String.valueOf(kv.get(i).eval(null));
            if (key.equalsIgnoreCase(FIELD)) return null;
            if (key.equalsIgnoreCase("anchor") && kv.get(i + 1) instanceof Literal) {
                Object v = ((Literal) kv.get(i + 1)).value();
                anchor = v == null ? null : v.toString();
            }
        }
        List<Expression> cols = args.subList(1, args.size() - 1);
        if (anchor == null || cols.size() != 2) return null;  // placement applies to two-column calls
        int hit = -1;
        for (int i = 0; i < cols.size(); i++) {
            if (names(cols.get(i), anchor)) {
                if (hit >= 0) throw error(udf, anchor, cols, "names more than one of its columns");
                hit = i;
            }
        }
        if (hit < 0) throw error(udf, anchor, cols, "names none of its columns");
        kv.add(Catalyst.literal(FIELD));
        kv.add(Literal$.MODULE$.apply(hit));
        args.set(args.size() - 1, new CreateNamedStruct(Catalyst.seq(kv)));
        return udf.withNewChildren(Catalyst.seq(args));
    }

    /** The column's attributes (an outer query's too, in a correlated subquery) come from the table alias
     * {@code name}, or one is the column {@code name}. */
    private static boolean names(Expression col, String name) {
        List<Attribute> attrs = new ArrayList<>();
        col.foreach(new scala.runtime.AbstractFunction1<Expression, scala.runtime.BoxedUnit>() {
            @Override
            public scala.runtime.BoxedUnit apply(Expression x) {
                Expression a = x instanceof OuterReference ? (Expression) ((OuterReference) x).e() : x;
                if (a instanceof Attribute) attrs.add((Attribute) a);
                return scala.runtime.BoxedUnit.UNIT;
            }
        });
        for (Attribute a : attrs) {
            if (a.name().equalsIgnoreCase(name)) return true;
            List<String> q = CollectionConverters.asJava(a.qualifier());
            if (!q.isEmpty() && q.get(q.size() - 1).equalsIgnoreCase(name)) return true;
        }
        return false;
    }

    private static RuntimeException error(PythonUDF udf, String anchor, List<Expression> cols, String what) {
        List<String> sql = new ArrayList<>();
        for (Expression c : cols) sql.add(c.sql());
        return Catalyst.analysisError(udf.name().toLowerCase(Locale.ROOT) + ": the anchor hint '" + anchor + "' "
            + what + " (" + String.join(", ", sql) + "); expected a table alias or column name of exactly one");
    }
}
