"""CHAIN through Spark on this CPU: plain spark.sql with the quail-spark rules against
``pyspark.ml.functions.predict_batch_udf`` + transformers, as a Spark user writes it today.

One SparkSession (local[2]) with the extension (quail_spark.spark_conf()). The same
documentation paragraphs (Python's own docs, pydoc_data.topics, PSF license) go through:

- quail: ``SELECT id FROM docs WHERE ai_if(Q1, body) AND ai_if(Q2, body) AND ai_if(Q3, body)``:
  the rules fuse the three predicates into one chain (short-circuit, the document's KV kept);
- baseline: three ``predict_batch_udf`` margin columns (SmolLM2 in transformers, left-padded batches of
  ``--hf-batch`` prompts, the last position's yes/no logits), ``df.filter((p1 > 0) & (p2 > 0) & (p3 > 0))``;
  Spark plans it as one Filter per predicate, each above its own ArrowEvalPython, so a predicate runs
  on the rows the ones written before it passed (short-circuit in the written order), three Python
  workers per task.

Both score the same prompt ids (the one renderer). Three interleaved runs per way, each over
the paragraphs tagged with its run (no prompt of a run is in any cache), after a warm run over
other paragraphs (model loads in the Python workers); the median and the load average of each
run are reported (benchmarks/spark_harness.py).

    python benchmarks/spark_chain_vs_predict_batch.py --docs 64 [--no-hints] [--breakdown]

--no-hints: the same chain without selectivity hints (the rules' default selectivity, so the order
is by question cost). --breakdown: afterwards, the same work without Spark in this process on one
thread (spark_harness.where_time_goes): engine seconds and fresh tokens, transformers seconds and
padded tokens, and Spark's share of each way's wall time.
"""
from __future__ import annotations

import argparse
import sys

import spark_harness as h

# written in a poor order; the hints are the pass rates SmolLM2 gave on 72 such paragraphs
# (0.60, 0.51, 0.33): the rules evaluate the most selective first, predict_batch_udf's Filters the written order
QUESTIONS = [("Does {0} describe a built-in type?", 0.6), ("Does {0} contain a code example?", 0.5),
             ("Does {0} mention classes?", 0.3)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--warm-docs", type=int, default=8)
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-hints", action="store_true", help="the same chain without selectivity hints")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the engine and transformers on the same work without Spark (one thread)")
    ap.add_argument("--out", default=None, help="default benchmarks/results/spark_chain_vs_predict_batch_<commit>.json")
    a = ap.parse_args()
    import quail_spark

    def hint(sel: float) -> str:
        return "" if a.no_hints else f", map('selectivity', {sel})"

    spark = h.session("spark_chain_vs_predict_batch")
    texts = h.paragraphs(a.docs + a.warm_docs)
    udfs = [h.margin_udf(q, batch=a.hf_batch) for q, _ in QUESTIONS]

    def frame(run: str):
        # two slices of a.docs / 2 rows (local[2]); both ways filter them where they are. (Up to 082603d
        # the frame was repartition(2, "id"), which Spark's push-down put above both filters anyway.)
        rows = texts[a.docs:] if run == "warm" else h.tagged(texts[:a.docs], run)
        return spark.createDataFrame(list(enumerate(rows)), "id int, body string")

    def quail(run: str):
        frame(run).createOrReplaceTempView("t")
        where = " AND ".join(f"ai_if('{q}', body{hint(sel)})" for q, sel in QUESTIONS)
        return sorted(r.id for r in spark.sql(f"SELECT id FROM t WHERE {where}").collect())

    def baseline(run: str):
        cond = (udfs[0]("body") > 0) & (udfs[1]("body") > 0) & (udfs[2]("body") > 0)
        return sorted(r.id for r in frame(run).filter(cond).select("id").collect())

    res = {"commit": h.commit(), "machine": h.machine(), "docs": a.docs, "hf_batch": a.hf_batch,
           "questions": QUESTIONS, "hints": not a.no_hints, "runs": a.runs}
    quail("warm"), baseline("warm")  # model loads, JIT, worker start: not timed
    before = quail_spark.metrics(spark)
    ways = h.timed_runs({"quail": quail, "predict_batch_udf": baseline}, a.runs)
    after = quail_spark.metrics(spark)
    res["quail_counters"] = {k: after[k] - before[k] for k in ("requested_tokens", "fresh_tokens", "forward_passes")}
    res.update(ways)
    res["speedup"] = round(ways["predict_batch_udf"]["median_s"] / ways["quail"]["median_s"], 2)
    # the plan's order of the questions (the chain's spec), and the same work without Spark
    from quail_spark.explain import plan_text, planned_calls
    frame("order").createOrReplaceTempView("t")
    where = " AND ".join(f"ai_if('{q}', body{hint(sel)})" for q, sel in QUESTIONS)
    (_, spec), = planned_calls(plan_text(spark.sql(f"SELECT id FROM t WHERE {where}")))
    res["plan_order"] = [c["template"] for c in spec["calls"]]
    if a.breakdown:
        parts = [[r.body for r in part] for part in frame("alone").select("body").rdd.glom().collect()]
        alone = h.where_time_goes(parts, res["plan_order"], [q for q, _ in QUESTIONS], batch=a.hf_batch)
        alone["spark_share_quail"] = round(1 - max(alone["engine_s"]) / ways["quail"]["median_s"], 3)
        alone["spark_share_predict_batch_udf"] = round(
            1 - max(alone["transformers_s"]) / ways["predict_batch_udf"]["median_s"], 3)
        res["where_time_goes"] = alone
    res["same_rows"] = all(x["rows"] == y["rows"] for x, y in zip(ways["quail"]["runs"], ways["predict_batch_udf"]["runs"]))
    h.write("spark_chain_vs_predict_batch" + ("_no_hints" if a.no_hints else ""), res, a.out)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
