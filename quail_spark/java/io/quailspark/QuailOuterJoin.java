package io.quailspark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Explode;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.Size;
import org.apache.spark.sql.catalyst.plans.FullOuter$;
import org.apache.spark.sql.catalyst.plans.JoinType;
import org.apache.spark.sql.catalyst.plans.LeftAnti$;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.LeftSemi$;
import org.apache.spark.sql.catalyst.plans.RightOuter$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.Metadata;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * LEFT / RIGHT / FULL OUTER, LEFT SEMI and LEFT ANTI joins whose ON has an AI
 * predicate over both sides, made runnable (Spark alone refuses a Python UDF in
 * those ON clauses: PYTHON_UDF_IN_ON_CLAUSE). Runs with the optimizer rules on
 * or off: without it these joins cannot run at all.
 *
 * <pre>
 * before: Join LeftOuter, (a.k = t.k AND ai_if('Does {0} mention {1}?', a.body, t.term))
 *         :- a
 *         +- t
 * after:  Project [a.*, p.c0 AS t.k, p.c1 AS t.term, ...]     (t's attributes keep their ids)
 *         +- Generate explode(matched), outer, [p]
 *            +- PartnerMatch(a, t, condition)                 (a.* plus the matched t rows, see PartnerMatch)
 * </pre>
 *
 * RIGHT OUTER is LEFT OUTER with the sides swapped; FULL OUTER is LEFT OUTER
 * plus the right rows no left row matches (the ANTI join of right against left,
 * NULLs for the left columns); LEFT SEMI keeps the rows with at least one match,
 * LEFT ANTI those with none. Inner AI joins are {@link QuailAiJoin}'s.
 */
public class QuailOuterJoin extends AiRule<Join> {
    public QuailOuterJoin(SparkSession session) {
        super(session, Join.class, true);  // the query cannot run without it
    }

    @Override
    LogicalPlan rewrite(Join j) {
        JoinType t = j.joinType();
        boolean handled = t == LeftOuter$.MODULE$ || t == RightOuter$.MODULE$ || t == FullOuter$.MODULE$
            || t == LeftSemi$.MODULE$ || t == LeftAnti$.MODULE$;
        if (!handled || j.condition().isEmpty() || !PartnerMatch.applies(j.condition().get())) return j;
        Expression cond = j.condition().get();
        LogicalPlan out;
        if (t == RightOuter$.MODULE$) {
            PartnerMatch m = PartnerMatch.build(session, j.right(), j.left(), cond);
            out = m == null ? null : withPartners(m, false);
        } else if (t == LeftSemi$.MODULE$ || t == LeftAnti$.MODULE$) {
            PartnerMatch m = PartnerMatch.build(session, j.left(), j.right(), cond);
            out = m == null ? null : keep(m, t == LeftSemi$.MODULE$, j.left().output());
        } else {
            PartnerMatch m = PartnerMatch.build(session, j.left(), j.right(), cond);
            out = m == null ? null : withPartners(m, true);
            if (out != null && t == FullOuter$.MODULE$) {
                PartnerMatch back = PartnerMatch.build(session, j.right(), j.left(), cond);
                out = back == null ? null : new Union(Catalyst.seq(List.of(out, unmatched(back, j.left()))), false, false);
            }
        }
        return out == null ? j : out;
    }

    /** Each preserved row once per matched partner, or once with NULL partner columns (explode_outer). */
    private static LogicalPlan withPartners(PartnerMatch m, boolean preservedLeft) {
        Attribute p = new AttributeReference("quail_partner", ((ArrayType) m.matched.dataType()).elementType(), true,
            Metadata.empty(), NamedExpression$.MODULE$.newExprId(), Catalyst.seq(new ArrayList<String>()));
        LogicalPlan rows = new Generate(new Explode(m.matched), Catalyst.seq(new ArrayList<Object>()), true,
            Option.empty(), Catalyst.seq(List.<Attribute>of(p)), m.plan);
        List<NamedExpression> partner = new ArrayList<>();
        for (int i = 0; i < m.partner.size(); i++) {
            Attribute a = m.partner.get(i);
            partner.add(PartnerMatch.alias(new GetStructField(p, i, Option.empty()), a.name(), a.exprId()));
        }
        List<NamedExpression> cols = new ArrayList<>();
        List<Attribute> preserved = preservedOutput(m);
        if (preservedLeft) {
            cols.addAll(preserved);
            cols.addAll(partner);
        } else {
            cols.addAll(partner);
            cols.addAll(preserved);
        }
        return new Project(Catalyst.seq(cols), rows);
    }

    /** The preserved rows with (semi) or without (anti) a match. */
    static LogicalPlan keep(PartnerMatch m, boolean withMatch, scala.collection.immutable.Seq<Attribute> output) {
        return new Project(Catalyst.seq(new ArrayList<NamedExpression>(CollectionConverters.asJava(output))),
            new Filter(hasMatch(m, withMatch), m.plan));
    }

    static Expression hasMatch(PartnerMatch m, boolean withMatch) {
        Expression n = new Size(m.matched, false);
        Literal zero = Literal.create(0, org.apache.spark.sql.types.IntegerType$.MODULE$);
        return withMatch ? new GreaterThan(n, zero) : new EqualTo(n, zero);
    }

    /** FULL OUTER's second part: right rows without a match, NULL in the left columns. */
    private static LogicalPlan unmatched(PartnerMatch back, LogicalPlan left) {
        List<NamedExpression> cols = new ArrayList<>();
        for (Attribute a : CollectionConverters.asJava(left.output())) {
            cols.add(PartnerMatch.alias(Literal.create(null, a.dataType()), a.name()));
        }
        cols.addAll(preservedOutput(back));
        return new Project(Catalyst.seq(cols), new Filter(hasMatch(back, false), back.plan));
    }

    private static List<Attribute> preservedOutput(PartnerMatch m) {
        List<Attribute> out = new ArrayList<>(CollectionConverters.asJava(m.plan.output()));
        out.remove(out.size() - 1);  // the matched list
        return out;
    }
}
