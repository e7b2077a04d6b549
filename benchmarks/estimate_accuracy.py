"""How close explain's estimates come to the run, in a fresh session without ANALYZE (SmolLM2-135M on the
CPU): the quickstart's four queries (jobs/quickstart.py, 40 topics) and the quail side of the three
Spark benchmarks (spark_chain / spark_join / spark_select_vs_predict_batch.py: 64 documentation
paragraphs under a chain of three ai_if, joined with 20 topic titles, under three calls in a SELECT).

    PYTHONPATH=. python benchmarks/estimate_accuracy.py [--no-benchmarks] [--runs 3]

For each query: the estimate (``q.estimate()``: requested and fresh tokens, seconds) beside the
run's report (requested and fresh tokens, the wall of the action); the estimate's seconds are the
wall (each operator's engine seconds over the tasks that run it at once), ``engine_seconds`` one
engine's serial seconds. The engines load (and measure
their rates, gpu_worker/rates.py) during a warm-up query over other texts first, then the session is installed
again so the planner reads the measured rate. The seconds are compared with each AI operator's own wall
(``q.report["ops"]``: its first batch's start to its last batch's end, summed over the query's operators)
and with the action's. ``--runs N`` (3 by default) runs it all N times, each in a fresh process (no KV of an
earlier run cached), prints the load average beside each run and the median of the runs' ratios. Writes
benchmarks/results/estimate_accuracy_<commit>.json and prints the table.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
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


def one_run() -> list:
    """The queries' estimates beside their runs, in this process's fresh session."""
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
        ops = r.get("ops", {})
        ai_wall = sum(ops.get(o["op"], {}).get("wall_s", 0) for o in est["operators"])
        rows.append({"query": title,
                     "estimate": {k: est[k] for k in ("requested_tokens", "fresh_tokens", "seconds", "engine_seconds")},
                     "actual": {"requested_tokens": r["requested_tokens"], "fresh_tokens": r["fresh_tokens"],
                                "ai_wall_s": round(ai_wall, 3), "wall_s": round(r["wall_s"], 3)},
                     "plan_s": round(plan_s, 3), "operators": est["operators"], "operator_actuals": ops})
        print(f"{title[:60]:60} requested {est['requested_tokens']:8,.0f} / {r['requested_tokens']:8,} "
              f"({est['requested_tokens'] / max(r['requested_tokens'], 1):.2f}x)  seconds {est['seconds']:7.2f} / "
              f"AI wall {ai_wall:7.2f} ({est['seconds'] / max(ai_wall, 1e-9):.2f}x), action {r['wall_s']:7.2f}",
              flush=True)
    conf = {k: spark.conf.get(k) for k in ("spark.quail.model.rate", "spark.quail.model.attn_rate",
                                           "spark.quail.model.prompt_s", "spark.quail.model.rate_source")}
    spark.stop()
    return [{"conf": conf, "queries": rows}]


def ratios(q: dict) -> dict:
    e, a = q["estimate"], q["actual"]
    return {"requested": e["requested_tokens"] / max(a["requested_tokens"], 1),
            "fresh": e["fresh_tokens"] / max(a["fresh_tokens"], 1),
            "seconds_vs_ai_wall": e["seconds"] / max(a["ai_wall_s"], 1e-9),
            "seconds_vs_action_wall": e["seconds"] / max(a["wall_s"], 1e-9)}


def main() -> None:
    if "--single" in sys.argv[1:]:
        out = sys.argv[sys.argv.index("--single") + 1]
        Path(out).write_text(json.dumps(one_run()))
        return
    n = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv[1:] else 3
    runs = []
    for i in range(n):
        load = os.getloadavg()
        print(f"== run {i + 1} of {n}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            flags = ["--no-benchmarks"] if "--no-benchmarks" in sys.argv[1:] else []
            subprocess.run([sys.executable, __file__, *flags, "--single", f"{tmp}/run.json"], check=True)
            (run,) = json.loads(Path(f"{tmp}/run.json").read_text())
        runs.append({"load_average": [round(x, 2) for x in load], **run})
    medians = []
    print(f"== median of {n} runs (estimate / run)")
    for k, q in enumerate(runs[0]["queries"]):
        per_run = [ratios(r["queries"][k]) for r in runs]
        m = {key: round(statistics.median(p[key] for p in per_run), 3) for key in per_run[0]}
        medians.append({"query": q["query"], **m})
        print(f"{q['query'][:60]:60} requested {m['requested']:.2f}x fresh {m['fresh']:.2f}x seconds "
              f"{m['seconds_vs_ai_wall']:.2f}x of the AI wall, {m['seconds_vs_action_wall']:.2f}x of the action's")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out = ROOT / "benchmarks" / "results" / f"estimate_accuracy_{commit}.json"
    out.write_text(json.dumps({"commit": commit, "machine": f"{os.cpu_count()} CPU cores (shared)", "runs": runs,
                               "medians": medians}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
