"""Three AI calls in one SELECT through Spark on this CPU: plain spark.sql with the quail-spark
rules against ``pyspark.ml.functions.predict_batch_udf`` + transformers, as a Spark user writes it.

One SparkSession (local[2]) with the extension (quail_spark.spark_conf()). The same
documentation paragraphs (Python's own docs, pydoc_data.topics) go through:

- quail: ``SELECT id, ai_if(Q1, body), ai_score(Q2, body), ai_score(Q3, body) FROM docs``:
  the rule QuailFuseCalls evaluates the three calls together per document (one quail_eval:
  the document's KV computed once, the three questions over it);
- baseline: three ``predict_batch_udf`` margin columns (SmolLM2 in transformers, left-padded
  batches of ``--hf-batch`` prompts), ``df.select(id, p1 > 0, sigmoid(p2), sigmoid(p3))``.

Both compute the same prompt ids (the one renderer). Three interleaved runs per way, each over
the paragraphs tagged with its run (no run finds another's KV), after a warm run over other
paragraphs (model loads in the Python workers); the median and the load average of each run
are reported (benchmarks/spark_harness.py).

    python benchmarks/spark_select_vs_predict_batch.py --docs 64
"""
from __future__ import annotations

import argparse
import sys

import spark_harness as h

QUESTIONS = ["Does {0} describe a built-in type?", "Does {0} contain a code example?", "Does {0} mention classes?"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--warm-docs", type=int, default=8)
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="default benchmarks/results/spark_select_vs_predict_batch_<commit>.json")
    a = ap.parse_args()
    from pyspark.sql import functions as F

    import quail_spark

    spark = h.session("spark_select_vs_predict_batch")
    texts = h.paragraphs(a.docs + a.warm_docs)
    udfs = [h.margin_udf(q, batch=a.hf_batch) for q in QUESTIONS]

    def frame(run: str):
        rows = texts[a.docs:] if run == "warm" else h.tagged(texts[:a.docs], run)
        return spark.createDataFrame(list(enumerate(rows)), "id int, body string").repartition(2, "id")

    def quail(run: str):
        frame(run).createOrReplaceTempView("docs")
        q1, q2, q3 = QUESTIONS
        sql = (f"SELECT id, ai_if('{q1}', body) AS a, ai_score('{q2}', body) AS b, ai_score('{q3}', body) AS c "
               "FROM docs")
        return sorted((r.id, r.a, round(r.b, 3), round(r.c, 3)) for r in spark.sql(sql).collect())

    def baseline(run: str):
        m = [u("body") for u in udfs]
        sig = lambda c: 1.0 / (1.0 + F.exp(-c))  # noqa: E731
        out = frame(run).select("id", (m[0] > 0).alias("a"), sig(m[1]).alias("b"), sig(m[2]).alias("c")).collect()
        return sorted((r.id, r.a, round(r.b, 3), round(r.c, 3)) for r in out)

    res = {"commit": h.commit(), "machine": h.machine(), "docs": a.docs, "hf_batch": a.hf_batch,
           "questions": QUESTIONS, "runs": a.runs}
    quail("warm"), baseline("warm")  # model loads, JIT, worker start: not timed
    before = quail_spark.metrics(spark)
    ways = h.timed_runs({"quail": quail, "predict_batch_udf": baseline}, a.runs)
    after = quail_spark.metrics(spark)
    res["quail_counters"] = {k: after[k] - before[k] for k in ("requested_tokens", "fresh_tokens", "forward_passes")}
    res.update(ways)
    res["speedup"] = round(ways["predict_batch_udf"]["median_s"] / ways["quail"]["median_s"], 2)
    pairs = [(x, y) for qr, br in zip(ways["quail"]["runs"], ways["predict_batch_udf"]["runs"])
             for x, y in zip(qr["rows"], br["rows"])]
    res["same_flags"] = all(x[:2] == y[:2] for x, y in pairs)  # transformers and the engine: float rounding apart
    res["max_score_difference"] = max((abs(x[k] - y[k]) for x, y in pairs for k in (2, 3)), default=0.0)
    h.write("spark_select_vs_predict_batch", res, a.out)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
