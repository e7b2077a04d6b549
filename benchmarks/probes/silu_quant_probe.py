"""SiLU-and-mul with FP8 row quantization (quail_kernels/fp8.py) against variants, on a FILTER pass's shape
(32,768 rows of Qwen3-4B's gate/up projection, F = 9,728, bf16), beside the bf16 SiLU-and-mul kernel.

The shipped kernel holds a whole row in registers (two tiles, 8,192 + 2,048 lanes); the variants stream
the row in chunks twice (absmax, then quantize: the second read hits L2). Every variant must give
the shipped kernel's bytes exactly (q and scale); `shipped_w*` is the shipped kernel at other warp
counts. At aadce04 the shipped kernel held the row as one tile of 16,384 lanes (0.62 ms); the row
as two tiles (8,192 + 2,048 lanes, `split_w*` in results/h200_aadce04/silu_quant_probe.json) took 0.40
ms, and is the shipped kernel since. GB/s counts the fewest bytes: gate/up read once,
q (1 byte) and the scale written once.

    PYTHONPATH=. python3 benchmarks/probes/silu_quant_probe.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from quail_kernels.fp8 import silu_and_mul_fp8  # noqa: E402
from quail_kernels.silu_mul import silu_and_mul  # noqa: E402


@triton.jit
def _silu_row(gu_ptr, row, stride_gu, F, cols, mask, EVICT: tl.constexpr):
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + F + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    return (g / (1.0 + tl.exp(-g)) * u).to(gu_ptr.dtype.element_ty).to(tl.float32)


@triton.jit
def _two_pass_kernel(gu_ptr, q_ptr, s_ptr, F, stride_gu, stride_q, BLOCK: tl.constexpr, HINTS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = tl.zeros([BLOCK], tl.float32)
    for lo in range(0, F, BLOCK):
        cols = lo + tl.arange(0, BLOCK)
        mask = cols < F
        y = _silu_row(gu_ptr, row, stride_gu, F, cols, mask, "evict_last" if HINTS else "")
        amax = tl.maximum(amax, tl.abs(y))
    scale = tl.maximum(tl.max(amax, axis=0), 1e-12) / 448.0
    for lo in range(0, F, BLOCK):
        cols = lo + tl.arange(0, BLOCK)
        mask = cols < F
        y = _silu_row(gu_ptr, row, stride_gu, F, cols, mask, "evict_first" if HINTS else "")
        q = tl.minimum(tl.maximum(y / scale, -448.0), 448.0)
        tl.store(q_ptr + row * stride_q + cols, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row, scale)


def shipped_warps(gate_up, warps):
    from quail_kernels.fp8 import _silu_mul_quant_kernel, two_tiles
    T, F = gate_up.shape[0], gate_up.shape[1] // 2
    q = torch.empty((T, F), dtype=torch.float8_e4m3fn, device=gate_up.device)
    s = torch.empty((T, 1), dtype=torch.float32, device=gate_up.device)
    A, B = two_tiles(F)
    _silu_mul_quant_kernel[(T,)](gate_up, q, s, F, gate_up.stride(0), q.stride(0), A=A, B=B, num_warps=warps)
    return q, s


def two_pass(gate_up, block, warps, hints):
    T, F = gate_up.shape[0], gate_up.shape[1] // 2
    q = torch.empty((T, F), dtype=torch.float8_e4m3fn, device=gate_up.device)
    s = torch.empty((T, 1), dtype=torch.float32, device=gate_up.device)
    _two_pass_kernel[(T,)](gate_up, q, s, F, gate_up.stride(0), q.stride(0), BLOCK=block, HINTS=hints,
                           num_warps=warps)
    return q, s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--f", type=int, default=9728)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    torch.manual_seed(0)
    gus = [torch.randn(a.rows, 2 * a.f, device="cuda", dtype=torch.bfloat16) * 3 for _ in range(2)]
    fewest = a.rows * (2 * a.f * 2 + a.f + 4)
    res = {"rows": a.rows, "f": a.f, "variants": {}}
    ref_q, ref_s = silu_and_mul_fp8(gus[0])
    cases = {"shipped": lambda gu: silu_and_mul_fp8(gu)}
    for block, warps in ((512, 4), (1024, 4), (1024, 8), (2048, 8), (4096, 8)):
        for hints in (False, True):
            cases[f"two_pass_b{block}_w{warps}{'_hints' if hints else ''}"] = (
                lambda gu, b=block, w=warps, h=hints: two_pass(gu, b, w, h))
    for warps in (8, 32):
        cases[f"shipped_w{warps}"] = lambda gu, w=warps: shipped_warps(gu, w)
    for name, fn in cases.items():
        try:
            q, s = fn(gus[0])
            exact = bool(torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(s, ref_s))
            i = [0]

            def call():
                i[0] ^= 1
                fn(gus[i[0]])
            ms = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median")
            res["variants"][name] = {"ms": round(ms, 4), "GB_s": round(fewest / ms / 1e6), "exact": exact}
        except Exception as e:
            res["variants"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(name, res["variants"][name], flush=True)
    ms = triton.testing.do_bench(lambda: silu_and_mul(gus[0]), warmup=25, rep=200, return_mode="median")
    res["bf16_silu_and_mul"] = {"ms": round(ms, 4), "GB_s": round(a.rows * 3 * a.f * 2 / ms / 1e6)}
    print("bf16 silu_and_mul", res["bf16_silu_and_mul"], flush=True)
    # the norms before the projections, for scale: fused add + RMSNorm, bf16 out and FP8 out
    from quail_kernels.fp8 import fused_add_rmsnorm_fp8
    from quail_kernels.rmsnorm import fused_add_rmsnorm
    x, r, w = (torch.randn(a.rows, 2560, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for name, fn in (("add_rmsnorm_bf16", fused_add_rmsnorm), ("add_rmsnorm_fp8", fused_add_rmsnorm_fp8)):
        ms = triton.testing.do_bench(lambda: fn(x, r, w[0], 1e-6), warmup=25, rep=200, return_mode="median")
        res[name] = {"ms": round(ms, 4)}
        print(name, res[name], flush=True)
    with open(os.path.join(a.out, "silu_quant_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
