"""Plan helpers the runtime uses (documents, questions, chains, anchors) and explain."""

import doctest

import pytest

import quail_spark.catalog
import quail_spark.cost
import quail_spark.explain
import quail_spark.parser
import quail_spark.plan
import quail_spark.rules
from quail_spark import plan as P
from quail_spark.explain import explain_logical
from quail_spark.parser import parse
from quail_spark.rules import optimize

from .golden import CATALOG, CTX

r_text, r_title, t_term = P.ColumnRef("r", "text"), P.ColumnRef("r", "title"), P.ColumnRef("t", "term")


@pytest.mark.parametrize("module", [quail_spark.plan, quail_spark.catalog, quail_spark.cost,
                                    quail_spark.parser, quail_spark.rules, quail_spark.explain])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


def test_question_text_one_document():
    t = P.Template("Is {0} about {1}? Is {0} long?", (r_text, P.Literal("cats")))
    assert P.doc_columns(t) == (r_text,)
    assert P.question_text(t) == "Is the document about cats? Is the document long?"


def test_question_text_several_columns():
    t = P.Template("Does {1} match {0}?", (r_text, r_title))
    assert P.doc_columns(t) == (r_text, r_title)
    assert P.question_text(t) == "Does title match text?"
    assert P.document_text(("text", "title"), ("Broke.", None)) == "text: Broke.\ntitle: "


def test_join_helpers_follow_the_anchor():
    t = P.Template("Is {1} mentioned in {0}?", (r_text, t_term))
    scan_r, scan_t = P.Scan("reports", "r", ("text",)), P.Scan("terms", "t", ("term",))
    j = P.AIJoin(scan_r, scan_t, t, anchor="r")
    assert (P.anchor_column(j), P.partner_column(j)) == (r_text, t_term)
    assert P.join_question_text(j) == "Is DOCUMENT 2 mentioned in DOCUMENT 1?"
    j = P.AIJoin(scan_t, scan_r, t, anchor="t")
    assert (P.anchor_column(j), P.partner_column(j)) == (t_term, r_text)
    assert P.join_question_text(j) == "Is DOCUMENT 1 mentioned in DOCUMENT 2?"


def test_optimised_plan_exposes_chain_order_retention_and_anchor():
    sql = ("SELECT r.id FROM reports r JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term) "
           "WHERE ai_if('Is {0} long?', r.text, map('selectivity', 0.9)) "
           "AND ai_if('Is {0} a case report?', r.text, map('selectivity', 0.1))")
    plan = optimize(parse(sql, CATALOG), CTX)
    join = plan.child
    assert isinstance(join, P.AIJoin) and join.anchor == "r" and join.retain == "anchor"
    assert P.aliases(join.left) == {"r"}
    chain, base = P.ai_chain(join.left)
    assert [f.template.text for f in chain] == ["Is {0} a case report?", "Is {0} long?"]
    assert [f.retain for f in chain] == ["document", "none"]
    assert chain[0].sort_keys == (r_text,) and chain[1].sort_keys == ()
    assert chain[0].rank < chain[1].rank
    assert isinstance(base, P.Scan)
    assert all(n.est is not None for n in P.walk(plan))


def test_explain_shows_plan_order_anchors_and_total():
    sql = ("SELECT r.id FROM terms t JOIN reports r ON ai_if('Is {0} about {1}?', r.text, t.term) "
           "WHERE ai_if('Is {0} long?', r.text) AND r.year > 2000")
    text = explain_logical(optimize(parse(sql, CATALOG), CTX), CTX)
    assert text.startswith("== Logical plan ==\nProject [r.id]  (rows=")
    assert "== AI filter order" in text and "1. 'Is {0} long?', r.text  selectivity=0.5 (default)" in text
    assert "anchor r.text (83 rows), partner t.term (1,127 rows), pairs=93,917" in text
    assert text.splitlines()[-1].startswith("total: ")
    assert "(qwen3-4b at 789 TFLOP/s)" in text


def test_explain_estimates_an_unoptimised_plan_given_a_context():
    plan = parse("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text)", CATALOG)
    assert "rows=5,000" in explain_logical(plan, CTX)
    with pytest.raises(ValueError, match="expected an optimised plan"):
        explain_logical(plan)
