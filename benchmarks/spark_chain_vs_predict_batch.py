"""CHAIN through Spark on this CPU: plain spark.sql with the quail-spark rules against
``pyspark.ml.functions.predict_batch_udf`` + transformers, as a Spark user writes it today.

One SparkSession (local[2]) with the extension (quail_spark.spark_conf()). The same
documentation paragraphs (Python's own docs, pydoc_data.topics, PSF license) go through:

- quail: ``SELECT id FROM docs WHERE ai_if(Q1, body) AND ai_if(Q2, body) AND ai_if(Q3, body)``:
  the rules fuse the three predicates into one chain (short-circuit, the document's KV kept);
- baseline: three ``predict_batch_udf`` margin columns (SmolLM2 in transformers, left-padded batches of
  ``--hf-batch`` prompts, the last position's yes/no logits), ``df.filter((p1 > 0) & (p2 > 0) & (p3 > 0))``.

Both score the same prompt ids (the engine's chat rendering of each (paragraph, question));
transformers runs on the engine's own SmolLM2 weights (gpu_worker.reference.hf_model: no
network here). Warm runs: each path first runs over other paragraphs (model loads in the
Python workers); the timed run is the first over the measured paragraphs, so no prompt of
it is in any cache.

    python benchmarks/spark_chain_vs_predict_batch.py --docs 64 \
        --out benchmarks/results/spark_chain_vs_predict_batch.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

# written in a poor order; the hints are the pass rates SmolLM2 gave on 72 such paragraphs
# (0.60, 0.51, 0.33): the rules evaluate the most selective first, predict_batch_udf evaluates all three
QUESTIONS = [("Does {0} describe a built-in type?", 0.6), ("Does {0} contain a code example?", 0.5),
             ("Does {0} mention classes?", 0.3)]
MODEL = {"model": "smollm2-135m", "device": "cpu", "kv_pool_tokens": 16384}  # 0.75 GB of KV: a partition's documents fit


def paragraphs(n: int, min_words: int = 80, max_words: int = 160) -> list[str]:
    """Documentation paragraphs of at least ``min_words`` words (cut at ``max_words``), in a fixed order."""
    from pydoc_data.topics import topics

    out = []
    for key in sorted(topics):
        for para in topics[key].split("\n\n"):
            words = para.split()
            if len(words) >= min_words:
                out.append(" ".join(words[:max_words]))
    if len(out) < n:
        raise ValueError(f"only {len(out)} paragraphs of >= {min_words} words, asked for {n}")
    return out[:n]


def make_predict_fn(question: str, batch: int):
    """predict_batch_udf's factory: runs on the executor, once per Python worker and question."""
    def make():
        import numpy as np
        import torch

        from gpu_worker import EngineConfig, get_engine
        from gpu_worker.ai_calls import Call
        from gpu_worker.reference import hf_model

        # the worker's engine (weights, tokenizer, chat rendering); transformers runs on views of its
        # weights, one model per worker for the three UDFs (memory: one copy of SmolLM2 per worker)
        eng = get_engine(EngineConfig(**MODEL))
        if not hasattr(eng, "_bench_hf_model"):
            eng._bench_hf_model = hf_model(eng)
        model, q = eng._bench_hf_model, Call("if", question, 1).question
        true_ids, false_ids = eng.answer_token_ids

        @torch.inference_mode()
        def predict(docs):
            prompts = [eng.render_filter(str(d), q) for d in docs]
            L = max(len(p) for p in prompts)
            ids = torch.zeros(len(prompts), L, dtype=torch.long)
            mask = torch.zeros(len(prompts), L, dtype=torch.long)
            for r, p in enumerate(prompts):  # left padding: the last position is every prompt's last token
                ids[r, L - len(p):] = torch.tensor(p)
                mask[r, L - len(p):] = 1
            lg = model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1].float()
            m = torch.logsumexp(lg[:, true_ids], -1) - torch.logsumexp(lg[:, false_ids], -1)
            return m.numpy().astype(np.float64)  # the margin: TRUE when > 0
        return predict
    return make


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--warm-docs", type=int, default=8)
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--out", default="benchmarks/results/spark_chain_vs_predict_batch.json")
    a = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import quail_spark
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DoubleType

    builder = (SparkSession.builder.master("local[2]").appName("spark_chain_vs_predict_batch")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.python.worker.reuse", "true"))
    for k, v in quail_spark.spark_conf().items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quail_spark.install(spark, **MODEL)
    texts = paragraphs(a.docs + a.warm_docs)
    frames = {name: spark.createDataFrame(list(enumerate(rows)), "id int, body string").repartition(2, "id")
              for name, rows in (("docs", texts[:a.docs]), ("warm", texts[a.docs:]))}
    udfs = [predict_batch_udf(make_predict_fn(q, a.hf_batch), return_type=DoubleType(), batch_size=a.hf_batch)
            for q, _ in QUESTIONS]

    def quail(table: str):
        frames[table].createOrReplaceTempView("t")
        where = " AND ".join(f"ai_if('{q}', body, map('selectivity', {sel}))" for q, sel in QUESTIONS)
        return sorted(r.id for r in spark.sql(f"SELECT id FROM t WHERE {where}").collect())

    def baseline(table: str):
        df = frames[table]
        cond = (udfs[0]("body") > 0) & (udfs[1]("body") > 0) & (udfs[2]("body") > 0)
        return sorted(r.id for r in df.filter(cond).select("id").collect())

    git = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()  # noqa: E731
    res = {"commit": git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain") else ""),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, Spark local[2]",
           "docs": a.docs, "hf_batch": a.hf_batch, "questions": QUESTIONS,
           "load_average_before": os.getloadavg()}
    quail("warm"), baseline("warm")  # model loads, JIT, worker start: not timed
    before = quail_spark.metrics(spark)
    rows_q, t_q = timed(lambda: quail("docs"))
    after = quail_spark.metrics(spark)
    rows_b, t_b = timed(lambda: baseline("docs"))
    counters = {k: after[k] - before[k] for k in ("requested_tokens", "fresh_tokens", "forward_passes")}
    res["load_average_after"] = os.getloadavg()
    res.update({"quail_s": round(t_q, 2), "predict_batch_udf_s": round(t_b, 2), "speedup": round(t_b / t_q, 2),
                "rows_quail": rows_q, "rows_baseline": rows_b, "same_rows": rows_q == rows_b,
                "quail_counters": counters})
    print(json.dumps(res, indent=1), flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
