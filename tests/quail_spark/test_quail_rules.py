"""The rules of the Spark extension (io.quailspark, quail_spark/java): golden before/after plans per
rule and case (tests/quail_spark/golden/<rule>/<case>.txt, checked by golden.check; rewrite them with
QUAIL_UPDATE_GOLDEN=1), plus what the plans' specs say. No AI function is evaluated here except in
the last test."""
from __future__ import annotations

import json
import re

import pytest

import quail_spark
from golden import check, sections
from quail_spark.explain import plan_text, planned_calls

CHAIN = ("SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body) AND year > 2019 "
         "AND ai_if('Is {0} about a pet?', body, map('selectivity', 0.1))")
JOIN = "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term)"
SHORT_FIRST = "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Is {0} mentioned in {1}?', t.term, n.body)"
MIXED_HINT = ("SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body, "
              "map('selectivity', 0.25, 'anchor', 'n')) AND ai_if('Is {0} about a pet?', body, map('selectivity', 0.1))")
ANCHOR_HINT = ("SELECT n.id, t.tid FROM notes n JOIN terms t "
               "ON ai_if('Is {0} mentioned in {1}?', t.term, n.body, map('anchor', 't'))")
THREE_WAY = ("SELECT n.id, t.tid, c.cid FROM notes n "
             "JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term, map('selectivity', 0.9)) "
             "JOIN cats c ON ai_if('Is {0} about {1}?', n.body, c.cat, map('selectivity', 0.1))")

CASES = [  # (rule, case, query)
    ("filter_chain", "fuse_and_order_by_rank", CHAIN),
    ("filter_chain", "one_chain_per_document",
     "SELECT id FROM notes WHERE ai_if('Is {0} rude?', body) AND ai_if('Is {0} a shop?', kind) "
     "AND ai_if('Is {0} long?', body)"),
    ("filter_chain", "inside_a_cte",
     "WITH c AS (SELECT id, body FROM notes WHERE ai_if('Is {0} rude?', body) AND ai_if('Is {0} long?', body)) "
     "SELECT count(*) FROM c"),
    ("filter_chain", "inside_an_in_subquery",
     "SELECT tid FROM terms WHERE tid IN (SELECT id FROM notes WHERE ai_if('Is {0} rude?', body) "
     "AND ai_if('Is {0} long?', body))"),
    ("filter_chain", "mixed_type_hint", MIXED_HINT),
    ("local_sort", "survives_an_aggregate",
     "SELECT count(*) FROM notes WHERE ai_if('Is {0} rude?', body) AND ai_if('Is {0} long?', body)"),
    ("ai_join", "partners_broadcast", JOIN),
    ("ai_join", "short_side_first", SHORT_FIRST),
    ("ai_join", "anchor_hint", ANCHOR_HINT),
    ("ai_join", "score_above_a_bound",  # the same rewrite; the executor compares the score as written
     "SELECT n.id, t.tid FROM notes n JOIN terms t ON 0.4 <= ai_score('Does {0} mention {1}?', n.body, t.term)"),
    ("ai_join", "score_between_bounds",  # one quail_join checks both comparisons of the one score
     "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_score('Does {0} mention {1}?', n.body, t.term) "
     "BETWEEN 0.3 AND 0.6"),
    ("ai_join", "score_below_a_bound",  # the comparison the other way: its operator rides in the spec
     "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_score('Does {0} mention {1}?', n.body, t.term) < 0.3"),
    ("ai_join", "score_against_a_column",  # quail_join_score: each pair's score, Spark compares it with the column
     "SELECT n.id, t.tid FROM notes n JOIN terms t ON t.tid / 10.0 < ai_score('Does {0} mention {1}?', n.body, t.term)"),
    ("ai_join_order", "selective_join_first", THREE_WAY),
    ("ai_join_order", "score_join_weighed",  # a score comparison is an AI join the order weighs too
     "SELECT n.id, t.tid, c.cid FROM notes n "
     "JOIN terms t ON ai_score('Does {0} mention {1}?', n.body, t.term, map('selectivity', 0.9)) > 0.2 "
     "JOIN cats c ON ai_if('Is {0} about {1}?', n.body, c.cat, map('selectivity', 0.1))"),
    ("ai_join_order", "score_range_one_edge",  # BETWEEN: one edge of the order, one quail_join
     "SELECT n.id, t.tid, c.cid FROM notes n "
     "JOIN terms t ON ai_score('Does {0} mention {1}?', n.body, t.term, map('selectivity', 0.9)) BETWEEN 0.2 AND 0.9 "
     "JOIN cats c ON ai_if('Is {0} about {1}?', n.body, c.cat, map('selectivity', 0.1))"),
    ("ai_join_order", "joins_without_hints",  # the order rides on each call (a tag), no hint is made
     "SELECT n.id, t.tid, c.cid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term) "
     "JOIN cats c ON ai_if('Is {0} a kind of {1}?', t.term, c.cat)"),
    ("ai_join", "equality_stays_a_hash_join",
     "SELECT n.id, t.tid FROM notes n JOIN terms t ON n.kind = t.kind AND ai_if('Does {0} mention {1}?', n.body, t.term)"),
    ("evaluate_once", "filter_on_an_ai_column",  # off: the call twice (in the pushed-down filter and the project)
     "SELECT * FROM (SELECT id, ai_score('Is {0} rude?', body) AS s FROM notes) WHERE s > 0.5 AND id > 1"),
    ("push_below_ai", "a_later_relational_filter",  # id > 1 arrives above the held AI projection and goes below it
     "SELECT * FROM (SELECT * FROM (SELECT id, ai_score('Is {0} rude?', body) AS s FROM notes) WHERE s > 0.5) "
     "WHERE id > 1"),
]
ANALYSIS_CASES = [
    ("hint_struct", "map_of_mixed_types", MIXED_HINT),
    ("anchor_hint", "alias_to_argument_position", ANCHOR_HINT),
    ("anchor_hint", "column_name_to_argument_position",
     "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Is {0} in {1}?', t.term, n.body, map('anchor', 'body'))"),
]

