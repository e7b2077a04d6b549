"""FP8 (e4m3) rows in plain torch: the reference of the quantizing kernels (quail_kernels/fp8.py) and the CPU path.

A row x is kept as q = clamp(x / s, -448, 448) in float8_e4m3fn with one
float32 scale s = max|x| / 448 per row, so x ~= q * s. Imports no Triton.
"""
from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def quant_rows(x: torch.Tensor):
    """x [T, K] -> (q float8_e4m3fn [T, K], scale float32 [T, 1]) with x ~= q * scale."""
    xf = x.float()
    s = xf.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / FP8_MAX
    return (xf / s).clamp(-FP8_MAX, FP8_MAX).to(FP8), s
