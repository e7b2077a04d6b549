"""Identical rows with the optimizer rules on and off (SmolLM2, real answers): the rules change
the order, the grouping and the short-circuit of AI evaluations, never a prompt or an answer."""
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
}
MENTION = "Does {0} mention {1}?"


@pytest.fixture(scope="module")
def smol(spark, tables):
    quail_spark.install(spark, model="smollm2-135m", device="cpu", kv_pool_tokens=8192)
    spark.createDataFrame([(1, "My parcel was late"), (2, None), (3, ""), (1, "My parcel was late")],
                          "id int, body string").createOrReplaceTempView("a")
    spark.createDataFrame([(10, "parcel"), (11, None), (12, ""), (10, "parcel")],
                          "kid int, term string").createOrReplaceTempView("k")
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")


def collect(spark, query, on: bool) -> list:
    spark.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    df = spark.sql(query) if isinstance(query, str) else query()
    return sorted(tuple(r) for r in df.collect())


@pytest.mark.parametrize("name", list(QUERIES))
def test_same_rows_rules_on_and_off(smol, name):
    assert collect(smol, QUERIES[name], True) == collect(smol, QUERIES[name], False)


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
