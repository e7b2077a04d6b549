package io.quailspark;

import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Repartition;
import org.apache.spark.sql.catalyst.plans.logical.RepartitionByExpression;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.Statistics;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.statsEstimation.EstimationUtils;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.internal.SQLConf;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Rows reaching an AI call, and where the figure comes from, in this order: Spark's row count where
 * the cost-based optimizer gives one ("statistics"); a bounded sample of a file source run through
 * the relational operators below the call ({@link AiSample}); the rows of the one table below
 * (ANALYZE's count, the rows the driver holds) thinned by default selectivities of relational
 * predicates (equality 0.1, IN 0.3, a range 0.33, IS NOT NULL 1, others 0.5); else Spark's size over
 * its row width ("size estimate"); else unknown (an RDD below: null).
 */
final class AiRows {
    static final double EQUALITY = 0.1, IN = 0.3, RANGE = 0.33, OTHER = 0.5;

    final Double rows;
    final String source;

    private AiRows(Double rows, String source) {
        this.rows = rows;
        this.source = source;
    }

    static AiRows of(LogicalPlan p) {
        Statistics s = p.stats();
        if (s.rowCount().isDefined()) return new AiRows(s.rowCount().get().doubleValue(), "statistics");
        AiSample.Facts f = AiSample.of(p, null);
        if (f != null) return new AiRows(f.rows, f.source());
        Double rel = relational(p);
        if (rel != null) return new AiRows(rel, "table rows, default selectivities");
        double unknown = SQLConf.get().defaultSizeInBytes();
        for (LogicalPlan leaf : CollectionConverters.asJava(p.collectLeaves())) {
            if (leaf.stats().sizeInBytes().doubleValue() >= unknown) return new AiRows(null, "default");
        }
        return new AiRows(s.sizeInBytes().doubleValue() / Math.max(1.0, EstimationUtils.getSizePerRow(p.output(),
            EstimationUtils.getSizePerRow$default$2()).doubleValue()), "size estimate");
    }

    /** Rows of a chain of relational operators over one table of known rows, or null. */
    static Double relational(LogicalPlan p) {
        if (p instanceof Filter) {
            Double r = relational(((Filter) p).child());
            return r == null ? null : r * selectivity(((Filter) p).condition());
        }
        if (p instanceof GlobalLimit) {
            Double r = relational(((GlobalLimit) p).child());
            Expression n = ((GlobalLimit) p).limitExpr();
            return r == null || !(n instanceof Literal) ? r : Math.min(r, ((Number) ((Literal) n).value()).doubleValue());
        }
        if (p instanceof Project || p instanceof Sort || p instanceof SubqueryAlias || p instanceof LocalLimit
            || p instanceof Repartition || p instanceof RepartitionByExpression) {
            return relational(p.children().head());
        }
        if (p instanceof LocalRelation) return (double) ((LocalRelation) p).data().size();
        if (p instanceof LogicalRelation) {  // ANALYZE TABLE's count
            Option<CatalogTable> t = ((LogicalRelation) p).catalogTable();
            if (t.isDefined() && t.get().stats().isDefined() && t.get().stats().get().rowCount().isDefined()) {
                return t.get().stats().get().rowCount().get().doubleValue();
            }
        }
        return null;
    }

    /** Default selectivity of a relational predicate (an AI conjunct counts the AI default). */
    static double selectivity(Expression e) {
        if (e instanceof And) return selectivity(((And) e).left()) * selectivity(((And) e).right());
        if (e instanceof Or) {
            double a = selectivity(((Or) e).left()), b = selectivity(((Or) e).right());
            return 1 - (1 - a) * (1 - b);
        }
        if (e instanceof Not) return 1 - selectivity(((Not) e).child());
        if (e instanceof IsNotNull) return 1.0;
        if (e instanceof IsNull) return EQUALITY;
        if (e instanceof EqualTo || e instanceof EqualNullSafe) return EQUALITY;
        if (e instanceof In || e instanceof InSet) return IN;
        if (e instanceof BinaryComparison) return RANGE;
        return AiCalls.containsAi(e) ? AiCost.DEFAULT_SELECTIVITY : OTHER;
    }
}
