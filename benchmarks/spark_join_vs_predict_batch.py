"""An AI join through Spark on this CPU: plain spark.sql with the quail-spark rules against a
cross join with a ``pyspark.ml.functions.predict_batch_udf`` + transformers, as a Spark user
writes it.

One SparkSession (local[2]) with the extension (quail_spark.spark_conf()). Documentation
paragraphs (Python's own docs, pydoc_data.topics) x topic titles (jobs/data/python_topics.jsonl):

- quail: ``SELECT d.id, t.tid FROM docs d JOIN topics t ON ai_if('Does {0} explain {1}?', d.body,
  t.title)``: the rule QuailAiJoin evaluates it paragraph by paragraph (its KV computed once, the
  titles broadcast and streamed against it);
- baseline: ``docs.crossJoin(topics).filter(margin(body, title) > 0)``, the margin a two-column
  ``predict_batch_udf`` (SmolLM2 in transformers, left-padded batches of ``--hf-batch`` prompts).

Both compute the same prompt ids for a pair (the one renderer). Three interleaved runs per way,
each over the paragraphs tagged with its run (no run finds another's KV), after a warm run
over other paragraphs; the median and the load average of each run are reported
(benchmarks/spark_harness.py).

    python benchmarks/spark_join_vs_predict_batch.py --docs 64 --topics 20
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import spark_harness as h

QUESTION = "Does {0} explain {1}?"
TOPICS = os.path.join(os.path.dirname(__file__), "..", "jobs", "data", "python_topics.jsonl")


def titles(n: int) -> list[str]:
    with open(TOPICS) as f:
        out = [json.loads(line)["title"] for line in f if line.strip()]
    if len(out) < n:
        raise ValueError(f"only {len(out)} topics in {TOPICS}, asked for {n}")
    return out[:n]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--warm-docs", type=int, default=4)
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="default benchmarks/results/spark_join_vs_predict_batch_<commit>.json")
    a = ap.parse_args()
    import quail_spark

    spark = h.session("spark_join_vs_predict_batch")
    texts = h.paragraphs(a.docs + a.warm_docs)
    topics = spark.createDataFrame(list(enumerate(titles(a.topics))), "tid int, title string")
    topics.createOrReplaceTempView("topics")
    margin = h.margin_udf(QUESTION, n_cols=2, batch=a.hf_batch)

    def docs(run: str):
        rows = texts[a.docs:] if run == "warm" else h.tagged(texts[:a.docs], run)
        return spark.createDataFrame(list(enumerate(rows)), "id int, body string").repartition(2, "id")

    def quail(run: str):
        docs(run).createOrReplaceTempView("docs")
        sql = f"SELECT d.id, t.tid FROM docs d JOIN topics t ON ai_if('{QUESTION}', d.body, t.title)"
        return sorted(tuple(r) for r in spark.sql(sql).collect())

    def baseline(run: str):
        pairs = docs(run).crossJoin(topics)
        return sorted(tuple(r) for r in pairs.filter(margin("body", "title") > 0).select("id", "tid").collect())

    res = {"commit": h.commit(), "machine": h.machine(), "docs": a.docs, "topics": a.topics,
           "hf_batch": a.hf_batch, "question": QUESTION, "runs": a.runs}
    quail("warm"), baseline("warm")  # model loads, JIT, worker start: not timed
    before = quail_spark.metrics(spark)
    ways = h.timed_runs({"quail": quail, "predict_batch_udf": baseline}, a.runs)
    after = quail_spark.metrics(spark)
    res["quail_counters"] = {k: after[k] - before[k] for k in ("requested_tokens", "fresh_tokens", "forward_passes")}
    res.update(ways)
    res["speedup"] = round(ways["predict_batch_udf"]["median_s"] / ways["quail"]["median_s"], 2)
    res["same_rows"] = all(x["rows"] == y["rows"] for x, y in zip(ways["quail"]["runs"], ways["predict_batch_udf"]["runs"]))
    h.write("spark_join_vs_predict_batch", res, a.out)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
