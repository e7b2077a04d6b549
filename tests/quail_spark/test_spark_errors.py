"""Errors: planning errors are raised before any Spark job; run-time errors name the row,
the column or the setting at fault."""
from __future__ import annotations

import pytest

from quail_spark import QuailSession
from quail_spark.errors import DocumentTypeError, TemplateError, UnknownColumn, UnsupportedSQL


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
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', bodyy)", UnknownColumn, "bodyy"),
    ("SELECT id FROM notes WHERE ai_if('Is {0} recent?', year)", DocumentTypeError, "year"),
    ("SELECT id FROM notes WHERE ai_if('Is {0} like {1}?', body)", TemplateError, "{1}"),
    ("SELECT id FROM notes WHERE ai_if('Is it rude?', body)", TemplateError, "placeholder"),
    ("SELECT kind FROM notes WHERE ai_if('Is {0} rude?', body) GROUP BY kind", UnsupportedSQL, "GROUP BY"),
    ("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body) OR year > 2020", UnsupportedSQL, "OR"),
    ("SELECT n.id FROM notes n LEFT JOIN terms t ON ai_if('Is {0} about {1}?', n.body, t.term)",
     UnsupportedSQL, "LEFT JOIN"),
])
def test_planning_errors_before_any_job(qs, no_jobs, sql, error, names):
    with pytest.raises(error, match=names.replace("{", r"\{").replace("}", r"\}")):
        qs.sql(sql)


def test_prompt_too_long_names_the_row_and_column(spark, qs):
    long_text = "word " * 9000  # over the model's 8,192-token context
    spark.createDataFrame([(1, "A short note."), (2, long_text)], "id int, body string") \
        .createOrReplaceTempView("long_notes")
    q = qs.sql("SELECT id FROM long_notes WHERE ai_if('Is {0} a complaint?', body)")
    with pytest.raises(Exception) as info:
        q.collect(summary=False)
    text = str(info.value)
    assert "document column 'body'" in text and "row " in text and "partition" in text
    assert "'word word" in text and "on_overflow='truncate'" in text


def test_truncate_overflow_runs(spark):
    spark.createDataFrame([(1, "word " * 9000)], "id int, body string").createOrReplaceTempView("long_one")
    qs = QuailSession(spark, on_overflow="truncate", max_prompt_tokens=64)
    assert len(qs.sql("SELECT id, ai_score('Is {0} long?', body) AS p FROM long_one")
               .collect(summary=False)) == 1


def test_partner_side_limit_names_the_setting(spark, tables):
    qs = QuailSession(spark, settings={"quail.join.maxPartnerRows": 3})
    q = qs.sql("SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term)")
    assert "at most 3 rows" in q.explain(print_it=False)
    with pytest.raises(Exception, match="quail.join.maxPartnerRows"):
        q.collect(summary=False)


@pytest.mark.parametrize("kwargs, message", [
    ({"settings": {"quail.join.maxPartnerRows": "many"}}, "expected a positive integer"),
    ({"settings": {"quail.unknown": 1}}, "unknown setting"),
    ({"token_budjet": 1024}, "unknown engine setting"),
])
def test_bad_settings(spark, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        QuailSession(spark, **kwargs)
