"""The short-sequence causal kernel (quail_kernels.varlen_attention) with whole key blocks unmasked ("split")
against every block masked, on a FILTER pass and in the engine.

Kernel: a FILTER pass's causal attention (100 documents of 300-359 tokens, each after a 30-token folded
frame; Qwen3-4B heads, 32 query / 8 KV, d = 128, bf16), each launch checked against the masked kernel
(max abs diff of out and lse) and timed (do_bench median); TFLOP/s = 4 * d * n_q * pairs / time.
Engine: FILTER 2,048 x 300 words and JOIN 8 x 1,000 through the public API, the two kernels alternating
in one process on fresh texts (quail_kernels.varlen_attention.SPLIT_BLOCKS), after a warm-up of each.

    PYTHONPATH=. python3 benchmarks/probes/varlen_split_probe.py --tokenizer .cache/tok --out $OUT   # at a6390e0

Result (H200, probes/results/h200_a6390e0/): the split kernel was slower, 0.535 ms against 0.508 ms for the
masked one (198 against 209 TFLOP/s); 64-key steps or 32-token tiles 0.71-0.75 ms; in the engine no
difference beyond the run-to-run spread (FILTER medians 7.753 / 7.746 s, JOIN 1.961 / 1.941 s). The
split was removed after this run: the kernel's `launch["split"]` exists at a6390e0 only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_workloads as wl  # noqa: E402
from public_bench import Words  # noqa: E402

import importlib  # noqa: E402

va = importlib.import_module("quail_kernels.varlen_attention")  # the module (the package exports its function)
from quail_kernels._util import query_blocks  # noqa: E402

VARIANTS = {  # name: (block_t, launch)
    "masked_t16_n32_w4": (16, {"split": False, "block_n": 32, "num_warps": 4}),
    "split_t16_n32_w4": (16, {"split": True, "block_n": 32, "num_warps": 4}),
    "split_t16_n64_w4": (16, {"split": True, "block_n": 64, "num_warps": 4}),
    "split_t32_n64_w8": (32, {"split": True, "block_n": 64, "num_warps": 8}),
    "masked_t32_n64_w8": (32, {"split": False, "block_n": 64, "num_warps": 8}),
    "split_t32_n32_w4": (32, {"split": True, "block_n": 32, "num_warps": 4}),
    "split_t16_n32_w4_s4": (16, {"split": True, "block_n": 32, "num_warps": 4, "num_stages": 4}),
}


def kernel_part() -> dict:
    dev = torch.device("cuda")
    rng = np.random.default_rng(0)
    n_doc, F, nq, nkv, d = 100, 30, 32, 8, 128
    lens = rng.integers(300, 360, n_doc)
    cu = np.concatenate([[0], np.cumsum(lens)])
    T = int(cu[-1])
    q = torch.randn(T, nq, d, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(T, 2 * nkv, d, device=dev, dtype=torch.bfloat16)  # k and v as views, as the engine has them
    k, v = kv[:, :nkv], kv[:, nkv:]
    kf, vf = (torch.randn(F, nkv, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    cu32 = torch.tensor(cu, device=dev, dtype=torch.int32)
    fold = torch.tensor(np.stack([np.zeros(n_doc), np.full(n_doc, F)]).ravel(), device=dev,
                        dtype=torch.int32).view(2, -1)
    flops = 4 * nq * d * int(sum(n * (n + 1) // 2 + n * F for n in lens))
    res, base = {}, None
    for name, (bt, launch) in VARIANTS.items():
        items = torch.from_numpy(query_blocks(lens, bt, longest_first=True)).to(torch.int32).to(dev)
        f = lambda: va.varlen_attention(q, k, v, items, cu32, cu32, bt, True, kf=kf, vf=vf, fold=fold,  # noqa: E731
                                        launch=launch)
        r = res[name] = {}
        try:
            o, lse = f()
            if base is None:
                base = (o.float(), lse)
            r["max_abs_diff_out"] = float((o.float() - base[0]).abs().max())
            r["max_abs_diff_lse"] = float((lse - base[1]).abs().max())
            r["ms"] = [round(float(triton.testing.do_bench(f, warmup=25, rep=200)), 4) for _ in range(2)]
            r["tflops"] = round(flops / (min(r["ms"]) * 1e-3) / 1e12, 1)
        except Exception as e:  # noqa: BLE001 (a launch that does not compile is recorded)
            r["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        print(name, json.dumps(r), flush=True)
    return {"docs": n_doc, "fold": F, "tokens": T, "flops": flops, "variants": res}


def engine_part(tokenizer: str, reps: int) -> dict:
    from gpu_worker import Engine, EngineConfig

    eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda", tokenizer=tokenizer))

    def timed(fn):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return round(time.perf_counter() - t, 3)

    for split in (False, True):  # warm-up as public_bench, with each kernel
        va.SPLIT_BLOCKS = split
        w = Words(eng.tokenizer, 1 + split)
        eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)
        eng.filter(w.texts(64, 300), [wl.QUESTION])
        eng.filter(w.texts(160, 300), [wl.QUESTION])
    rows = []
    partners = Words(eng.tokenizer, 5).partners(1000)
    for rep in range(reps):
        for split in ((True, False) if rep % 2 else (False, True)):
            va.SPLIT_BLOCKS = split
            wr = Words(eng.tokenizer, 100 + 2 * rep + split)
            docs = wr.texts(2048, 300)
            f = timed(lambda: eng.filter(docs, [wl.QUESTION]))
            anchors = wr.texts(8, 5000)
            j = timed(lambda: eng.join(anchors, partners, wl.JOIN_QUESTION))
            rows.append({"rep": rep, "split": split, "filter_s": f, "join_s": j})
            print(rows[-1], flush=True)
    va.SPLIT_BLOCKS = True
    out = {"runs": rows}
    for split in (False, True):
        out[f"filter_median_split_{split}"] = float(np.median([r["filter_s"] for r in rows if r["split"] == split]))
        out[f"join_median_split_{split}"] = float(np.median([r["join_s"] for r in rows if r["split"] == split]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    res = {"commit": a.commit, "device": torch.cuda.get_device_name(), "kernel": kernel_part()}
    res["engine"] = engine_part(a.tokenizer, a.reps)
    print(json.dumps({k: v for k, v in res["engine"].items() if k != "runs"}), flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "varlen_split_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
