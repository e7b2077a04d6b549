package io.quailspark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * A Catalyst rule of quail-spark: one {@link #rewrite} of a plan node of one class, applied
 * bottom-up to the whole plan and to the plans of its subqueries; a no-op when
 * {@code spark.quail.optimizer.enabled=false}, unless made {@code alsoWhenDisabled} (a
 * rewrite without which the query cannot run at all). A rewrite returns the node
 * unchanged when nothing matches (the optimizer batch runs to a fixed point).
 */
abstract class AiRule<T extends LogicalPlan> extends Rule<LogicalPlan> {
    /** The session whose function registry holds the internal UDFs that install() registered. */
    final SparkSession session;
    /** The nodes the rule rewrites (LogicalPlan: any). */
    private final Class<T> node;
    /** Whether the rule runs with the optimizer rules off too (it makes a query runnable). */
    private final boolean alsoWhenDisabled;

    AiRule(SparkSession session, Class<T> node) {
        this(session, node, false);
    }

    AiRule(SparkSession session, Class<T> node, boolean alsoWhenDisabled) {
        this.session = session;
        this.node = node;
        this.alsoWhenDisabled = alsoWhenDisabled;
    }

    /** The node rewritten, or the node itself when nothing matches. */
    abstract LogicalPlan rewrite(T node);

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!AiCalls.enabled() && !alsoWhenDisabled) return plan;
        return plan.transformUpWithSubqueries(new Rewrite<LogicalPlan>(p -> node.isInstance(p) ? rewrite(node.cast(p)) : p));
    }
}
