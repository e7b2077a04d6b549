"""The GEMMs of a decode step at its batch (Qwen3-4B shapes, bf16): the fused SwiGLU gate/up GEMM
(quail_kernels.gemm_swiglu) under several launch settings against its defaults and cuBLAS, and cuBLAS's
other projections, in TFLOP/s (CUDA events, the median of 50 runs after 5).

    PYTHONPATH=. python benchmarks/probes/decode_gemm_probe.py --out DIR [--rows 416,448,2048]
"""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import importlib

import torch

gs = importlib.import_module("quail_kernels.gemm_swiglu")  # (the package exports a function of that name)

K, F, Q, KV, D = 2560, 9728, 32, 8, 128


def timed(fn, reps: int = 50) -> float:
    for _ in range(5):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in ev)[reps // 2] / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", default="416,448,2048")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    w = (torch.randn(2 * F, K, device=dev, dtype=torch.bfloat16) * 0.02)
    block = gs.gate_up_block(w)
    wi = gs.interleave_gate_up(w, block)
    res = {"commit": args.commit, "gpu": torch.cuda.get_device_name(dev), "block": block, "rows": {}}
    configs = [dict(zip(("block_m", "block_k", "num_stages", "num_warps", "group_m"), c)) for c in itertools.product(
        (64, 128), (64, 128), (3, 4), (4, 8), (16,))]
    for m in map(int, args.rows.split(",")):
        x = torch.randn(m, K, device=dev, dtype=torch.bfloat16)
        ref = gs.gemm_swiglu(x, wi, block)
        fl = 2 * m * K * 2 * F
        row = {"default": fl / timed(lambda: gs.gemm_swiglu(x, wi, block)) / 1e12,
               "cublas_gate_up": fl / timed(lambda: x @ w.t()) / 1e12}
        for c in configs:
            if c["block_m"] == 128 and c["block_k"] == 128 and c["num_stages"] == 4:
                continue  # (shared memory)
            name = "m{block_m}_k{block_k}_s{num_stages}_w{num_warps}".format(**c)
            try:
                out = gs.gemm_swiglu(x, wi, block, c)
                err = float((out.float() - ref.float()).abs().max())
                row[name] = fl / timed(lambda: gs.gemm_swiglu(x, wi, block, c)) / 1e12
                row[name + "_err"] = err
            except Exception as e:  # a setting that does not fit (shared memory): recorded
                row[name] = f"{type(e).__name__}: {str(e)[:120]}"
        for nm, n_out, k_in in (("qkv", (Q + 2 * KV) * D, K), ("o", K, Q * D), ("down", K, F)):
            wt = torch.randn(n_out, k_in, device=dev, dtype=torch.bfloat16) * 0.02
            xi = torch.randn(m, k_in, device=dev, dtype=torch.bfloat16)
            row["cublas_" + nm] = 2 * m * n_out * k_in / timed(lambda: xi @ wt.t()) / 1e12
        res["rows"][m] = row
        best = max((k for k, v in row.items() if isinstance(v, float) and not k.endswith("_err")
                    and not k.startswith("cublas_")), key=row.get)
        print(m, "default %.0f" % row["default"], "best", best, "%.0f" % row[best],
              "cublas gate/up %.0f qkv %.0f o %.0f down %.0f" % tuple(
                  row["cublas_" + k] for k in ("gate_up", "qkv", "o", "down")), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_gemm_probe.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
