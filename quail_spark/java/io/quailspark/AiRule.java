package io.quailspark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * A Catalyst rule of quail-spark: one {@link #rewrite} of a plan node, applied
 * bottom-up to the whole plan and to the plans of its subqueries; a no-op when
 * {@code spark.quail.optimizer.enabled=false}, unless {@link #alsoWhenDisabled} (a
 * rewrite without which the query cannot run at all). A rewrite returns the node
 * unchanged when nothing matches (the optimizer batch runs to a fixed point).
 */
abstract class AiRule extends Rule<LogicalPlan> {
    /** The session whose function registry holds the internal UDFs that install() registered. */
    final SparkSession session;

    AiRule(SparkSession session) {
        this.session = session;
    }


    abstract LogicalPlan rewrite(LogicalPlan node);

    /** Whether the rule runs with the optimizer rules off too (it makes a query runnable). */
    boolean alsoWhenDisabled() {
        return false;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!AiCalls.enabled() && !alsoWhenDisabled()) return plan;
        return plan.transformUpWithSubqueries(new Rewrite<LogicalPlan>(this::rewrite));
    }
}
