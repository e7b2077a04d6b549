package io.quailspark;

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

    @Override
    public BoxedUnit apply(SparkSessionExtensions ext) {
        ext.injectPostHocResolutionRule(new Builder(3));
        ext.injectPostHocResolutionRule(new Builder(4));
        ext.injectPostHocResolutionRule(new Builder(9));
        ext.injectPostHocResolutionRule(new Builder(10));
        ext.injectOptimizerRule(new Builder(11));
        ext.injectOptimizerRule(new Builder(7));
        ext.injectOptimizerRule(new Builder(8));
        ext.injectOptimizerRule(new Builder(0));
        ext.injectOptimizerRule(new Builder(5));
        ext.injectOptimizerRule(new Builder(1));
        ext.injectOptimizerRule(new Builder(2));
        ext.injectOptimizerRule(new Builder(6));
        ext.injectCheckRule(new CheckBuilder());
        ext.injectFunction(AiExtractFunction.description());
        return BoxedUnit.UNIT;
    }

    /** CheckRuleBuilder (SparkSession => LogicalPlan => Unit). */
    private static final class CheckBuilder extends AbstractFunction1<SparkSession, scala.Function1<LogicalPlan, BoxedUnit>>
            implements java.io.Serializable {
        @Override
        public scala.Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
            return new QuailArgTypes();
        }
    }

    /** RuleBuilder (SparkSession => Rule): one per rule, so the rules are injected in order. */
    private static final class Builder extends AbstractFunction1<SparkSession, Rule<LogicalPlan>>
            implements java.io.Serializable {
        private final int which;

        Builder(int which) {
            this.which = which;
        }

        @Override
        public Rule<LogicalPlan> apply(SparkSession session) {
            switch (which) {
                case 0: return new QuailFilterChain(session);
                case 1: return new QuailAiJoin(session);
                case 2: return new QuailLocalSort(session);
                case 3: return new QuailHintStruct();
                case 5: return new QuailAiJoinOrder(session);
                case 6: return new QuailFuseCalls(session);
                case 7: return new QuailOuterJoin(session);
                case 8: return new QuailAiSubquery(session);
                case 9: return new QuailKeepRepartition();
                case 10: return new QuailEvaluateOnce();
                case 11: return new QuailPushBelowAi(session);
                default: return new QuailAnchorHint();
            }
        }
    }
}
