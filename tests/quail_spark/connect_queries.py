"""Run the same queries under Spark Connect (pyspark's bundled local server) and print their rows.

Run in a subprocess by the ``connect_results`` fixture (conftest.py; a classic and a Connect session
do not share a process easily), for test_connect.py and test_arrow_mapper.py at once: one Connect
server for both. Also runnable alone: ``python tests/quail_spark/connect_queries.py``.
Prints one JSON line: {"connect": this file's :func:`run`, "mapper": mapper_queries.run}; :func:`run`
gives {"rows": {name: [[...], ...]} (the decode calls among the queries), "report": {...}, "explain": bool,
"rewritten": bool (the AI join of the plan is the rules' quail_join)}.
"""
from __future__ import annotations

import json
import os
import sys

QUERIES = {
    "filter": "SELECT id FROM c_notes WHERE ai_if('Is {0} a complaint?', body)",
    "group_by": "SELECT kind, count(*) AS n FROM c_notes WHERE ai_if('Is {0} longer than five words?', body) "
                "GROUP BY kind",
    "null_key_join": "SELECT a.id, k.kid FROM c_a a JOIN c_k k ON ai_if('Does {0} mention {1}?', a.body, k.term)",
    "decode": "SELECT id, e.item, e.n, g FROM (SELECT id, ai_extract(body, 'item STRING, n INT', map('max_tokens', 6)) "
              "AS e, ai_generate('Name the topic of {0}.', body, map('max_tokens', 4)) AS g FROM c_notes)",
}
NOTES = [(1, "The parcel arrived broken and nobody at the shop answers my emails.", "shop"),
         (2, "We took a lovely long walk in the park with our old dog.", "life"),
         (3, None, "life"),
         (4, "I love this phone, the battery lasts for days.", "shop")]
A_ROWS = [(1, "My parcel was late"), (2, None), (3, ""), (1, "My parcel was late")]
K_ROWS = [(10, "parcel"), (11, None), (12, ""), (10, "parcel")]


def register(spark) -> None:
    spark.createDataFrame(NOTES, "id int, body string, kind string").createOrReplaceTempView("c_notes")
    spark.createDataFrame(A_ROWS, "id int, body string").createOrReplaceTempView("c_a")
    spark.createDataFrame(K_ROWS, "kid int, term string").createOrReplaceTempView("c_k")


def run(spark) -> dict:
    """Rows of every query through spark.sql, and a QuailSession query's report and explain."""
    from quail_spark import QuailSession

    qs = QuailSession(spark, model="smollm2-135m", device="cpu")
    register(spark)
    rows = {name: sorted([list(r) for r in spark.sql(sql).collect()], key=repr) for name, sql in QUERIES.items()}
    q = qs.sql("SELECT id FROM c_notes WHERE AI.IF(PROMPT('Is {0} a complaint?', body))")
    rows["quail_session"] = sorted([list(r) for r in q.collect()], key=repr)
    from quail_spark.explain import plan_text

    rewritten = "quail_join" in plan_text(spark.sql(QUERIES["null_key_join"]))
    return {"rows": rows, "report": q.report, "explain": "== SoL estimate ==" in q.explain(print_it=False),
            "rewritten": rewritten}


def connect_session():
    """A Spark Connect session on pyspark's bundled local server, set up like the tests' classic one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import quail_spark
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.remote("local[2]")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "4"))
    for k, v in quail_spark.spark_conf().items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    return spark


def run_all(spark) -> dict:
    """The rows of this file's queries and of mapper_queries.py's, in one session."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import mapper_queries

    return {"connect": run(spark), "mapper": mapper_queries.run(spark)}


def main(run=run_all) -> None:
    """Print ``run(spark)`` of a Connect session as one JSON line."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    spark = connect_session()
    try:
        print(json.dumps(run(spark)))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