RUNNABLE_CASES = [  # rules that run with the optimizer rules off too (Spark alone refuses the first four)
    ("outer_join", "left_with_equality",
     "SELECT n.id, t.tid FROM notes n LEFT JOIN terms t ON n.kind = t.kind AND ai_if('Does {0} mention {1}?', "
     "n.body, t.term)"),
    ("outer_join", "full_without_equality",
     "SELECT n.id, t.tid FROM notes n FULL JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term)"),
    ("outer_join", "left_on_a_score",  # the scores per partner (quail_match_score), compared as written
     "SELECT n.id, t.tid FROM notes n LEFT JOIN terms t ON ai_score('Does {0} mention {1}?', n.body, t.term) > 0.3"),
    ("outer_join", "left_on_a_template_column",  # each pair's template rides as quail_match's first list
     "SELECT n.id, t.tid FROM notes n LEFT JOIN terms t ON ai_if(concat('Is {0} about ', t.term, '?'), n.body)"),
    ("ai_subquery", "not_exists",
     "SELECT t.tid FROM terms t WHERE NOT EXISTS (SELECT 1 FROM notes n WHERE n.kind = t.kind "
     "AND ai_if('Does {0} mention {1}?', n.body, t.term))"),
    ("ai_subquery", "in_under_or",
     "SELECT t.tid FROM terms t WHERE t.tid < 2 OR t.kind IN (SELECT n.kind FROM notes n "
     "WHERE ai_if('Does {0} mention {1}?', n.body, t.term))"),
    ("ai_subquery", "not_in_over_a_nested_classify",  # the label a column of the subquery's rows, once per row
     "SELECT t.tid, t.kind NOT IN (SELECT n.kind FROM notes n WHERE ai_if('Is {0} related to {1}?', "
     "ai_classify(n.body, array('rude', 'kind')), t.term)) AS e FROM terms t"),
    ("keep_repartition", "ai_filter_over_a_repartition_hint",  # the AI calls run after the shuffle, id > 1 before
     "SELECT id FROM (SELECT /*+ REPARTITION(3) */ * FROM notes) WHERE ai_if('Is {0} rude?', body) AND id > 1"),
]

