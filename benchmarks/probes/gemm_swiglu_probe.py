"""The MLP's gate/up projection with SiLU-and-mul in the GEMM's epilogue (Triton, tensor descriptors)
against what the engine runs (cuBLAS gate/up, then quail_kernels.silu_mul), on a pass's shape
(32,768 rows of Qwen3-4B: K = 2,560, F = 9,728, bf16); also the four projections through cuBLASLt.

The fused kernel (quail_kernels/gemm_swiglu.py) at its shipped launch and at variants of tile size,
inner step, pipeline depth and row-block grouping; each checked against float32 of the same inputs
before it is timed.

    PYTHONPATH=. python3 benchmarks/probes/gemm_swiglu_probe.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from quail_kernels.gemm_swiglu import GPU_CONFIG, gemm_swiglu, interleave_gate_up  # noqa: E402
from quail_kernels.silu_mul import silu_and_mul  # noqa: E402


VARIANTS = [
    # launches of quail_kernels.gemm_swiglu (persistent programs); `block` output columns per tile. The first
    # run (e48c12d, this script's own kernels then, probes/results/h200_e48c12d/): one program per tile ran
    # 569-648 TFLOP/s, below cuBLAS + SiLU-and-mul; persistent 645-678; warp specialization no better (and
    # not compiling at 4 warps). At 40e8010 grouping 16 row blocks beat 8 (4.76 against 4.91 ms): shipped since
    dict(block_m=128, block=128, block_k=64, num_stages=3, num_warps=8, group_m=4),
    dict(block_m=128, block=128, block_k=64, num_stages=3, num_warps=8, group_m=8),
    dict(block_m=128, block=128, block_k=128, num_stages=2, num_warps=8, group_m=8),
    dict(block_m=128, block=128, block_k=64, num_stages=4, num_warps=8, group_m=8),
    dict(block_m=256, block=64, block_k=64, num_stages=3, num_warps=8, group_m=8),
    dict(block_m=64, block=128, block_k=64, num_stages=4, num_warps=4, group_m=8),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rows", default="32768,10240")
    p.add_argument("--no-blas", action="store_true", help="skip the cuBLAS / cuBLASLt table")
    args = p.parse_args()
    dev = torch.device("cuda")
    K, F = 2560, 9728
    torch.manual_seed(0)
    w = (torch.randn(2 * F, K, device=dev) * K ** -0.5).to(torch.bfloat16)
    res = {"torch": torch.__version__, "triton": triton.__version__, "shapes": {}}
    bench = lambda fn: triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")  # noqa: E731
    for M in (int(r) for r in args.rows.split(",")):
        x = torch.randn(M, K, device=dev).to(torch.bfloat16)
        flops = 2 * M * 2 * F * K
        ref = (torch.nn.functional.silu(x.float() @ w[:F].float().T) * (x.float() @ w[F:].float().T))
        scale = ref.abs().max().item()
        row = {}
        ms = bench(lambda: torch.nn.functional.linear(x, w))
        row["cublas_gemm"] = {"ms": ms, "tflops": flops / ms / 1e9}
        ms = bench(lambda: silu_and_mul(torch.nn.functional.linear(x, w)))
        err = (silu_and_mul(torch.nn.functional.linear(x, w)).float() - ref).abs().max().item() / scale
        row["cublas_then_silu"] = {"ms": ms, "tflops": flops / ms / 1e9, "err": err}
        for v in [GPU_CONFIG] + VARIANTS:
            name = "shipped" if v is GPU_CONFIG else "_".join(f"{k}{v[k]}" for k in v)
            blk, launch = v["block"], {k: x for k, x in v.items() if k != "block"}
            try:
                w_il = interleave_gate_up(w, blk)
                y = gemm_swiglu(x, w_il, blk, launch)
                err = (y.float() - ref).abs().max().item() / scale
                ms = bench(lambda: gemm_swiglu(x, w_il, blk, launch))
                row[name] = {"ms": ms, "tflops": flops / ms / 1e9, "err": err}
            except Exception as e:  # a variant that does not compile or launch here is reported, not fatal
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(M, name, row[name], flush=True)
        res["shapes"][str(M)] = row
        print(M, "cublas", row["cublas_gemm"], row["cublas_then_silu"], flush=True)
    if not args.no_blas:
        # the four projections of a pass through cuBLAS and cuBLASLt
        M = 32768
        shapes = [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)]
        xs = {k: torch.randn(M, k, device=dev).to(torch.bfloat16) for k in (2560, 4096, 9728)}
        ws = [torch.randn(n, k, device=dev).to(torch.bfloat16) for n, k in shapes]
        blas = {}
        for lib in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(lib)
            blas[lib] = {f"{n}x{k}": bench(lambda: torch.nn.functional.linear(xs[k], wt)) for (n, k), wt in zip(shapes, ws)}
            print(lib, blas[lib], flush=True)
        torch.backends.cuda.preferred_blas_library("cublas")
        res["blas_ms"] = blas
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemm_swiglu_probe.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
