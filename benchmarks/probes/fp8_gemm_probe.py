"""The projections of one full pass (32,768 rows, Qwen3-4B's four shapes) in bf16 and FP8, the FP8
GEMM with and without fast accumulation (`torch._scaled_mm(..., use_fast_accum=...)`).

Hopper's FP8 tensor cores accumulate in reduced precision; without fast accumulation the kernel
adds the partial sums into float32 registers every few k-steps (slower), with it, it does not.
Each variant is timed (median of `triton.testing.do_bench`) and compared with the float32 product of
the same dequantized inputs: relative error = |y - ref| / max|ref| over the output (max and RMS).

    PYTHONPATH=. python3 benchmarks/probes/fp8_gemm_probe.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from quail_kernels.quant_ref import quant_rows  # noqa: E402

SHAPES = {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560), "down": (2560, 9728)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    torch.manual_seed(0)
    res = {"rows": a.rows, "torch": torch.__version__, "shapes": {}}
    for name, (n, k) in SHAPES.items():
        x = torch.randn(a.rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        xq, xs = quant_rows(x)
        wq, ws = quant_rows(w)
        ws = ws.t().contiguous()
        ref = (xq.float() * xs) @ (wq.float() * ws.t()).t()
        scale = ref.abs().max()
        flop = 2 * a.rows * n * k
        row = {}
        cases = {
            "bf16": lambda: x @ w.t(),
            "fp8": lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16),
            "fp8_fast_accum": lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16,
                                                       use_fast_accum=True),
        }
        for case, fn in cases.items():
            ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            r = {"ms": round(ms, 4), "tflops": round(flop / ms / 1e9, 1)}
            if case != "bf16":
                err = (fn().float() - ref).abs() / scale
                r["max_rel_err"] = float(err.max())
                r["rms_rel_err"] = float(err.pow(2).mean().sqrt())
            row[case] = r
        row["fast_vs_exact"] = round(row["fp8"]["ms"] / row["fp8_fast_accum"]["ms"], 3)
        res["shapes"][name] = row
        print(name, row, flush=True)
        del x, w, xq, wq, ref
    tot = {c: sum(res["shapes"][s][c]["ms"] for s in SHAPES) for c in ("bf16", "fp8", "fp8_fast_accum")}
    res["pass_ms"] = {c: round(v, 3) for c, v in tot.items()}
    print("one layer's projections, ms:", res["pass_ms"], flush=True)
    with open(os.path.join(a.out, "fp8_gemm_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
