package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.PredicateHelper;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Catalyst from Java, for every rule: conjuncts (Catalyst's own {@link PredicateHelper}), Scala
 * sequences, literals, calls of the session's functions, analysis errors.
 */
final class Catalyst implements PredicateHelper {
    private static final Catalyst HELPER = new Catalyst();
    private transient org.slf4j.Logger log;  // PredicateHelper is Logging: Scala's field, held here

    private Catalyst() {}

    /** The conjuncts of {@code e}, left to right ({@code e} itself when it is no AND). */
    static List<Expression> conjuncts(Expression e) {
        return new ArrayList<>(CollectionConverters.asJava(HELPER.splitConjunctivePredicates(e)));
    }

    /** The AND of {@code es}, left-deep in their order; null for none. */
    static Expression and(List<Expression> es) {
        Expression out = null;
        for (Expression e : es) out = out == null ? e : new And(out, e);
        return out;
    }

    /** A call of a function registered in this session (install() registers the internal UDFs), or null. */
    static Expression call(SparkSession session, String name, List<Expression> args) {
        try {
            org.apache.spark.sql.classic.SparkSession s = (org.apache.spark.sql.classic.SparkSession) session;
            scala.Option<Expression> e = s.sessionState().catalog().resolveBuiltinOrTempFunction(name, seq(args));
            return e.isDefined() ? e.get() : null;
        } catch (RuntimeException | AssertionError ex) {
            return null;  // quail_spark.install() was not called in this session: leave the plan as it is
        }
    }

    /** Spark's AnalysisException (checked in Java), thrown unchecked: the analyzer reports it as usual. */
    static RuntimeException analysisError(String message) {
        throw Catalyst.<RuntimeException>unchecked(new org.apache.spark.sql.AnalysisException(message,
            scala.Option.empty(), scala.Option.empty(), scala.Option.empty(), scala.Option.empty(),
            scala.collection.immutable.Map$.MODULE$.empty(), new org.apache.spark.QueryContext[0]));
    }

    @SuppressWarnings("unchecked")
    private static <E extends Throwable> E unchecked(Throwable t) throws E {
        throw (E) t;
    }

    static Expression literal(String s) {
        return Literal$.MODULE$.apply(s);
    }

    static <T> scala.collection.immutable.Seq<T> seq(List<T> xs) {
        return CollectionConverters.asScala(xs).toList();
    }

    @Override
    public org.slf4j.Logger org$apache$spark$internal$Logging$$log_() {
        return log;
    }

    @Override
    public void org$apache$spark$internal$Logging$$log__$eq(org.slf4j.Logger logger) {
        log = logger;
    }
}
