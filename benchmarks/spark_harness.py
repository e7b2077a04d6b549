"""What the Spark CPU benchmarks share: one local[2] session with the quail-spark rules, the
documentation paragraphs they score, the ``predict_batch_udf`` + transformers baseline as a
Spark user writes it, and timed runs (three, median, the load average beside each) written to
``benchmarks/results/<name>_<commit>.json``.

The baseline scores the prompt ids of the one renderer (``gpu_worker.ai_calls.render``), so both
sides compute the same prompts; transformers runs on the engine's own SmolLM2 weights
(``gpu_worker.reference.hf_model``: no network here), left-padded batches, the last position's
yes/no logits.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time

MODEL = {"model": "smollm2-135m", "device": "cpu", "kv_pool_tokens": 16384}  # 0.75 GB of KV: a partition's documents fit


def session(app: str):
    """One local[2] SparkSession with the extension, the AI functions installed (``MODEL``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import quail_spark
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.python.worker.reuse", "true"))
    for k, v in quail_spark.spark_conf().items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quail_spark.install(spark, **MODEL)
    return spark


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


def tagged(texts: list[str], run: str) -> list[str]:
    """The texts with a run tag in front: no prompt of one run is in the KV cache of another."""
    return [f"[{run}] {t}" for t in texts]


def make_predict_fn(question: str, n_cols: int = 1):
    """predict_batch_udf's factory: runs on the executor, once per Python worker and question.

    The predict function takes ``n_cols`` text columns and returns the margin (TRUE when > 0)
    of ``ai_if(question, col0[, col1])`` on each row.
    """
    def make():
        import numpy as np
        import torch

        from gpu_worker import EngineConfig, get_engine
        from gpu_worker.ai_calls import Call, render
        from gpu_worker.reference import hf_model

        # the worker's engine (weights, tokenizer, chat rendering); transformers runs on views of its
        # weights, one model per worker for all UDFs (memory: one copy of SmolLM2 per worker)
        eng = get_engine(EngineConfig(**MODEL))
        if not hasattr(eng, "_bench_hf_model"):
            eng._bench_hf_model = hf_model(eng)
        model, call = eng._bench_hf_model, Call("if", question, n_cols)
        true_ids, false_ids = eng.answer_token_ids

        @torch.inference_mode()
        def predict(*cols):
            prompts = [render(eng, call, [str(c[r]) for c in cols]) for r in range(len(cols[0]))]
            L = max(len(p) for p in prompts)
            ids = torch.zeros(len(prompts), L, dtype=torch.long)
            mask = torch.zeros(len(prompts), L, dtype=torch.long)
            for r, p in enumerate(prompts):  # left padding: the last position is every prompt's last token
                ids[r, L - len(p):] = torch.tensor(p)
                mask[r, L - len(p):] = 1
            lg = model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1].float()
            m = torch.logsumexp(lg[:, true_ids], -1) - torch.logsumexp(lg[:, false_ids], -1)
            return m.numpy().astype(np.float64)
        # predict_batch_udf counts the function's parameters: one per column
        return predict if n_cols == 1 else (lambda doc, other: predict(doc, other))
    return make


def hf_margins(eng, model, call, texts: list, batch: int = 8):
    """Margins of ``call`` on ``texts`` through transformers as the baseline's predict function
    computes them (left-padded batches of ``batch`` prompts), and the padded tokens it ran."""
    import numpy as np
    import torch

    from gpu_worker.ai_calls import render

    true_ids, false_ids = eng.answer_token_ids
    out, padded = [], 0
    with torch.inference_mode():
        for lo in range(0, len(texts), batch):
            prompts = [render(eng, call, [t]) for t in texts[lo:lo + batch]]
            L = max(len(p) for p in prompts)
            ids = torch.zeros(len(prompts), L, dtype=torch.long)
            mask = torch.zeros(len(prompts), L, dtype=torch.long)
            for r, p in enumerate(prompts):
                ids[r, L - len(p):] = torch.tensor(p)
                mask[r, L - len(p):] = 1
            lg = model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1].float()
            out += (torch.logsumexp(lg[:, true_ids], -1) - torch.logsumexp(lg[:, false_ids], -1)).tolist()
            padded += len(prompts) * L
    return np.array(out), padded


