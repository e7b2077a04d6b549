package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.ArrayExists;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Exists;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.InSubquery;
import org.apache.spark.sql.catalyst.expressions.LambdaFunction;
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
 * {@code (v1, ...) IN (SELECT y1, ...)} becomes {@code IF(size(matched) = 0, FALSE,
 * exists(matched, x -> x.y1 = v1 AND ...))}: TRUE when a matched row equals the values,
 * NULL when none does but a comparison is NULL (SQL's three-valued IN, so NOT IN is right
 * too). The subquery may stand in a WHERE (a Filter) or as a column of a SELECT list.
 */
public class QuailAiSubquery extends AiRule<LogicalPlan> {
    public QuailAiSubquery(SparkSession session) {
        super(session, LogicalPlan.class, true);  // the query cannot run without it
    }

    @Override
    LogicalPlan rewrite(LogicalPlan p) {
        if (p instanceof Filter) {
            Filter f = (Filter) p;
            Rewritten r = rewritten(List.of(f.condition()), f.child());
            return r == null ? p : new Project(Catalyst.seq(new ArrayList<NamedExpression>(
                CollectionConverters.asJava(f.child().output()))), new Filter(r.exprs.get(0), r.child));
        }
        if (p instanceof Project) {  // EXISTS / IN as a column of a SELECT list
            Project q = (Project) p;
            List<Expression> exprs = new ArrayList<>();
            for (NamedExpression n : CollectionConverters.asJava(q.projectList())) exprs.add((Expression) n);
            Rewritten r = rewritten(exprs, q.child());
            if (r == null) return p;
            List<NamedExpression> named = new ArrayList<>();
            for (Expression e : r.exprs) named.add((NamedExpression) e);
            return new Project(Catalyst.seq(named), r.child);
        }
        return p;
    }

    /** Expressions over a child with their AI-correlated subqueries replaced, and the child with the matches. */
    private static final class Rewritten {
        final List<Expression> exprs;
        final LogicalPlan child;

        Rewritten(List<Expression> exprs, LogicalPlan child) {
            this.exprs = exprs;
            this.child = child;
        }
    }

    /** {@code exprs} over {@code child}, each AI-correlated subquery replaced by a test on its matches; null if
     * none. */
    private Rewritten rewritten(List<Expression> exprs, LogicalPlan child) {
        List<Expression> out = new ArrayList<>(exprs);
        boolean changed = false;
        for (Expression sub = target(out, child); sub != null; sub = target(out, child)) {
            Expression found = sub;
            LogicalPlan subPlan = found instanceof Exists ? ((Exists) found).plan() : ((InSubquery) found).query().plan();
            PartnerMatch m = PartnerMatch.build(session, child, subPlan, Catalyst.and(joinCond(found)));
            if (m == null) break;
            Expression replacement = found instanceof Exists ? QuailOuterJoin.hasMatch(m, true) : in(m, (InSubquery) found);
            for (int i = 0; i < out.size(); i++) {
                out.set(i, out.get(i).transform(new Rewrite<Expression>(e -> e == found ? replacement : null)));
            }
            child = m.plan;
            changed = true;
        }
        return changed ? new Rewritten(out, child) : null;
    }

    /** The first EXISTS or IN subquery of exprs correlated through an AI call over child's columns. */
    private static Expression target(List<Expression> exprs, LogicalPlan child) {
        Expression[] hit = {null};
        for (Expression cond : exprs) {
            cond.foreach(new scala.runtime.AbstractFunction1<Expression, scala.runtime.BoxedUnit>() {
                @Override
                public scala.runtime.BoxedUnit apply(Expression e) {
                    if (hit[0] == null && applies(e, child)) hit[0] = e;
                    return scala.runtime.BoxedUnit.UNIT;
                }
            });
        }
        return hit[0];
    }

    private static boolean applies(Expression e, LogicalPlan child) {
        LogicalPlan sub;
        if (e instanceof Exists) {
            sub = ((Exists) e).plan();
        } else if (e instanceof InSubquery
                && ((InSubquery) e).values().size() == ((InSubquery) e).query().numCols()) {
            sub = ((InSubquery) e).query().plan();
        } else {
            return false;
        }
        List<Expression> jc = joinCond(e);
        if (jc.isEmpty() || !PartnerMatch.applies(Catalyst.and(jc))) return false;
        AttributeSet both = child.outputSet().$plus$plus(sub.outputSet());
        return Catalyst.and(jc).references().subsetOf(both);
    }

    private static List<Expression> joinCond(Expression e) {
        return CollectionConverters.asJava(e instanceof Exists ? ((Exists) e).joinCond()
            : ((InSubquery) e).query().joinCond());
    }

    /** (v1, ..., vn) IN (matched rows), three-valued (a NULL comparison and no TRUE one: NULL); FALSE when
     * nothing matched. */
    private static Expression in(PartnerMatch m, InSubquery q) {
        ArrayType t = (ArrayType) m.matched.dataType();
        NamedLambdaVariable x = new NamedLambdaVariable("x", t.elementType(), false,
            NamedExpression$.MODULE$.newExprId(), new java.util.concurrent.atomic.AtomicReference<>());
        List<Expression> equal = new ArrayList<>();
        List<Expression> values = CollectionConverters.asJava(q.values());
        for (int i = 0; i < values.size(); i++) {
            equal.add(new EqualTo(new GetStructField(x, i, Option.empty()), values.get(i)));
        }
        Expression any = new ArrayExists(m.matched, new LambdaFunction(Catalyst.and(equal),
            Catalyst.seq(List.<NamedExpression>of(x)), false), true);
        return new If(QuailOuterJoin.hasMatch(m, false), Literal.create(false, BooleanType$.MODULE$), any);
    }
}
