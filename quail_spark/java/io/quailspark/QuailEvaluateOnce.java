package io.quailspark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Analysis rule (post-hoc resolution; a no-op with {@code spark.quail.optimizer.enabled=false}):
 * an AI column that a filter above reads is evaluated once, not twice.
 *
 * <p>{@code df.withColumn("s", ai_score(...)).where("s > 0.5")}, or
 * {@code SELECT * FROM (SELECT ai_score(...) AS s ...) WHERE s > 0.5}: Spark pushes the filter
 * below the projection by writing the alias out, so the AI call runs once in the filter and again
 * in the projection above it (twice the tokens). Here the filter's conjuncts that read no AI
 * column go below the projection (aliases written out, as Spark does), and the AI calls of the
 * columns the filter reads are marked non-deterministic, which Spark does not push a filter
 * through: the filter stays on the projection's output and reads the one evaluation. Relational
 * filters that arrive above later are pushed below the AI projection by {@link QuailPushBelowAi}.
 *
 * <pre>
 * before: Filter (s > 0.5 AND id > 2)               optimized, without the rule:
 *           +- Project [id, ai_score(q, body) AS s]   Project [id, ai_score(q, body) AS s]
 *              +- child                                +- Filter (ai_score(q, body) > 0.5 AND id > 2)
 * after:  Filter (s > 0.5)                                 +- child
 *           +- Project [id, ai_score(q, body) AS s]   (the call non-deterministic)
 *              +- Filter (id > 2)
 *                 +- child
 * </pre>
 */
final class QuailEvaluateOnce extends Rule<LogicalPlan> {

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!AiCalls.enabled()) return plan;
        return plan.resolveOperatorsUp(new AiCalls.PlanRewrite() {
            @Override
            LogicalPlan rewrite(LogicalPlan p) {
                return p instanceof Filter ? rewriteFilter((Filter) p) : p;
            }
        });
    }

    private static LogicalPlan rewriteFilter(Filter f) {
        LogicalPlan under = f.child();
        SubqueryAlias alias = under instanceof SubqueryAlias ? (SubqueryAlias) under : null;
        if (alias != null) under = alias.child();
        if (!(under instanceof Project)) return f;
        Project project = (Project) under;
        Map<ExprId, Expression> aiColumns = new HashMap<>(), others = new HashMap<>();
        for (NamedExpression n : CollectionConverters.asJava(project.projectList())) {
            if (!(n instanceof Alias)) continue;
            Expression value = ((Alias) n).child();
            (AiCalls.containsAi(value) ? aiColumns : others).put(n.exprId(), value);
        }
        if (aiColumns.isEmpty() || !reads(f.condition(), aiColumns)) return f;
        List<Expression> keep = new ArrayList<>(), push = new ArrayList<>();
        for (Expression c : AiCalls.conjuncts(f.condition())) {
            Expression written = QuailPushBelowAi.writeOut(c, others);
            boolean below = !reads(c, aiColumns) && c.deterministic() && written.deterministic()
                && written.references().subsetOf(project.child().outputSet());
            if (below) push.add(written); else keep.add(c);
        }
        List<NamedExpression> fields = new ArrayList<>();
        for (NamedExpression n : CollectionConverters.asJava(project.projectList())) {
            fields.add(n instanceof Alias && aiColumns.containsKey(n.exprId())
                ? (NamedExpression) ((Expression) n).transformUp(new AiCalls.ExpressionRewrite(QuailKeepRepartition::pinned)) : n);
        }
        LogicalPlan grand = push.isEmpty() ? project.child() : new Filter(AiCalls.and(push), project.child());
        LogicalPlan out = new Project(AiCalls.seq(fields), grand);
        if (alias != null) out = alias.withNewChildren(AiCalls.seq(List.of(out)));
        return new Filter(AiCalls.and(keep), out);
    }

    /** Whether {@code e} reads one of the attributes in {@code ids}. */
    static boolean reads(Expression e, Map<ExprId, Expression> ids) {
        for (Attribute a : CollectionConverters.asJava(e.references().toSeq())) {
            if (ids.containsKey(a.exprId())) return true;
        }
        return false;
    }
}
