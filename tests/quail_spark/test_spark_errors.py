"""Errors: a bad query fails in qs.sql, before any Spark job (Spark's analysis errors, or the
dialect front end's); run-time errors name the row and the column at fault."""
from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException

from quail_spark import QuailSession
from quail_spark.errors import HintError, TemplateError


@pytest.fixture()
def no_jobs(spark):
    """Assert the test body started no Spark job."""
    sc = spark.sparkContext
    sc.setJobGroup("quail-no-jobs", "errors before any job")
    yield
    jobs = sc.statusTracker().getJobIdsForGroup("quail-no-jobs")
    sc.setLocalProperty("spark.jobGroup.id", None)
    assert jobs == [], f"expected no Spark job, {len(jobs)} ran"


@pytest.mark.parametrize("sql, error, names", [
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', bodyy)", AnalysisException, "bodyy"),
    ("SELECT id FROM nots WHERE ai_if('Is {0} rude?', body)", AnalysisException, "nots"),
    ("SELECT id FROM notes WHERE ai_if('Is {0} like {1}?', body)", TemplateError, "{1}"),
    ("SELECT id FROM notes WHERE ai_if('Is it rude?', body)", TemplateError, "placeholder"),
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body, map('speed', 2))", HintError, "speed"),
])
def test_errors_before_any_job(qs, no_jobs, sql, error, names):
    with pytest.raises(error, match=names.replace("{", r"\{").replace("}", r"\}")):
        qs.sql(sql)


def test_prompt_too_long_names_the_row(spark):
    qs = QuailSession(spark, model="smollm2-135m", device="cpu")  # the defaults, whatever ran before
    long_text = "word " * 9000  # over the model's 8,192-token context
    spark.createDataFrame([(1, "A short note."), (2, long_text)], "id int, body string") \
        .createOrReplaceTempView("long_notes")
    q = qs.sql("SELECT id FROM long_notes WHERE ai_if('Is {0} a complaint?', body)")
    with pytest.raises(Exception) as info:
        q.collect()
    text = str(info.value)
    assert "row " in text and "9051 tokens" in text and "on_overflow='truncate'" in text


def test_bad_engine_settings(spark):
    with pytest.raises(TypeError, match="unknown engine setting"):
        QuailSession(spark, token_budjet=1024)


@pytest.mark.parametrize("sql, words", [
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body, map('selectivity', 1.5))",
     ["ai_if", "'selectivity'", "[0, 1]", "1.5"]),
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body, map('selectivty', 0.3))",
     ["ai_if", "'selectivty'", "unknown hint"]),
    ("SELECT id FROM notes WHERE ai_score('Is {0} rude?', body, map('tokens', 0)) > 0.5",
     ["ai_score", "'tokens'", "positive"]),
    ("SELECT id, ai_classify(body, array('pets', NULL)) FROM notes", ["ai_classify", "label 2", "NULL"]),
    ("SELECT id, ai_classify(body, array('pets')) FROM notes", ["ai_classify", "at least 2 labels"]),
    # the arguments and the template's placeholders, checked as the renderer checks them
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?')", ["ai_if", "at least one column argument", "1 argument"]),
    ("SELECT id FROM notes WHERE ai_if('Is {0} like {3}?', body)", ["ai_if", "'Is {0} like {3}?'", "found [0, 3]"]),
    ("SELECT id, ai_score('Is it rude?', body) FROM notes", ["ai_score", "'Is it rude?'", "found none"]),
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', named_struct('text', body))",
     ["ai_if", "at least one column argument", "the last one, a map or struct, is the hint"]),
])
@pytest.mark.parametrize("rules", ["true", "false"])
def test_spark_sql_refuses_bad_hints_and_labels_at_analysis(spark, qs, no_jobs, sql, words, rules):
    """spark.sql, with the optimizer rules on or off, refuses what QuailSession's front end refuses,
    by name and before any job (the extension's check rule)."""
    spark.conf.set("spark.quail.optimizer.enabled", rules)
    try:
        with pytest.raises(AnalysisException) as info:
            spark.sql(sql).collect()
    finally:
        spark.conf.set("spark.quail.optimizer.enabled", "true")
    assert all(w in str(info.value) for w in words), str(info.value)


def test_spark_sql_accepts_tokens_hints(spark, qs):
    rows = spark.sql("SELECT count(*) FROM notes WHERE body IS NULL AND "
                     "ai_if('Is {0} rude?', body, map('tokens', 300, 'selectivity', '0.3'))").collect()
    assert rows[0][0] == 0
