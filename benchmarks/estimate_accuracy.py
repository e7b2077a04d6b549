"""How close explain's estimates come to the run, in a fresh session without ANALYZE (SmolLM2-135M on the
CPU): the quickstart's four queries (jobs/quickstart.py, 40 topics) and the quail side of the three
Spark benchmarks (spark_chain / spark_join / spark_select_vs_predict_batch.py: 64 documentation
paragraphs under a chain of three ai_if, joined with 20 topic titles, under three calls in a SELECT).

    PYTHONPATH=. python benchmarks/estimate_accuracy.py [--no-benchmarks]

For each query: the estimate (``q.estimate()``: requested and fresh tokens, seconds) beside the
run's report (requested and fresh tokens, the wall of the action); the estimate's seconds are the
wall (each operator's engine seconds over the tasks that run it at once), ``engine_seconds`` one
engine's serial seconds. The engines load (and measure
their rates, gpu_worker/rates.py) during a warm-up query over other texts first, then the session is installed
again so the planner reads the measured rate. Writes
benchmarks/results/estimate_accuracy_<commit>.json and prints the table.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def benchmark_queries(spark, docs: int = 64, topics: int = 20) -> list:
    """(title, SQL) of the Spark benchmarks' quail queries at their default sizes, their tables registered
    (the paragraphs tagged as a timed run of theirs is: no prompt in any cache)."""
    import spark_harness as h
    from spark_chain_vs_predict_batch import QUESTIONS as CHAIN
    from spark_join_vs_predict_batch import QUESTION as JOIN
    from spark_join_vs_predict_batch import titles
    from spark_select_vs_predict_batch import QUESTIONS as SELECT

    for name in ("chain", "join", "select"):  # each query its own tagged copy: no document in any cache
        texts = h.tagged(h.paragraphs(docs), name)
        spark.createDataFrame(list(enumerate(texts)), "id int, body string").repartition(2, "id") \
            .createOrReplaceTempView(f"docs_{name}")
    spark.createDataFrame(list(enumerate(titles(topics))), "tid int, title string").createOrReplaceTempView("titles")
    chain = " AND ".join(f"ai_if('{q}', body, map('selectivity', {sel}))" for q, sel in CHAIN)
    return [(f"benchmark chain: {docs} paragraphs, three ai_if", f"SELECT id FROM docs_chain WHERE {chain}"),
            (f"benchmark join: {docs} paragraphs x {topics} titles",
             f"SELECT d.id, t.tid FROM docs_join d JOIN titles t ON ai_if('{JOIN}', d.body, t.title)"),
            (f"benchmark select: {docs} paragraphs, ai_if and two ai_score",
             f"SELECT id, ai_if('{SELECT[0]}', body) AS a, ai_score('{SELECT[1]}', body) AS b, "
             f"ai_score('{SELECT[2]}', body) AS c FROM docs_select")]


def main() -> None:
    import quickstart

    from quail_spark import QuailSession

    spark = quickstart.spark_session()
    quickstart.register_tables(spark)
    queries = list(quickstart.QUERIES) + ([] if "--no-benchmarks" in sys.argv[1:] else benchmark_queries(spark))
    # warm-up: the engines load and measure their rates, over texts no query below asks about (the topics' KV
    # computed here would be found cached by the quickstart's queries, which no estimate knows)
    spark.createDataFrame([(i, f"warm-up note {i}: the engines load here.") for i in range(8)], "id int, t string") \
        .repartition(2).createOrReplaceTempView("warm_up")
    QuailSession(spark, model="smollm2-135m", device="cpu").sql(
        "SELECT id FROM warm_up WHERE ai_if('Is {0} short?', t)").collect(progress=False)
    qs = QuailSession(spark, model="smollm2-135m", device="cpu")  # the planner now reads the measured rate
    rows = []
    for title, sql in queries:
        q = qs.sql(sql)
        t0 = time.time()
        est = q.estimate()
        plan_s = time.time() - t0
        q.collect(progress=False)
        r = q.report
        rows.append({"query": title, "estimate": {k: est[k] for k in ("requested_tokens", "fresh_tokens", "seconds", "engine_seconds")},
                     "actual": {"requested_tokens": r["requested_tokens"], "fresh_tokens": r["fresh_tokens"],
                                "wall_s": round(r["wall_s"], 3)},
                     "plan_s": round(plan_s, 3), "operators": est["operators"],
                     "operator_actuals": r.get("ops", {})})
        print(f"{title[:60]:60} requested {est['requested_tokens']:8,.0f} / {r['requested_tokens']:8,} "
              f"({est['requested_tokens'] / max(r['requested_tokens'], 1):.2f}x)  seconds {est['seconds']:7.2f} / "
              f"{r['wall_s']:7.2f} ({est['seconds'] / max(r['wall_s'], 1e-9):.2f}x)", flush=True)
    conf = {k: spark.conf.get(k) for k in ("spark.quail.model.rate", "spark.quail.model.attn_rate",
                                           "spark.quail.model.rate_source")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out = ROOT / "benchmarks" / "results" / f"estimate_accuracy_{commit}.json"
    out.write_text(json.dumps({"commit": commit, "machine": "2 CPU cores (shared)", "conf": conf,
                               "queries": rows}, indent=1))
    print(f"wrote {out}")
    spark.stop()


if __name__ == "__main__":
    main()
