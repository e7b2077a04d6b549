package io.quailspark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.RebalancePartitions;
import org.apache.spark.sql.catalyst.plans.logical.RepartitionOperation;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Analysis rule (post-hoc resolution; a no-op with {@code spark.quail.optimizer.enabled=false}):
 * an AI column that a filter above reads is evaluated once, not twice.
 *
 * <p>{@code df.withColumn("s", ai_score(...)).where("s > 0.5")}, or
 * {@code SELECT * FROM (SELECT ai_score(...) AS s ...) WHERE s > 0.5}, or a join condition on
 * such a column ({@code ... a JOIN b ON a.s > 0.5 AND a.k = b.k}): Spark pushes the filter
 * below the projection by writing the alias out, so the AI call runs once in the filter and again
 * in the projection above it (twice the tokens). Here the AI calls of the columns the filter
 * reads are marked non-deterministic where a projection defines them (looking down through
 * projections, aliases, sorts, repartitions and filters, which Spark pushes a filter across):
 * Spark pushes no filter through that projection, so the filter reads the one evaluation. Its
 * relational conjuncts still go below the projection: {@link QuailPushBelowAi}.
 *
 * <pre>
 * before: Filter (s > 0.5 AND id > 2)               optimized, without the rule:
 *           +- Project [id, ai_score(q, body) AS s]   Project [id, ai_score(q, body) AS s]
 *              +- child                                +- Filter (ai_score(q, body) > 0.5 AND id > 2)
 * after:  the same, the call non-deterministic; optimized  +- child
 *         (with QuailPushBelowAi): Filter (s > 0.5)
 *                                    +- Project [id, ai_score(q, body) AS s]
 *                                       +- Filter (id > 2)
 * </pre>
 */
final class QuailEvaluateOnce extends Rule<LogicalPlan> {

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!AiCalls.enabled()) return plan;
        return plan.resolveOperatorsUp(new Rewrite<LogicalPlan>(p -> {
            if (!p.resolved()) return p;  // analysis failed below: the analyzer reports it
            if (p instanceof Filter) return rewriteFilter((Filter) p);
            return p instanceof Join ? rewriteJoin((Join) p) : p;
        }));
    }

    private static LogicalPlan rewriteFilter(Filter f) {
        LogicalPlan child = held(f.child(), ids(f.condition()));
        return child == f.child() ? f : new Filter(f.condition(), child);
    }

    /** A join condition reading an AI column of one side: Spark pushes that conjunct into the side. */
    private static LogicalPlan rewriteJoin(Join j) {
        if (j.condition().isEmpty()) return j;
        Set<ExprId> read = ids(j.condition().get());
        LogicalPlan left = held(j.left(), read), right = held(j.right(), read);
        if (left == j.left() && right == j.right()) return j;
        return j.withNewChildren(Catalyst.seq(List.of(left, right)));
    }

    /**
     * {@code p} with the AI calls of the columns in {@code read} marked non-deterministic where a
     * projection defines them, looking down through the nodes Spark pushes a filter across.
     */
    private static LogicalPlan held(LogicalPlan p, Set<ExprId> read) {
        if (p instanceof Project) {
            Project project = (Project) p;
            List<NamedExpression> fields = new ArrayList<>();
            Set<ExprId> readBelow = new HashSet<>(read);  // a renamed column reads what it renames
            boolean changed = false;
            for (NamedExpression n : CollectionConverters.asJava(project.projectList())) {
                Expression e = (Expression) n;
                boolean isRead = n instanceof Alias && read.contains(n.exprId());
                if (isRead) readBelow.addAll(ids(e));
                if (isRead && AiCalls.containsAi(e)) {
                    Expression pinned = e.transformUp(new Rewrite<Expression>(QuailKeepRepartition::pinned));
                    changed |= pinned != e;
                    fields.add((NamedExpression) pinned);
                } else {
                    fields.add(n);
                }
            }
            LogicalPlan below = held(project.child(), readBelow);
            if (!changed && below == project.child()) return p;
            return new Project(Catalyst.seq(fields), below);
        }
        boolean through = QuailKeepRepartition.crossed(p) || p instanceof RepartitionOperation
            || p instanceof RebalancePartitions;
        if (!through) return p;
        LogicalPlan child = p.children().head();
        LogicalPlan below = held(child, read);
        return below == child ? p : p.withNewChildren(Catalyst.seq(List.of(below)));
    }

    /** The expression ids of the attributes {@code e} reads. */
    static Set<ExprId> ids(Expression e) {
        Set<ExprId> out = new HashSet<>();
        for (Attribute a : CollectionConverters.asJava(e.references().toSeq())) out.add(a.exprId());
        return out;
    }
}