@pytest.fixture(scope="module")
def rules(spark, tables):
    quail_spark.install(spark, model="tiny-llama-random", device="cpu", kv_pool_tokens=4096)
    from quail_spark.cost import CONF, MEASURED

    spark.conf.set(CONF + "rate", "1e+11")  # the presets, not what this machine and tokenizer measured:
    for k in MEASURED:                       # the golden figures stay put
        spark.conf.unset(CONF + k)
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")


@pytest.mark.parametrize("rule, case, sql", CASES, ids=[f"{r}/{c}" for r, c, _ in CASES])
def test_golden_plans(rules, rule, case, sql):
    check(rules, rule, case, sql)


@pytest.mark.parametrize("rule, case, sql", ANALYSIS_CASES, ids=[f"{r}/{c}" for r, c, _ in ANALYSIS_CASES])
def test_golden_analysis(rules, rule, case, sql):
    check(rules, rule, case, sql, analysis=True)


def specs(spark, sql: str) -> list:
    return planned_calls("== Optimized Logical Plan ==\n" + sections(spark, sql, True)["Optimized Logical Plan"])


def test_chain_order_follows_the_ranks_it_carries(rules):
    (kind, spec), = specs(rules, CHAIN)
    assert kind == "chain" and [c["template"] for c in spec["calls"]] == ["Is {0} about a pet?", "Is {0} a complaint?"]
    ranks = [c["rank"] for c in spec["calls"]]
    assert ranks == sorted(ranks)
    assert [c["selectivity_source"] for c in spec["calls"]] == ["hint", "default"]
    assert spec["calls"][1]["evaluated"] == pytest.approx(spec["calls"][0]["evaluated"] * 0.1)


def test_a_long_question_runs_after_a_short_one_of_equal_selectivity(rules):
    long_q = "Does {0} describe, in any way at all and with any wording whatsoever, a defect of a product?"
    (_, spec), = specs(rules, f"SELECT id FROM notes WHERE ai_if('{long_q}', body) AND ai_if('Is {{0}} rude?', body)")
    assert [c["template"] for c in spec["calls"]] == ["Is {0} rude?", long_q]


@pytest.mark.parametrize("sql", [JOIN, SHORT_FIRST])
def test_join_anchor_is_priced_both_ways(rules, sql):
    (kind, spec), = specs(rules, sql)
    costs = [s["cost_as_anchor"]["seconds"] for s in spec["sides"]]
    chosen = next(s for s in spec["sides"] if s["column"] == spec["anchor"])
    assert kind == "join" and spec["why"] == "cost model" and chosen["cost_as_anchor"]["seconds"] == min(costs)


def test_the_selective_ai_join_runs_first_and_both_orders_are_priced(rules):
    (_, inner), (_, outer) = specs(rules, THREE_WAY)  # evaluation order: the deeper join first
    assert inner["template"] == "Is {0} about {1}?" and outer["template"] == "Does {0} mention {1}?"
    order = inner["join_order"]
    assert order == outer["join_order"] and order["chosen"] == ["n", "c", "t"] and order["written"] == ["n", "t", "c"]
    assert order["seconds"] < order["written_seconds"]


NO_HINTS = ("SELECT n.id, t.tid, c.cid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term) "
            "JOIN cats c ON ai_if('Is {0} a kind of {1}?', t.term, c.cat)")


@pytest.mark.parametrize("sql, chosen", [(THREE_WAY, ["Is {0} about {1}?", "Does {0} mention {1}?"]),
                                         (NO_HINTS, ["Is {0} a kind of {1}?", "Does {0} mention {1}?"])])
def test_the_join_order_is_planner_state_and_planned_again_alike(rules, sql, chosen):
    """The order rides on the calls (tags), not in the user's hint, and a second plan of the same DataFrame (a
    new optimization of its analyzed plan, which shares the calls written without a hint) orders and prices
    it again."""
    df = rules.sql(sql)
    first = planned_calls(plan_text(df))
    again = planned_calls(plan_text(df.select("*")))
    assert [s["template"] for _, s in again] == [s["template"] for _, s in first] == chosen  # not as written
    assert [s["join_order"] for _, s in again] == [s["join_order"] for _, s in first]
    assert [s["pairs"] for _, s in again] == [s["pairs"] for _, s in first]
    assert all(side["rows_source"] == "join order, survivor-thinned" for _, s in again for side in s["sides"])


