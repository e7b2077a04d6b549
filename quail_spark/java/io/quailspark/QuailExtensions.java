package io.quailspark;

import java.io.Serializable;
import java.util.List;
import java.util.function.Function;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Entry point named by {@code spark.sql.extensions=io.quailspark.QuailExtensions}.
 *
 * <p>Injects the AI rules into Catalyst's operator-optimization batch (run to a
 * fixed point, before Spark's "Extract Python UDFs" batch, so the rules see the
 * AI functions as {@code PythonUDF} expressions). Every rule is idempotent and
 * a no-op when {@code spark.quail.optimizer.enabled=false}, except the two without
 * which a query cannot run: {@link QuailOuterJoin} and {@link QuailAiSubquery}. Three analysis rules run on
 * every path: {@link QuailHintStruct} turns map hints into structs, then
 * {@link QuailAnchorHint} resolves the anchor hint to an argument position, then
 * {@link QuailKeepRepartition} keeps an AI filter above the repartition it was written over; with the
 * rules on, {@link QuailEvaluateOnce} keeps a filter on an AI column from evaluating the call a second
 * time below the projection (and {@link QuailPushBelowAi} still moves relational conjuncts below); one
 * check rule, {@link QuailArgTypes}, refuses a non-string document argument by name. One function,
 * {@link AiExtractFunction}: {@code ai_extract}, Spark's from_json over the JSON text of the registered
 * Python UDF {@code quail_extract}, typed by its schema argument.
 */
public class QuailExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

    /** Analysis rules, in the order they run. */
    static final List<Make<Rule<LogicalPlan>>> POST_HOC = List.of(
            s -> new QuailHintStruct(),
            s -> new QuailAnchorHint(),
            s -> new QuailKeepRepartition(),
            s -> new QuailEvaluateOnce());

    /** Operator-optimization rules, in the order they are injected. */
    static final List<Make<Rule<LogicalPlan>>> OPTIMIZER = List.of(
            QuailPushBelowAi::new,
            QuailOuterJoin::new,
            QuailAiSubquery::new,
            QuailFilterChain::new,
            QuailAiJoinOrder::new,
            QuailAiJoin::new,
            QuailLocalSort::new,
            QuailFuseCalls::new,
            s -> new QuailBudget());

    @Override
    public BoxedUnit apply(SparkSessionExtensions ext) {
        for (Make<Rule<LogicalPlan>> rule : POST_HOC) {
            ext.injectPostHocResolutionRule(new Builder<>(rule));
        }
        for (Make<Rule<LogicalPlan>> rule : OPTIMIZER) {
            ext.injectOptimizerRule(new Builder<>(rule));
        }
        ext.injectCheckRule(new Builder<scala.Function1<LogicalPlan, BoxedUnit>>(s -> new QuailArgTypes()));
        ext.injectFunction(AiExtractFunction.description());
        return BoxedUnit.UNIT;
    }

    /** A rule's constructor from the session (serializable, as Spark's builders are). */
    interface Make<T> extends Function<SparkSession, T>, Serializable {
    }

    /** A Scala builder (SparkSession => T) over a Java constructor: one per rule, so the rules are injected in order. */
    private static final class Builder<T> extends AbstractFunction1<SparkSession, T> implements Serializable {
        private final Make<T> make;

        Builder(Make<T> make) {
            this.make = make;
        }

        @Override
        public T apply(SparkSession session) {
            return make.apply(session);
        }
    }
}
