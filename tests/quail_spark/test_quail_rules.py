"""The optimizer rules of the Spark extension (io.quailspark, quail_spark/java): one small
before/after plan per behaviour, rules on vs off (``spark.quail.optimizer.enabled``).

The plans are read from ``explain(mode="extended")``; no AI function is evaluated here.
"""
from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

import quail_spark

CHAIN = ("SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body) AND year > 2019 "
         "AND ai_if('Is {0} about a pet?', body, map('selectivity', 0.1))")
JOIN = "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term)"


@pytest.fixture(scope="module")
def rules(spark, tables):
    quail_spark.install(spark, model="tiny-llama-random", device="cpu", kv_pool_tokens=4096)
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")


def plans(spark, sql: str, on: bool = True) -> tuple[str, str]:
    """(optimized logical plan, physical plan) of ``sql`` with the rules on or off."""
    spark.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        spark.sql(sql).explain(mode="extended")
    text = out.getvalue()
    logical = text.split("== Optimized Logical Plan ==")[1].split("== Physical Plan ==")[0]
    return logical, text.split("== Physical Plan ==")[1]


def line_of(plan: str, pattern: str) -> int:
    """Index of the first plan line matching ``pattern`` (lower = nearer the root)."""
    return next(i for i, line in enumerate(plan.splitlines()) if re.search(pattern, line))


def chain_templates(plan: str) -> list[list[str]]:
    """The templates of each quail_chain call of a plan, in evaluation order."""
    specs = re.findall(r"quail_chain\((\{.*?\]\})", plan)
    return [[c["template"] for c in json.loads(s)["calls"]] for s in specs]


def test_filter_chain_fuses_and_orders_by_rank(rules):
    off, _ = plans(rules, CHAIN, on=False)
    on, _ = plans(rules, CHAIN)
    assert "quail_chain" not in off and off.count("ai_if(") == 2
    assert "ai_if(" not in on
    # rank = len(template) / (1 - selectivity): the hinted 0.1 predicate first
    assert chain_templates(on) == [["Is {0} about a pet?", "Is {0} a complaint?"]]


def test_relational_conjuncts_below_the_chain(rules):
    on, _ = plans(rules, CHAIN)
    assert line_of(on, r"year#\d+ > 2019") > line_of(on, "quail_chain")


def test_one_chain_per_document_column(rules):
    sql = ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body) AND ai_if('Is {0} a shop?', kind) "
           "AND ai_if('Is {0} long?', body)")
    assert sorted(map(len, chain_templates(plans(rules, sql)[0]))) == [1, 2]


def test_local_sort_under_the_chain(rules):
    off, _ = plans(rules, CHAIN, on=False)
    on, physical = plans(rules, CHAIN)
    assert "Sort" not in off
    assert line_of(on, r"Sort \[body#\d+ ASC NULLS FIRST\], false") == line_of(on, "quail_chain") + 1
    assert re.search(r"Sort \[body#\d+ ASC NULLS FIRST\], false", physical)


def test_local_sort_survives_an_aggregate(rules):
    sql = "SELECT count(*) FROM notes WHERE ai_if('Is {0} rude?', body) AND ai_if('Is {0} long?', body)"
    on, physical = plans(rules, sql)
    assert on.lstrip().startswith("Aggregate") and re.search(r"Sort \[body#\d+ ASC NULLS FIRST\], false", physical)


def test_rules_reach_ctes_and_subqueries(rules):
    cte = ("WITH c AS (SELECT id, body FROM notes WHERE ai_if('Is {0} rude?', body) AND ai_if('Is {0} long?', body)) "
           "SELECT count(*) FROM c")
    sub = ("SELECT tid FROM terms WHERE tid IN (SELECT id FROM notes WHERE ai_if('Is {0} rude?', body) "
           "AND ai_if('Is {0} long?', body))")
    assert chain_templates(plans(rules, cte)[0]) == [["Is {0} rude?", "Is {0} long?"]]  # equal ranks: as written
    assert len(chain_templates(plans(rules, sub)[0])) == 1


def test_ai_join_anchor_by_anchor_with_partners_broadcast(rules):
    off, off_physical = plans(rules, JOIN, on=False)
    on, physical = plans(rules, JOIN)
    assert "CartesianProduct" in off_physical and "quail_join" not in off
    assert "CartesianProduct" not in physical and "BroadcastNestedLoopJoin" in physical
    assert line_of(on, r"Sort \[body#\d+ ASC NULLS FIRST\], false") == line_of(on, "quail_join") + 1
    assert line_of(on, "Join Inner") > line_of(on, "Sort")


def test_anchor_column_is_the_template_document_whichever_side(rules):
    """{0} (term here) stays the DOCUMENT: the pairs are sorted by it, the prompt is unchanged."""
    sql = "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Is {0} in {1}?', t.term, n.body)"
    on, _ = plans(rules, sql)
    assert re.search(r"quail_join\(.*Is \{0\} in \{1\}\?.*, term#\d+, body#\d+\)", on)
    assert re.search(r"Sort \[term#\d+ ASC NULLS FIRST\], false", on)


def test_equality_conjuncts_stay_a_hash_join(rules):
    sql = ("SELECT n.id, t.tid FROM notes n JOIN terms t "
           "ON n.kind = t.kind AND ai_if('Does {0} mention {1}?', n.body, t.term)")
    on, physical = plans(rules, sql)
    assert re.search(r"Join Inner, \(kind#\d+ = kind#\d+\)", on) and "quail_join" in on
    assert re.search(r"(SortMerge|BroadcastHash|ShuffledHash)Join", physical)


def test_rules_off_leave_the_plan_to_spark(rules):
    for sql in (CHAIN, JOIN):
        off, _ = plans(rules, sql, on=False)
        assert "quail_" not in off


MIXED_HINT = ("SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body, "
              "map('selectivity', 0.25, 'anchor', 'n')) AND ai_if('Is {0} about a pet?', body, map('selectivity', 0.1))")


@pytest.mark.parametrize("on", [True, False])
def test_a_map_hint_of_mixed_types_becomes_a_struct_on_every_path(rules, on):
    """Spark gives a map one value type (it would cast 'n' to DOUBLE and fail while folding):
    the analysis rule keeps each literal as written, with the optimizer rules on or off."""
    logical, _ = plans(rules, MIXED_HINT, on=on)
    assert "map(" not in logical
    if on:  # the hints, read from the struct, order the fused chain
        assert chain_templates(logical) == [["Is {0} about a pet?", "Is {0} a complaint?"]]
        assert '"selectivity": 0.25' in logical
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rules.sql(MIXED_HINT).explain(mode="extended")
    analyzed = out.getvalue().split("== Analyzed Logical Plan ==")[1].split("== Optimized Logical Plan ==")[0]
    assert "named_struct(selectivity, 0.25, anchor, n)" in analyzed and "map(" not in analyzed
    rules.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    assert len(rules.sql(MIXED_HINT).collect()) <= 8  # runs (tiny random model: any rows)