def where_time_goes(parts: list, plan_order: list, written: list, batch: int = 8) -> dict:
    """The work of both ways without Spark, in this process on one thread (as each Python worker of
    local[2] runs: Spark sets OMP_NUM_THREADS=1), over ``parts`` (the documents of each Spark
    partition, in Spark's order):

    - the engine's chain with the questions in the plan's order (``plan_order``);
    - transformers as Spark runs the baseline: Spark splits ``p1 > 0 AND p2 > 0 AND p3 > 0`` into
      one Filter per predicate, each above its own ArrowEvalPython (its own Python worker), so each
      predicate of ``written`` (the order the query gives) is evaluated on the rows the ones before
      it passed, in batches of ``batch`` rows.

    With the tokens each computes. Spark's share of a Spark run is its wall time minus the slowest
    partition's work here; for the baseline it can be negative: a task's three Python workers run
    as a pipeline, on both cores once the other task has finished.
    """
    import time

    import torch

    from gpu_worker import EngineConfig, get_engine
    from gpu_worker.ai_calls import Call
    from gpu_worker.reference import hf_model

    torch.set_num_threads(1)
    eng = get_engine(EngineConfig(**MODEL))
    model = hf_model(eng)
    res = {"partition_rows": [len(p) for p in parts], "threads": torch.get_num_threads(), "engine_s": [],
           "transformers_s": [], "engine_fresh_tokens": 0, "transformers_padded_tokens": 0,
           "transformers_prompts": 0}
    for part in parts:
        fresh = eng.stats["fresh_tokens"]
        t = time.perf_counter()
        eng.chain(part, plan_order, short_circuit=True)
        res["engine_s"].append(round(time.perf_counter() - t, 2))
        res["engine_fresh_tokens"] += eng.stats["fresh_tokens"] - fresh
        t = time.perf_counter()
        alive = list(part)
        for q in written:
            m, padded = hf_margins(eng, model, Call("if", q, 1), alive, batch)
            res["transformers_padded_tokens"] += padded
            res["transformers_prompts"] += len(alive)
            alive = [d for d, v in zip(alive, m) if v > 0]
        res["transformers_s"].append(round(time.perf_counter() - t, 2))
    return res


def margin_udf(question: str, n_cols: int = 1, batch: int = 8):
    """A predict_batch_udf column function giving the margin of ``question`` (a DoubleType column)."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import DoubleType

    return predict_batch_udf(make_predict_fn(question, n_cols), return_type=DoubleType(), batch_size=batch)


def timed_runs(ways: dict, runs: int = 3) -> dict:
    """Each way ``fn(run) -> rows`` run ``runs`` times, interleaved (way A, way B, way A, ...).

    Returns per way: the seconds and load average (1, 5, 15 min, taken just before) of each
    run, the median seconds and the rows of each run.
    """
    out = {name: {"runs": []} for name in ways}
    for r in range(runs):
        for name, fn in ways.items():
            load = os.getloadavg()
            t = time.perf_counter()
            rows = fn(f"run {r}")
            s = time.perf_counter() - t
            out[name]["runs"].append({"s": round(s, 2), "load_average": [round(x, 2) for x in load], "rows": rows})
            print(f"{name} run {r}: {s:.2f} s (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})", flush=True)
    for v in out.values():
        v["median_s"] = round(statistics.median(x["s"] for x in v["runs"]), 2)
    return out


def commit() -> str:
    git = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()  # noqa: E731
    return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain") else "")


def machine() -> str:
    """Architecture, the processor's vendor and model (x86 BLAS libraries pick their kernels by vendor:
    MKL's float32 matmul takes its AVX2 path on AMD), cores."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            info = {k.strip(): v for k, v in (line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines()
                                              if ":" in line)}
        cpu = " ".join(info.get(k, "").strip() for k in ("vendor_id", "model name")).strip() + ", "
    except OSError:
        pass
    return f"{platform.machine()}, {cpu}{os.cpu_count()} cores, Spark local[2]"


def write(name: str, res: dict, out: str | None = None) -> str:
    """Print the results and write them to ``out`` (default benchmarks/results/<name>_<commit>.json)."""
    path = out or os.path.join("benchmarks", "results", f"{name}_{res['commit']}.json")
    print(json.dumps(res, indent=1), flush=True)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    return path
