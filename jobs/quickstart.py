"""Quickstart: AI-SQL over Python's own documentation, on local Spark with SmolLM2-135M on the CPU.

    make demo          # or: python jobs/quickstart.py  /  spark-submit jobs/quickstart.py

Tables (jobs/data, see its README): ``topics`` (40 topics of the Python
language reference: topic, title, kind, the first ~300 characters of text) and
``keywords`` (8 terms). For each query the job prints the explain output
(logical plan with estimates, filter order, join anchors, Spark steps), the
matching rows and the report of what the engines on the executors computed.
SmolLM2-135M is a very small model: its answers show the machinery, not
good judgement.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
QUERIES = [
    ("A chain of AI predicates after a relational one (the planner orders them by rank)",
     "SELECT topic, title FROM topics "
     "WHERE kind = 'statement' "
     "AND ai_if('Does {0} describe something that repeats?', text, map('selectivity', 0.8)) "
     "AND ai_if('Is {0} about loops?', text, map('selectivity', 0.3))"),
    ("An AI join: each topic is the anchor (computed once), keywords stream against it",
     "SELECT t.topic, k.term FROM topics t JOIN keywords k "
     "ON ai_if('Is {0} mainly about {1}?', t.text, k.term) "
     "WHERE t.kind IN ('definition', 'literal')"),
    ("Top 5 topics by ai_score",
     "SELECT topic, ai_score('Is {0} about errors or exceptions?', text) AS p "
     "FROM topics ORDER BY p DESC LIMIT 5"),
    ("ai_classify in the BigQuery spelling",
     "SELECT topic, AI.CLASSIFY(text, categories => ['control flow', 'data types', 'functions']) AS area "
     "FROM topics WHERE kind IN ('type', 'literal')"),
]


def spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from pyspark.sql import SparkSession

    from quail_spark.presets import load_preset

    builder = SparkSession.builder
    for key, value in load_preset("spark/local-cpu").items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def register_tables(spark) -> None:
    schema = "id int, topic string, title string, kind string, text string"
    spark.read.json(str(DATA / "python_topics.jsonl"), schema=schema).repartition(2) \
        .createOrReplaceTempView("topics")
    spark.read.json(str(DATA / "keywords.jsonl"), schema="kid int, term string") \
        .createOrReplaceTempView("keywords")


def show(rows, limit: int = 20) -> None:
    if not rows:
        print("(no rows)")
    for r in rows[:limit]:
        print("  " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r))
    if len(rows) > limit:
        print(f"  ... {len(rows) - limit} more")


def main() -> None:
    import quail_spark
    from quail_spark import QuailSession

    t0 = time.time()
    spark = spark_session()
    register_tables(spark)
    qs = QuailSession(spark, model="smollm2-135m", device="cpu")
    for title, sql in QUERIES:
        print(f"\n######## {title}\n{sql}\n")
        q = qs.sql(sql)
        q.explain()
        print("\n-- rows")
        rows = q.collect(summary=False)
        show(rows)
        print("\n-- report")
        print(q.summary())

    print("\n######## The same functions in plain spark.sql (quail_spark.install)\n")
    quail_spark.install(spark, model="smollm2-135m", device="cpu")
    spark.sql("SELECT topic, ai_score('Is {0} about loops?', text) AS p FROM topics "
              "WHERE kind = 'statement' ORDER BY p DESC LIMIT 3").show(truncate=False)
    print(f"quickstart finished in {time.time() - t0:.0f} s")
    spark.stop()


if __name__ == "__main__":
    main()
