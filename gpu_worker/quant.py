"""FP8 (e4m3) projections in plain torch: weight and row quantization, the scaled GEMM.

A row x is kept as q = clamp(x / s, -448, 448) in float8_e4m3fn with one
float32 scale s = max|x| / 448 per row (per token for activations, per output
channel for weights), so x ~= q * s. A projection is
`torch._scaled_mm(q_x, q_w.t(), scale_a=s_x [T, 1], scale_b=s_w [1, N], use_fast_accum=True)`:
Hopper's FP8 tensor cores at about twice the bf16 rate. Fast accumulation keeps the partial sums in
the tensor cores' own accumulator instead of adding them into float32 registers every few k-steps:
on the H200 a pass's four projections take 5.17 ms instead of 5.78 (`benchmarks/probes/fp8_gemm_probe.py`,
RMS error against the float32 product 3.4e-4 against 2.9e-4 of the output's largest value), and the
margins' signs agree with bf16 as before (BENCHMARKS.md). Rows are quantized by
quail_kernels/quant_ref.py (the reference of quail_kernels/fp8.py's kernels); this is the CPU path.
"""
from __future__ import annotations

import torch



def quant_rows(x: torch.Tensor):
    """x [T, K] -> (q float8_e4m3fn [T, K], scale float32 [T, 1]): quail_kernels/quant_ref.py (imported on the first
    FP8 call: importing the kernels package imports Triton, which the bf16 CPU path never needs)."""
    from quail_kernels.quant_ref import quant_rows as ref

    return ref(x)


def quantize_weight(w: torch.Tensor):
    """[N, K] weight -> (q float8 [N, K], scale float32 [1, N]): one scale per output row."""
    q, s = quant_rows(w)
    return q, s.t().contiguous()


def fp8_linear(xq, wq, out_dtype: torch.dtype) -> torch.Tensor:
    """Quantized rows (q, scale) times a quantized weight (q, scale [1, N]), transposed: [T, N]."""
    (q, s), (w8, ws) = xq, wq
    if q.shape[0] == 0:  # a pass with no answer rows: the last layer's output projections are empty
        return q.new_zeros((0, w8.shape[0]), dtype=out_dtype)
    if q.device.type == "cpu":  # the same products in float32 (CPU _scaled_mm takes one scale per tensor only)
        return ((q.float() * s) @ (w8.float() * ws.t()).t()).to(out_dtype)
    return torch._scaled_mm(q, w8.t(), scale_a=s, scale_b=ws, out_dtype=out_dtype, use_fast_accum=True)
