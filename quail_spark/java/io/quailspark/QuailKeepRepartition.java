package io.quailspark;

import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.RebalancePartitions;
import org.apache.spark.sql.catalyst.plans.logical.RepartitionOperation;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * Analysis rule (post-hoc resolution, so it runs with the optimizer rules on or off): an AI
 * filter written over a repartition runs after that repartition.
 *
 * <p>A user repartitions before an expensive predicate to spread it over more tasks (more
 * GPUs): {@code df.repartition(64).where(ai_if(...))}, or a {@code REPARTITION} /
 * {@code REBALANCE} hint in a subquery. Spark's predicate push-down moves a deterministic
 * filter below the repartition, so the AI calls would run on the input's partitions (one task
 * for a small file) and only the survivors would be shuffled. The AI calls of such a filter
 * are marked non-deterministic, which Spark does not push through a repartition: the filter
 * stays where it was written. Relational conjuncts of the same filter are left as they are and
 * still go down. The rows are the same either way; where the AI work runs is what changes.
 *
 * <pre>
 * before: Filter ai_if('Is {0} late?', body)          optimized, without the rule:
 *           +- RepartitionByExpression 64              RepartitionByExpression 64
 *              +- child                                  +- Filter ai_if(...)
 *                                                           +- child
 * after:  the same Filter with the call non-deterministic; optimized, it stays above the repartition
 * </pre>
 *
 * A repartition without a shuffle (coalesce) is not a barrier: Spark runs the operators below it
 * in the coalesced tasks anyway.
 */
final class QuailKeepRepartition extends Rule<LogicalPlan> {

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        return plan.resolveOperatorsUp(new Rewrite<LogicalPlan>(p -> {
            if (!(p instanceof Filter) || !p.resolved()) return p;  // an unresolved plan: the analyzer reports it
            Filter f = (Filter) p;
            if (!AiCalls.containsAi(f.condition()) || !overRepartition(f.child())) return p;
            Expression kept = f.condition().transformUp(new Rewrite<Expression>(QuailKeepRepartition::pinned));
            return kept == f.condition() ? p : new Filter(kept, f.child());
        }));
    }

    /** A shuffling repartition under {@code p}, through the nodes Spark pushes a filter across. */
    static boolean overRepartition(LogicalPlan p) {
        while (true) {
            if (p instanceof RepartitionOperation) return ((RepartitionOperation) p).shuffle();
            if (p instanceof RebalancePartitions) return true;
            if (!(p instanceof Project) && !crossed(p)) return false;
            p = p.children().head();
        }
    }

    /** A one-child node (other than a projection or a repartition) that Spark pushes a filter across. */
    static boolean crossed(LogicalPlan p) {
        return p instanceof SubqueryAlias || p instanceof View || p instanceof Sort
            || (p instanceof Filter && ((Filter) p).condition().deterministic());
    }

    /** The AI call marked non-deterministic, or null where there is nothing to change. */
    static Expression pinned(Expression e) {
        if (!AiCalls.isAi(e) || !e.deterministic()) return null;
        PythonUDF u = (PythonUDF) e;
        return u.copy(u.name(), u.func(), u.dataType(), u.children(), u.evalType(), false, u.resultId());
    }
}
