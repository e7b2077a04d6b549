package io.quailspark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Relational conjuncts of a filter go below a projection whose only non-deterministic parts are AI
 * calls (marked so by {@link QuailEvaluateOnce} or {@link QuailKeepRepartition}, or the internal
 * {@code quail_eval} / {@code quail_chain} / {@code quail_join} / {@code quail_match}), so the AI
 * work runs on the rows that survive them.
 *
 * <p>Spark pushes no filter through a projection with a non-deterministic column (the column might
 * depend on which rows came before it). The AI calls are non-deterministic only to hold them in
 * place: each answer depends on its own row alone, so a filter that reads no AI column may run
 * first, and the rows are the same. Conjuncts that read an AI column, or are non-deterministic
 * themselves, stay above.
 *
 * <pre>
 * before: Filter (s > 0.5 AND id > 2)                 after: Filter (s > 0.5)
 *           +- Project [id, ai_score(q, body) AS s]           +- Project [id, ai_score(q, body) AS s]
 *              +- child                                          +- Filter (id > 2)
 *                                                                   +- child
 * </pre>
 */
public class QuailPushBelowAi extends AiRule<Filter> {
    public QuailPushBelowAi(SparkSession session) {
        super(session, Filter.class);
    }

    @Override
    LogicalPlan rewrite(Filter f) {
        if (!(f.child() instanceof Project)) return f;
        Project project = (Project) f.child();
        Set<ExprId> aiColumns = new HashSet<>();
        Map<ExprId, Expression> others = new HashMap<>();
        for (NamedExpression n : CollectionConverters.asJava(project.projectList())) {
            if (((Expression) n).deterministic()) {
                if (n instanceof Alias) others.put(n.exprId(), ((Alias) n).child());
                continue;
            }
            if (!(n instanceof Alias) || !onlyAiIsNondeterministic(((Alias) n).child())) return f;
            aiColumns.add(n.exprId());
        }
        if (aiColumns.isEmpty()) return f;  // Spark's own push-down handles a deterministic projection
        List<Expression> keep = new ArrayList<>(), push = new ArrayList<>();
        for (Expression c : Catalyst.conjuncts(f.condition())) {
            Expression written = writeOut(c, others);
            boolean below = Collections.disjoint(QuailEvaluateOnce.ids(c), aiColumns) && c.deterministic()
                && written.deterministic() && written.references().subsetOf(project.child().outputSet());
            if (below) push.add(written); else keep.add(c);
        }
        if (push.isEmpty()) return f;
        LogicalPlan grand = new Filter(Catalyst.and(push), project.child());
        LogicalPlan moved = project.withNewChildren(Catalyst.seq(List.of(grand)));
        return keep.isEmpty() ? moved : new Filter(Catalyst.and(keep), moved);
    }

    /** {@code e} with the attributes of {@code aliases} replaced by the expressions they name. */
    static Expression writeOut(Expression e, Map<ExprId, Expression> aliases) {
        return e.transformUp(new Rewrite<Expression>(x ->
            x instanceof Attribute && aliases.containsKey(((Attribute) x).exprId())
                ? aliases.get(((Attribute) x).exprId()) : null));
    }

    /** Whether every non-deterministic part of {@code e} is an AI call or an internal call of the rules. */
    static boolean onlyAiIsNondeterministic(Expression e) {
        if (e.deterministic()) return true;
        boolean call = AiCalls.isAi(e) || AiCalls.isInternal(e);
        List<Expression> children = CollectionConverters.asJava(e.children());
        // a call holds only deterministic arguments; any other node is non-deterministic through its children
        // alone (one non-deterministic in itself, rand() or uuid(), has none that are)
        if (call) return children.stream().allMatch(Expression::deterministic);
        return !children.stream().allMatch(Expression::deterministic)
            && children.stream().allMatch(QuailPushBelowAi::onlyAiIsNondeterministic);
    }
}
