"""Where a CPU Python worker's time goes: the engine against transformers per token, threads, dtypes.

On the documentation paragraphs of the Spark benchmarks (benchmarks/spark_harness.py), SmolLM2-135M:

- ``rates``: one thread (a Spark Python worker runs with OMP_NUM_THREADS=1), the engine's filter over
  32 paragraphs (fresh tokens/s) and transformers on the same prompts in left-padded batches of 8
  (padded tokens/s), then the engine's operations under torch.profiler (share of each aten op);
- ``matmul``: GFLOP/s of the engine's projection shapes (2,048 rows) in float32 and bfloat16;
- ``bf16``: margins of 72 paragraphs x 4 questions in bfloat16 against float32 (sign agreement,
  differences), and both rates in bfloat16.

    PYTHONPATH=. python benchmarks/probes/cpu_engine_vs_hf.py --out benchmarks/probes/results/cpu_engine_vs_hf.json

Run it alone, and once more with a second copy beside it (``--tag concurrent``) for two workers on two
cores.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import spark_harness as h  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from gpu_worker.ai_calls import Call  # noqa: E402
from gpu_worker.reference import hf_model  # noqa: E402

Q = ["Does {0} mention classes?", "Does {0} contain a code example?", "Does {0} describe a built-in type?",
     "Is {0} about numbers?"]


def rates(dtype: str, texts: list[str], tag: str) -> dict:
    eng = Engine(EngineConfig(**{**h.MODEL, "dtype": dtype}))
    model = hf_model(eng).to(getattr(torch, dtype))
    eng.filter(h.tagged(texts[:4], "warm"), Q[:1])
    f0 = eng.stats["fresh_tokens"]
    t = time.perf_counter()
    eng.filter(h.tagged(texts, f"{tag}-engine"), Q[:1])
    te, fresh = time.perf_counter() - t, eng.stats["fresh_tokens"] - f0
    t = time.perf_counter()
    _, padded = h.hf_margins(eng, model, Call("if", Q[0], 1), h.tagged(texts, f"{tag}-hf"), 8)
    th = time.perf_counter() - t
    out = {"engine_s": round(te, 2), "engine_fresh_tokens": fresh, "engine_fresh_tok_s": round(fresh / te),
           "transformers_s": round(th, 2), "transformers_padded_tokens": padded,
           "transformers_padded_tok_s": round(padded / th)}
    if dtype == "float32":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as p:
            eng.filter(h.tagged(texts, f"{tag}-profile"), Q[:1])
        ops = sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in ops)
        out["engine_op_share"] = {e.key: round(e.self_cpu_time_total / total, 3) for e in ops[:8]}
    return out


def matmul() -> dict:
    out = {}
    for dt in (torch.float32, torch.bfloat16):
        flop, secs = 0, 0.0
        for n, k in ((960, 576), (576, 576), (3072, 576), (576, 1536)):  # SmolLM2's projections
            a, w = torch.randn(2048, k, dtype=dt), torch.randn(n, k, dtype=dt)
            a @ w.t()
            t = time.perf_counter()
            for _ in range(5):
                a @ w.t()
            secs += (time.perf_counter() - t) / 5
            flop += 2 * 2048 * n * k
        out[str(dt).split(".")[1]] = round(flop / secs / 1e9, 1)
    return out


def bf16_margins(texts: list[str]) -> dict:
    m = {dt: Engine(EngineConfig(**{**h.MODEL, "dtype": dt})).filter(texts, Q) for dt in ("float32", "bfloat16")}
    a, b = m["float32"].ravel(), m["bfloat16"].ravel()
    sure = np.abs(a) > 0.1
    return {"prompts": int(a.size), "sign_agreement": round(float((np.sign(a) == np.sign(b)).mean()), 4),
            "sign_agreement_abs_over_0.1": round(float((np.sign(a[sure]) == np.sign(b[sure])).mean()), 4),
            "max_abs_diff": round(float(np.abs(a - b).max()), 4), "median_abs_diff": round(float(np.median(np.abs(a - b))), 4),
            "median_abs_margin": round(float(np.median(np.abs(a))), 4)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", default="alone")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    texts = h.paragraphs(72)
    res = {"commit": h.commit(), "machine": h.machine(), "tag": a.tag, "threads": torch.get_num_threads(),
           "load_average": [round(x, 2) for x in os.getloadavg()], "rates_float32": rates("float32", texts[:32], a.tag)}
    if a.tag == "alone":
        res["matmul_gflops"] = matmul()
        res["rates_bfloat16"] = rates("bfloat16", texts[:32], a.tag)
        res["bf16_vs_float32"] = bf16_margins(texts)
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