def test_anchor_hint_forces_the_side(rules):
    (_, spec), = specs(rules, ANCHOR_HINT)
    assert spec["why"] == "hint" and spec["anchor"] == "t.term" and spec["anchor_arg"] == 0


def test_an_anchor_hint_naming_no_column_fails_analysis(rules):
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match=r"anchor hint 'x' names none of its columns \(t.term, n.body\)"):
        rules.sql("SELECT n.id FROM notes n JOIN terms t ON ai_if('Is {0} in {1}?', t.term, n.body, "
                  "map('anchor', 'x'))").collect()


@pytest.mark.parametrize("on", [True, False])
def test_a_mixed_type_hint_runs_on_every_path(rules, on):
    rules.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    assert len(rules.sql(MIXED_HINT).collect()) <= 8  # runs (tiny random model: any rows)


# QuailFuseCalls: name -> (query, the functions each quail_eval evaluates, one list per document)
FUSED = {
    "select": ("SELECT id, ai_if('Is {0} rude?', body) AS a, ai_score('Is {0} long?', body) AS s, "
               "ai_classify(body, array('x', 'y')) AS c FROM notes", [["ai_if", "ai_score", "ai_classify"]]),
    "same_call_twice": ("SELECT ai_score('Is {0} long?', body) AS a, ai_score('Is {0} long?', body) * 2 AS b "
                        "FROM notes", [["ai_score"]]),
    "case": ("SELECT CASE WHEN ai_if('Is {0} rude?', body) THEN 1 ELSE 0 END AS k FROM notes", [["ai_if"]]),
    "or": ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body) OR ai_if('Is {0} long?', body)",
           [["ai_if", "ai_if"]]),
    "score_above": ("SELECT id FROM notes WHERE ai_score('Is {0} rude?', body) > 0.5 AND year > 2019",
                    [["ai_score"]]),
    "count_if": ("SELECT count_if(ai_if('Is {0} rude?', body)) AS n, avg(ai_score('Is {0} long?', body)) AS m "
                 "FROM notes", [["ai_if", "ai_score"]]),
    "top_k": ("SELECT id FROM notes ORDER BY ai_score('Is {0} long?', body) DESC LIMIT 3", [["ai_score"]]),
    "two_column_where": ("SELECT id FROM notes WHERE ai_if('Does {0} fit {1}?', body, kind)", [["ai_if"]]),
    "two_documents": ("SELECT ai_if('Is {0} rude?', body) AS a, ai_if('Is {0} a shop?', kind) AS b FROM notes",
                      [["ai_if"], ["ai_if"]]),
}


def fused_calls(plan: str) -> list:
    """The functions of each quail_eval call of a plan, in plan order."""
    dec = json.JSONDecoder()
    return [[c["fn"] for c in dec.raw_decode(plan, m.end())[0]["calls"]] for m in re.finditer(r"quail_eval\(", plan)]


@pytest.mark.parametrize("name", FUSED)
def test_golden_plans_of_fused_calls(rules, name):
    check(rules, "fuse_calls", name, FUSED[name][0])


@pytest.mark.parametrize("name", FUSED)
def test_fused_calls_one_evaluation_per_document(rules, name):
    """Every AI call of the node in one quail_eval per document, none left outside (the plans
    themselves, the local sort under each evaluation included, are golden/fuse_calls/)."""
    sql, groups = FUSED[name]
    on = sections(rules, sql, True)["Optimized Logical Plan"]
    assert sorted(fused_calls(on)) == sorted(groups)
    assert not re.search(r"\bai_(if|score|classify)\(", on), on


@pytest.mark.parametrize("rule, case, sql", RUNNABLE_CASES, ids=[f"{r}/{c}" for r, c, _ in RUNNABLE_CASES])
def test_golden_runnable(rules, rule, case, sql):
    check(rules, rule, case, sql, runnable=True)


