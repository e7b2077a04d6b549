"""Whether an operation's first full-size call loses its time in the projections' cuBLAS products.

One process per variant (run it once per variant): the engine, the public benchmark's warm-up, then JOIN
8 x 1,000 twice and BIO-2 16 anchors twice (fresh texts every call), each call's wall and the host seconds
spent inside the projections' products (`ops.linear`, `ops.linear_add`; no synchronization added: a
product that blocks the host shows here). The process's module loading mode is read back from the driver
(cuModuleGetLoadingMode: 1 eager, 2 lazy). --warm-step N: before the calls, every product shape of a
layer runs once at each row count N, 2N, ... up to the token budget (what an engine could do at start).

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/first_call_gemms.py --tokenizer .cache/tok --label base --out $OUT
    CUDA_MODULE_LOADING=EAGER PYTHONPATH=.:benchmarks python3 benchmarks/probes/first_call_gemms.py ... --label eager
    PYTHONPATH=.:benchmarks python3 benchmarks/probes/first_call_gemms.py ... --warm-step 128 --label warm128

--quantize fp8: the FP8 engine. Runs: results/h200_cca0706/ (base, eager, warm128) and results/h200_1bcd82b/
(the engine of 1bcd82b, which ran this warm-up at start with a 128-row step, in bf16 and FP8; reverted after).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from public_bench import Words, timed  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402


def loading_mode() -> int | None:
    try:
        mode = ctypes.c_int(0)
        rc = ctypes.CDLL("libcuda.so.1").cuModuleGetLoadingMode(ctypes.byref(mode))
        return mode.value if rc == 0 else -rc
    except (OSError, AttributeError):
        return None


def host_timers(ops):
    """Wrap the engine's product calls with host-time accumulators (no device synchronization)."""
    acc = {"linear_s": 0.0, "linear_calls": 0, "linear_add_s": 0.0, "linear_add_calls": 0}
    for name in ("linear", "linear_add"):
        fn = getattr(ops, name)

        def timed_fn(*a, _fn=fn, _name=name):
            t0 = time.perf_counter()
            out = _fn(*a)
            acc[f"{_name}_s"] += time.perf_counter() - t0
            acc[f"{_name}_calls"] += 1
            return out

        setattr(ops, name, timed_fn)
    return acc


def warm_grid(eng, step: int) -> dict:
    """Every projection shape of layer 0 once at row counts step, 2 step, ..., the token budget."""
    attn, mlp = eng.runner.model.model.layers[0].self_attn, eng.runner.model.model.layers[0].mlp
    ws = [attn.qkv_weight, attn.o_proj.weight, mlp.down_proj.weight]
    dev, budget = eng.rt.device, eng.rt.token_budget
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    n = 0
    for m in range(step, budget + 1, step):
        for w in ws:
            x = torch.zeros(m, w.shape[1], device=dev, dtype=w.dtype)
            x @ w.t()
            torch.zeros(m, w.shape[0], device=dev, dtype=w.dtype).addmm_(x, w.t())
            n += 2
    torch.cuda.synchronize(dev)
    return {"products": n, "shapes": [list(w.shape) for w in ws], "s": time.perf_counter() - t0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--model", default="qwen3-4b-random")
    ap.add_argument("--label", default="base")
    ap.add_argument("--warm-step", type=int, default=0)
    ap.add_argument("--quantize", default=None)
    ap.add_argument("--out", default="/tmp/first_call_gemms")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"label": a.label, "quantize": a.quantize, "env_CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
           "env_QUAIL_WARM_PRODUCTS": os.environ.get("QUAIL_WARM_PRODUCTS")}
    t0 = time.perf_counter()
    eng = Engine(EngineConfig(model=a.model, device="cuda", tokenizer=a.tokenizer, quantize=a.quantize))
    res["load_s"] = time.perf_counter() - t0
    res["loading_mode"] = loading_mode()
    w = Words(eng.tokenizer, 1)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)  # public_bench's warm-up
    eng.filter(w.texts(64, 300), [wl.QUESTION])
    eng.filter(w.texts(160, 300), [wl.QUESTION])
    if a.warm_step:
        res["warm"] = warm_grid(eng, a.warm_step)
    acc = host_timers(eng.runner.ops)
    res["calls"] = []
    partners_b, partners_j = w.partners(1127), w.partners(1000)
    for name, make, partners in (("JOIN 8x1000", lambda: w.texts(8, 5000), partners_j),
                                 ("JOIN 8x1000", lambda: w.texts(8, 5000), partners_j),
                                 ("BIO-2 16", lambda: w.texts(16, 5000), partners_b),
                                 ("BIO-2 16", lambda: w.texts(16, 5000), partners_b)):
        anchors = make()
        for k in acc:
            acc[k] = 0
        _, st = timed(eng, eng.rt.device, lambda: eng.join(anchors, partners, wl.JOIN_QUESTION))
        row = {"call": name, "wall_s": st["wall_s"], "passes": st["forward_passes"], **dict(acc)}
        res["calls"].append(row)
        print(a.label, row, flush=True)
    print(a.label, "loading mode", res["loading_mode"], "load_s", round(res["load_s"], 1), res.get("warm"), flush=True)
    (out / f"first_call_gemms_{a.label}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
