"""QuailSession on local[2]: a front end over spark.sql. Its rows match a naive evaluation,
its DataFrame helpers give the rows of the SQL they stand for, explain() shows Spark's
optimized plan with our estimates and runs no job, and the report is the metrics difference."""
from __future__ import annotations

from collections import Counter

import pytest
from spark_fixtures import NOTES, expected_filter, same_rows

LONG = "Is {0} longer than five words?"      # the model answers yes for most notes
COMPLAINT = "Is {0} a complaint?"            # ... no for most
ANIMAL = "Is {0} about an animal?"           # ... no for most
LABELS = ("shopping", "pets", "sports")


def ids(rows, key="id"):
    return [r[key] for r in rows]


def test_filter_matches_naive(qs, naive):
    rows = qs.sql(f"SELECT id FROM notes WHERE ai_if('{LONG}', body)").collect()
    same_rows(ids(rows), *expected_filter(naive, [LONG]))


def test_any_spark_sql_runs(qs):
    rows = qs.sql(f"""WITH shop AS (SELECT id, body, kind FROM notes WHERE kind = 'shop')
                      SELECT kind, count(*) AS n FROM shop WHERE ai_if('{LONG}', body) OR id > 100
                      GROUP BY kind HAVING count(*) > 0""").collect()
    assert {r.kind for r in rows} <= {"shop"}


def test_dataframe_helpers_give_the_rows_of_their_sql(spark, qs):
    notes = spark.table("notes").where("year >= 2021")
    sql = f"SELECT * FROM notes WHERE year >= 2021 AND ai_if('{LONG}', body)"
    assert Counter(qs.ai_filter(notes, LONG, "body").collect()) == Counter(spark.sql(sql).collect())
    scored = qs.ai_score(notes, COMPLAINT, "body", alias="p").to_df()
    assert scored.columns == ["id", "body", "year", "kind", "p"]
    labelled = qs.ai_classify(notes, "body", LABELS).collect()
    assert {r.label for r in labelled} <= set(LABELS) | {None}
    q = qs.ai_join(notes.select("id", "body"), spark.table("terms").select("tid", "term"),
                   "Does {0} mention {1}?", "body", "term")
    pairs = Counter((r.id, r.tid) for r in q.collect())
    join_sql = ("SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term) "
                "WHERE n.year >= 2021")
    assert pairs == Counter((r.id, r.tid) for r in spark.sql(join_sql).collect())


def test_dataframe_helpers_build_expressions_not_views(spark, qs):
    before = {t.name for t in spark.catalog.listTables()}
    qs.ai_filter(spark.table("notes"), LONG, "body", selectivity=0.9)
    assert {t.name for t in spark.catalog.listTables()} == before


@pytest.fixture()
def cold_view(spark, tmp_path):
    """A Parquet-backed view no query has read yet (its schema read happens here)."""
    spark.createDataFrame(NOTES, "id int, body string, year int, kind string").write.parquet(str(tmp_path / "n"))
    spark.read.parquet(str(tmp_path / "n")).createOrReplaceTempView("cold_notes")
    return "cold_notes"


def test_sql_and_explain_run_no_job_and_report_after_collect(spark, qs, cold_view, capsys):
    sc = spark.sparkContext
    sc.setJobGroup("quail-lazy", "laziness check")
    # the planner's bounded sample of a source without statistics is a job at planning time
    # (docs/estimates.md); with it off, sql and explain run none
    spark.conf.set("spark.quail.sample.rows", "0")
    try:
        q = qs.sql(f"SELECT n.id, t.tid FROM {cold_view} n JOIN terms t ON ai_if('Does {{0}} mention {{1}}?', "
                   f"n.body, t.term) WHERE n.year >= 2021 AND AI.IF(PROMPT('{ANIMAL}', n.body)) "
                   f"AND ai_if('{LONG}', n.body, map('selectivity', 0.9))")
        df = q.to_df()
        text = q.explain()
        assert sc.statusTracker().getJobIdsForGroup("quail-lazy") == []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        spark.conf.unset("spark.quail.sample.rows")
    out = capsys.readouterr().out
    assert "== Optimized Logical Plan ==" in out and "== Physical Plan ==" in out
    assert "== AI filter order" in text and "== AI join anchors" in text and "== SoL estimate ==" in text
    order = text.split("== AI filter order")[1].split("==")[1]
    assert order.index(ANIMAL) < order.index(LONG)  # selectivity 0.5 (default) before 0.9 (hint)
    assert df.columns == ["id", "tid"]
    assert q.report == {}
    q.collect()
    assert q.report["requested_tokens"] >= q.report["fresh_tokens"] >= 0
    assert q.report["wall_s"] > 0
    assert "quail report:" in q.summary()


def test_report_counts_this_query_only(spark, qs):
    import quail_spark

    q = qs.sql(f"SELECT id, ai_score('{COMPLAINT}', body) AS p FROM notes")
    q.collect()
    first = q.report
    assert first["requested_tokens"] > 0
    q.collect()  # the same query again: the report is this run's, not the session's total
    second = q.report
    assert second["requested_tokens"] <= first["requested_tokens"]
    total = quail_spark.metrics(spark)
    assert total["requested_tokens"] >= first["requested_tokens"] + second["requested_tokens"]