def test_fused_calls_carry_the_cost_models_estimate_and_explain_prints_it(rules):
    """The first call of a quail_eval computes the document, later ones only their question (its
    KV is kept); the spec carries those numbers and explain prints them, not numbers of its own."""
    from quail_spark.explain import explain_plan, plan_text

    sql = FUSED["select"][0]
    (kind, spec), = specs(rules, sql)
    # the notes' lengths from a sample of the table (a DataFrame of Python rows: no statistics)
    assert kind == "eval" and spec["doc"].endswith("body") and spec["tokens_source"].startswith("sample of 8 rows")
    first, *later = [c["seconds_per_row"] for c in spec["calls"]]
    assert all(0 < s < first / 2 for s in later)  # the document (~15 tokens) is computed by the first call only
    assert spec["cost"]["seconds"] == pytest.approx(spec["rows"] * (first + sum(later)), rel=1e-4)
    text = explain_plan(plan_text(rules.sql(sql)))
    assert "== AI calls evaluated together" in text
    assert f"{spec['cost']['fresh']:,.0f} fresh tokens" in text


@pytest.mark.parametrize("on", [True, False])
def test_an_ai_filter_written_over_a_repartition_runs_after_the_shuffle(rules, on):
    """df.repartition(n).where(ai_if(...)): the AI calls are evaluated in the n tasks after the
    exchange (Spark would push a deterministic filter below it, onto the input's partitions); the
    relational conjunct still goes below. A coalesce (no shuffle) is left to Spark."""
    def physical(df):
        rules.conf.set("spark.quail.optimizer.enabled", str(on).lower())
        try:
            return df._jdf.queryExecution().executedPlan().toString()
        finally:
            rules.conf.set("spark.quail.optimizer.enabled", "true")

    plan = physical(rules.table("notes").repartition(3).where("ai_if('Is {0} rude?', body) AND id > 1"))
    ai, exchange = plan.index("ArrowEvalPython"), plan.index("Exchange RoundRobinPartitioning(3)")
    assert ai < exchange, plan  # printed above: evaluated after the shuffle
    assert re.search(r"Filter .*\(id#\d+ > 1\)", plan[exchange:]), plan  # the relational part before it
    hashed = physical(rules.table("notes").repartition(2, "kind").where("ai_if('Is {0} rude?', body)"))
    assert hashed.index("ArrowEvalPython") < hashed.index("Exchange hashpartitioning"), hashed
    plain = rules.range(6).selectExpr("CAST(id AS INT) AS id", "concat('note ', id) AS body")  # no shuffle under it
    coalesced = physical(plain.coalesce(1).where("ai_if('Is {0} rude?', body)"))
    assert "Exchange" not in coalesced and "ArrowEvalPython" in coalesced, coalesced


def test_a_filter_on_an_ai_column_reads_its_one_evaluation(rules):
    """Through a second projection, a repartition, a second where() or a rename, the AI column is evaluated
    once (Spark alone would write it out into the filter and evaluate it again below) and the
    relational conjunct runs before it."""
    from pyspark.sql import functions as F

    scored = rules.table("notes").withColumn("s", quail_spark.ai_score("Is {0} rude?", "body"))
    for df in (scored.withColumn("t", F.lit(1)).where("s > 0.5 AND id > 1"),
               scored.repartition(3).where("s > 0.5 AND id > 1"),
               scored.where("s > 0.5").where("id > 1"),
               scored.selectExpr("id", "s AS t").where("t > 0.5 AND id > 1")):
        plan = df._jdf.queryExecution().optimizedPlan().toString()
        assert plan.count("ArrowEvalPython") == 1, plan
        assert re.search(r"Filter .*\(id#\d+ > 1\)", plan[plan.index("ArrowEvalPython"):]), plan


def test_a_join_condition_on_an_ai_column_reads_its_one_evaluation(rules):
    sql = ("SELECT a.id, a.s, t.tid FROM (SELECT id, kind, ai_score('Is {0} rude?', body) AS s FROM notes) a "
           "JOIN terms t ON a.kind = t.kind AND a.s > 0.5")
    plan = sections(rules, sql, True)["Optimized Logical Plan"]
    assert plan.count("ArrowEvalPython") == 1, plan

