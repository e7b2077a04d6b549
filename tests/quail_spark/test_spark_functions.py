"""install(): ai_if / ai_filter / ai_score / ai_classify in plain spark.sql and DataFrame
expressions, checked against prompts scored alone by a driver-side engine."""
from __future__ import annotations

import numpy as np
import pytest
from spark_fixtures import NOTES, UNCERTAIN, bodies, classify_naive, expected_filter, question, same_rows

import quail_spark
from quail_spark.functions import ai_classify, ai_if, ai_score

COMPLAINT = "Is {0} a complaint?"
LONG = "Is {0} longer than five words?"
LABELS = ("shopping", "pets", "sports")


@pytest.fixture(scope="module")
def installed(spark, tables):
    return quail_spark.install(spark, model="smollm2-135m", device="cpu")


@pytest.mark.parametrize("fn", ["ai_if", "ai_filter"])
def test_sql_filter_matches_naive(spark, installed, naive, fn):
    rows = spark.sql(f"SELECT id FROM notes WHERE {fn}('{COMPLAINT}', body)").collect()
    expected, unsure = expected_filter(naive, [COMPLAINT])
    same_rows([r.id for r in rows], expected, unsure)


def test_sql_score_is_sigmoid_of_margin_and_null_for_null(spark, installed, naive):
    rows = spark.sql(f"SELECT id, ai_score('{LONG}', body) AS p FROM notes").collect()
    margins = naive.margins(bodies(), question(LONG))
    got = {r.id: r.p for r in rows}
    for nid, body, _, _ in NOTES:
        if body is None:
            assert got[nid] is None
        else:  # same tokens, same margin up to float rounding
            assert got[nid] == pytest.approx(1 / (1 + np.exp(-margins[body])), abs=1e-3), nid


@pytest.mark.parametrize("template", [None, "Which topic fits {0}?"])
def test_sql_classify_both_signatures(spark, installed, naive, template):
    labels = ", ".join(f"'{x}'" for x in LABELS)
    call = (f"ai_classify(body, array({labels}))" if template is None
            else f"ai_classify('{template}', body, array({labels}))")
    rows = spark.sql(f"SELECT id, body, {call} AS c FROM notes").collect()
    ref = classify_naive(naive, bodies(), LABELS, None if template is None else question(template))
    for r in rows:
        if r.body is None:
            assert r.c is None
        elif ref[r.body][1] >= UNCERTAIN:
            assert r.c == ref[r.body][0], r.id


def test_dataframe_expressions(spark, installed, naive):
    df = spark.table("notes")
    out = (df.filter(ai_if(COMPLAINT, "body"))
           .withColumn("p", ai_score(LONG, "body"))
           .withColumn("c", ai_classify("body", LABELS)).collect())
    expected, unsure = expected_filter(naive, [COMPLAINT])
    same_rows([r.id for r in out], expected, unsure)
    assert all(0 <= r.p <= 1 and r.c in LABELS for r in out)


def test_several_columns_make_one_document(spark, installed, naive):
    """Column 0 is DOCUMENT, column 1 DOCUMENT 2 (the join layout of gpu_worker.ai_calls); a NULL in any
    referenced column gives NULL, so row 7 (NULL body) is dropped."""
    rows = spark.sql("SELECT id FROM notes WHERE ai_if('Does {0} fit the category {1}?', body, kind)").collect()
    m = naive.join_margins(bodies(), [n[3] for n in NOTES], "Does DOCUMENT fit the category DOCUMENT 2?")
    expected = [n[0] for n in NOTES if n[1] is not None and m[(n[1], n[3])] > 0]
    unsure = [n[0] for n in NOTES if n[1] is not None and abs(m[(n[1], n[3])]) < UNCERTAIN]
    same_rows([r.id for r in rows], expected, unsure)


def test_sql_functions_agree_with_quail_session(spark, installed, qs):
    for sql in (f"SELECT id FROM notes WHERE year >= 2020 AND ai_if('{COMPLAINT}', body)",
                f"SELECT id, ai_score('{LONG}', body) AS p FROM notes WHERE kind <> 'code'"):
        plain = sorted(spark.sql(sql).collect())
        ours = sorted(qs.sql(sql).collect(summary=False))
        assert [r.id for r in plain] == [r.id for r in ours], sql
        for a, b in zip(plain, ours):
            if "p" in a.__fields__:
                assert (a.p is None and b.p is None) or a.p == pytest.approx(b.p, abs=1e-3), a.id


@pytest.mark.parametrize("sql, message", [
    ("SELECT ai_if('Is {0} like {1}?', body) FROM notes", "must use placeholders"),
    ("SELECT ai_classify(body, array('only')) FROM notes", "at least 2 labels"),
])
def test_sql_function_errors_name_the_argument(spark, installed, sql, message):
    with pytest.raises(Exception, match=message):
        spark.sql(sql).collect()


@pytest.mark.parametrize("rules", ["true", "false"])
def test_a_non_string_document_fails_analysis_naming_the_argument(spark, installed, rules):
    """Refused when the query is analyzed (no job runs), with the rules on or off and from the DataFrame API."""
    from pyspark.errors import AnalysisException

    refused = [("SELECT id FROM notes WHERE ai_if('Is {0} recent?', year)", "ai_if", 2, "year"),
               ("SELECT ai_score('Is {0} about {1}?', body, year + 1) FROM notes", "ai_score", 3, "year"),
               ("SELECT ai_classify(year, array('old', 'new')) FROM notes", "ai_classify", 1, "year"),
               ("SELECT ai_classify('When is {0}?', year, array('old', 'new'), map('selectivity', 0.5)) FROM notes",
                "ai_classify", 2, "year"),
               ("SELECT id FROM notes n WHERE EXISTS (SELECT 1 FROM notes m WHERE ai_if('Is {0} old?', m.year))",
                "ai_if", 2, "year")]
    spark.conf.set("spark.quail.optimizer.enabled", rules)
    try:
        for sql, fn, arg, col in refused:
            named = rf"{fn}: argument {arg} \(.*\b{col}\b.*\) is INT; .*CAST\(.*\b{col}\b.* AS STRING\)"
            with pytest.raises(AnalysisException, match=named):
                spark.sql(sql)
        with pytest.raises(AnalysisException, match=r"ai_if: argument 2 \(notes\.year\) is INT"):
            spark.table("notes").filter(ai_if("Is {0} recent?", "year"))
        for ok in ("SELECT ai_if('Is {0} recent?', CAST(year AS STRING), map('selectivity', 0.5)) FROM notes",
                   "SELECT ai_classify('When is {0}?', body, array('old', 'new')) FROM notes",
                   "SELECT ai_score('Is {0} red?', NULL) FROM notes"):
            spark.sql(ok).schema  # analyzed, not run
    finally:
        spark.conf.set("spark.quail.optimizer.enabled", "true")


def test_sql_function_prompt_too_long_names_the_row(spark, installed):
    spark.createDataFrame([(1, "fine"), (2, "word " * 9000)], "id int, body string").createOrReplaceTempView("too_long")
    named = r"row \d+ of an Arrow batch of partition \d+ \(the document in argument 2, starting 'word word .*9\d{3} tokens.*8192"
    with pytest.raises(Exception, match=named):
        spark.sql(f"SELECT id FROM too_long WHERE ai_if('{COMPLAINT}', body)").collect()
