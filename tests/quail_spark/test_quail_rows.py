"""Identical rows with the optimizer rules on and off: the rules change the order, the grouping and the
short-circuit of AI evaluations, never a prompt or an answer. The queries below on a seeded random model
(answers of both signs, where SmolLM2 says "no" to nearly everything and so tells the paths apart less);
the NULL-key join, the DataFrame API, ordered rows and QuailSession on SmolLM2's real answers."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

import quail_spark
from gpu_worker.ai_calls import Call, evaluate

QUERIES = {
    "filter": "SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body)",
    "chain_badly_ordered": (
        "SELECT id FROM notes WHERE ai_if('Is {0} about shopping?', body, map('selectivity', 0.9)) "
        "AND ai_filter('Does {0} mention an animal?', body) "
        "AND ai_if('Is {0} a complaint?', body, named_struct('selectivity', 0.1, 'anchor', 'n'))"),
    "chain_group_by": (
        "SELECT kind, count(*) AS n FROM notes WHERE year > 2018 AND ai_if('Is {0} a complaint?', body) "
        "AND ai_if('Is {0} written in English?', body) GROUP BY kind"),
    "or_stays_unfused": "SELECT id FROM notes WHERE year < 2020 OR ai_if('Is {0} about pets?', body)",
    "join": "SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term)",
    "join_partner_first": (
        "SELECT n.id, t.tid FROM terms t JOIN notes n "
        "ON ai_if('Does {0} mention {1}?', n.body, t.term, map('selectivity', '0.2', 'anchor', 'n'))"),
    "join_with_equality": (
        "SELECT n.id, t.tid FROM notes n JOIN terms t "
        "ON n.kind = t.kind AND ai_if('Does {0} mention {1}?', n.body, t.term)"),
    "score_with_hint": "SELECT id, round(ai_score('Is {0} a complaint?', body, map('selectivity', 0.3)), 4) FROM notes",
    "classify_with_hint": (
        "SELECT id, ai_classify(body, array('shopping', 'pets', 'sports'), map('selectivity', 0.5)) FROM notes"),
    "cte_chain": (
        "WITH c AS (SELECT id, body FROM notes WHERE ai_if('Is {0} a complaint?', body) "
        "AND ai_if('Is {0} about money?', body)) SELECT count(*) FROM c"),
    # a hint that is not literals tells the plan nothing: the calls run as written
    "hint_from_a_column": "SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body, map('selectivity', year / 4000))",
    "select_hint_from_a_column": (
        "SELECT id, round(ai_score('Is {0} a complaint?', body, map('selectivity', year / 4000)), 4) FROM notes"),
    # the anchor hint may name the outer query's side of a correlated subquery
    "exists_anchor_outer": (
        "SELECT t.tid FROM terms t WHERE EXISTS (SELECT 1 FROM notes n "
        "WHERE ai_if('Does {0} mention {1}?', n.body, t.term, map('anchor', 't')))"),
}
MENTION = "Does {0} mention {1}?"


@pytest.fixture(scope="module")
def random_model(spark, tables):
    """tiny-llama-random for the queries (before any SmolLM2 test of this file: `smol` installs SmolLM2 again)."""
    quail_spark.install(spark, model="tiny-llama-random", device="cpu", seed=3)
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")
    quail_spark.install(spark, model="smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def smol(spark, tables):
    quail_spark.install(spark, model="smollm2-135m", device="cpu", kv_pool_tokens=8192)
    spark.createDataFrame([(1, "My parcel was late"), (2, None), (3, ""), (1, "My parcel was late")],
                          "id int, body string").localCheckpoint().createOrReplaceTempView("a")
    spark.createDataFrame([(10, "parcel"), (11, None), (12, ""), (10, "parcel")],
                          "kid int, term string").localCheckpoint().createOrReplaceTempView("k")
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")


def collect(spark, query, on: bool) -> list:
    spark.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    df = spark.sql(query) if isinstance(query, str) else query()
    return sorted(tuple(r) for r in df.collect())


@pytest.mark.parametrize("name", list(QUERIES))
def test_same_rows_rules_on_and_off(random_model, name):
    assert collect(random_model, QUERIES[name], True) == collect(random_model, QUERIES[name], False)


def test_null_and_blank_key_join(smol, naive):
    """Only pairs of non-NULL, non-blank values; duplicates kept; the same on both paths."""
    yes = evaluate(naive.eng, Call("if", MENTION, 2), [["My parcel was late"], ["parcel"]])[0]
    expected = [(1, 10)] * 4 if yes else []
    query = f"SELECT a.id, k.kid FROM a JOIN k ON ai_if('{MENTION}', a.body, k.term)"
    assert collect(smol, query, True) == expected
    assert collect(smol, query, False) == expected


def test_dataframe_api_same_rows_and_rewritten(smol):
    notes = smol.table("notes")

    def chain():
        return notes.filter(quail_spark.ai_if("Is {0} about shopping?", "body", hint={"selectivity": 0.9})
                            & (F.col("year") > 2018)
                            & quail_spark.ai_if("Is {0} a complaint?", "body", hint={"selectivity": 0.1})).select("id")

    assert collect(smol, chain, True) == collect(smol, chain, False)
    smol.conf.set("spark.quail.optimizer.enabled", "true")
    assert "quail_chain" in chain()._jdf.queryExecution().optimizedPlan().toString()


def test_rows_in_an_order_the_query_asked_for_keep_it(smol):
    """An AI call over ORDER BY ... LIMIT (or over ordered rows): no partition-local sort on the document
    goes between, so the LIMIT keeps the rows the ORDER BY chose and the rows keep its order (the bodies
    here sort opposite to the ids, as a sort on the document would put them)."""
    words = ["zebra", "yak", "wolf", "toad", "mole", "ant"]
    smol.createDataFrame([(i, f"The {w} ate my parcel") for i, w in enumerate(words, 1)],
                         "id int, body string").createOrReplaceTempView("ordered_notes")
    score = "round(ai_score('Is {0} a complaint?', body), 4)"
    queries = {
        "limit": f"SELECT id, {score} FROM (SELECT * FROM ordered_notes ORDER BY id LIMIT 4)",
        "limit_offset": f"SELECT id, {score} FROM (SELECT * FROM ordered_notes ORDER BY id LIMIT 3 OFFSET 1)",
        "ordered": f"SELECT id, {score} FROM (SELECT * FROM ordered_notes ORDER BY id)",
        "filter_limit": f"SELECT id FROM (SELECT * FROM ordered_notes ORDER BY id) WHERE {score} >= 0 LIMIT 3",
    }
    want_ids = {"limit": [1, 2, 3, 4], "limit_offset": [2, 3, 4], "ordered": [1, 2, 3, 4, 5, 6],
                "filter_limit": [1, 2, 3]}
    frame = lambda: (smol.table("ordered_notes").orderBy("id").limit(4)  # noqa: E731
                     .withColumn("s", F.round(quail_spark.ai_score("Is {0} a complaint?", "body"), 4)))
    for name, q in [*queries.items(), ("dataframe", frame)]:
        got = {}
        for on in (True, False):
            smol.conf.set("spark.quail.optimizer.enabled", str(on).lower())
            got[on] = [tuple(r) for r in (smol.sql(q) if isinstance(q, str) else q()).collect()]
        assert got[True] == got[False], name
        assert [r[0] for r in got[True]] == want_ids.get(name, [1, 2, 3, 4]), name


def test_quail_session_runs_spark_calls_whose_labels_or_hint_come_from_columns(smol):
    """QuailSession hands Spark-spelled SQL to spark.sql: labels or a hint read from columns are Spark's to
    analyse and the function's to read per row, as with spark.sql, not refused as non-literal."""
    qs = quail_spark.QuailSession(smol, model="smollm2-135m", device="cpu", kv_pool_tokens=8192)
    for q in ("SELECT id, ai_classify(body, array(kind, 'other')) FROM notes",
              "SELECT id, ai_if('Is {0} a complaint?', body, named_struct('selectivity', year / 4000)) FROM notes"):
        assert sorted(tuple(r) for r in qs.sql(q).collect(progress=False)) == collect(smol, q, True), q
