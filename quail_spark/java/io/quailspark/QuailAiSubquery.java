package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.ArrayContains;
import org.apache.spark.sql.catalyst.expressions.ArrayTransform;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.Exists;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.InSubquery;
import org.apache.spark.sql.catalyst.expressions.LambdaFunction;
import org.apache.spark.sql.catalyst.expressions.ListQuery;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.NamedLambdaVariable;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType$;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * EXISTS, NOT EXISTS and IN subqueries correlated through an AI predicate, made
 * runnable (Spark would rewrite them into LEFT SEMI / ANTI joins with the AI call
 * in the ON, which it then refuses: PYTHON_UDF_IN_ON_CLAUSE). The subquery
 * expression itself is replaced, so it may stand under NOT, OR or CASE. Runs with
 * the optimizer rules on or off.
 *
 * <pre>
 * before: Filter (NOT exists#1 [t.term] OR t.tid &lt; 2)
 *         :  +- Project [n.body]                        (joinCond: ai_if('Does {0} mention {1}?', n.body, t.term))
 *         :     +- n
 *         +- t
 * after:  Project [t.*]
 *         +- Filter (NOT (size(matched) &gt; 0) OR t.tid &lt; 2)
 *            +- PartnerMatch(t, n, joinCond)             (t.* plus the matched n rows, see PartnerMatch)
 * </pre>
 *
 * {@code v IN (SELECT y ...)} becomes {@code IF(size(matched) = 0, FALSE,
 * array_contains(matched.y, v))}: TRUE when a matched y equals v, NULL when none
 * does but v or a matched y is NULL (SQL's three-valued IN, so NOT IN is right too).
 */
public class QuailAiSubquery extends AiRule {
    public QuailAiSubquery(SparkSession session) {
        super(session);
    }

    @Override
    boolean alsoWhenDisabled() {
        return true;
    }

    @Override
    LogicalPlan rewrite(LogicalPlan p) {
        return p instanceof Filter ? rewriteFilter((Filter) p) : p;
    }

    private LogicalPlan rewriteFilter(Filter f) {
        Expression cond = f.condition();
        LogicalPlan child = f.child();
        boolean changed = false;
        for (Expression sub = target(cond, child); sub != null; sub = target(cond, child)) {
            Expression found = sub;
            LogicalPlan subPlan = found instanceof Exists ? ((Exists) found).plan() : ((InSubquery) found).query().plan();
            PartnerMatch m = PartnerMatch.build(session, child, subPlan, AiCalls.and(joinCond(found)));
            if (m == null) break;
            Expression replacement = found instanceof Exists ? QuailOuterJoin.hasMatch(m, true) : in(m, (InSubquery) found);
            cond = cond.transform(new PartnerMatch.Rewrite() {
                @Override
                Expression rewrite(Expression e) {
                    return e == found ? replacement : null;
                }
            });
            child = m.plan;
            changed = true;
        }
        if (!changed) return f;
        return new Project(AiCalls.seq(new ArrayList<NamedExpression>(CollectionConverters.asJava(f.child().output()))),
            new Filter(cond, child));
    }

    /** The first EXISTS or one-column IN subquery of cond correlated through an AI call over child's columns. */
    private static Expression target(Expression cond, LogicalPlan child) {
        Expression[] hit = {null};
        cond.foreach(new scala.runtime.AbstractFunction1<Expression, scala.runtime.BoxedUnit>() {
            @Override
            public scala.runtime.BoxedUnit apply(Expression e) {
                if (hit[0] == null && applies(e, child)) hit[0] = e;
                return scala.runtime.BoxedUnit.UNIT;
            }
        });
        return hit[0];
    }

    private static boolean applies(Expression e, LogicalPlan child) {
        LogicalPlan sub;
        if (e instanceof Exists) {
            sub = ((Exists) e).plan();
        } else if (e instanceof InSubquery && ((InSubquery) e).values().size() == 1
                && ((InSubquery) e).query().numCols() == 1) {
            sub = ((InSubquery) e).query().plan();
        } else {
            return false;
        }
        List<Expression> jc = joinCond(e);
        if (jc.isEmpty() || !PartnerMatch.applies(AiCalls.and(jc))) return false;
        AttributeSet both = child.outputSet().$plus$plus(sub.outputSet());
        return AiCalls.and(jc).references().subsetOf(both);
    }

    private static List<Expression> joinCond(Expression e) {
        return CollectionConverters.asJava(e instanceof Exists ? ((Exists) e).joinCond()
            : ((InSubquery) e).query().joinCond());
    }

    /** v IN (matched y's), three-valued; FALSE when nothing matched. */
    private static Expression in(PartnerMatch m, InSubquery q) {
        Expression v = q.values().apply(0);
        ArrayType t = (ArrayType) m.matched.dataType();
        NamedLambdaVariable x = new NamedLambdaVariable("x", t.elementType(), false,
            NamedExpression$.MODULE$.newExprId(), new java.util.concurrent.atomic.AtomicReference<>());
        Expression ys = new ArrayTransform(m.matched, new LambdaFunction(
            new GetStructField(x, 0, Option.empty()), AiCalls.seq(List.<NamedExpression>of(x)), false));
        return new If(QuailOuterJoin.hasMatch(m, false), Literal.create(false, BooleanType$.MODULE$),
            new ArrayContains(ys, v));
    }
}
