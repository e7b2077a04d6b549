"""What every kernel that emits FP8 rows shares (quail_kernels/fp8.py, quail_kernels/rmsnorm.py with QUANT).

A row y is stored as q = clamp(y / s, -448, 448) in float8_e4m3fn with one
float32 scale s = max|y| / 448 per row (quail_kernels/quant_ref.py is the torch
reference). Triton's CPU interpreter converts to float8 wrongly (124.3 -> 64:
the mantissa carry is lost), so there the kernels write the scaled row in
float32 and torch casts it (`quant_buffers` / `finish`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels._util import interpreter_active

FP8 = torch.float8_e4m3fn


@triton.jit
def row_scale(amax):
    """The scale of a row whose largest |value| is amax."""
    return tl.maximum(amax, 1e-12) / 448.0


@triton.jit
def scaled(y, scale):
    """y / scale clamped to e4m3's range (still float32)."""
    return tl.minimum(tl.maximum(y / scale, -448.0), 448.0)


@triton.jit
def store_scaled(q_ptr, row, stride_q, cols, mask, y, scale):
    """Store y / scale (clamped to e4m3's range) at the row's columns `cols`."""
    tl.store(q_ptr + row * stride_q + cols, scaled(y, scale).to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def store_quant(q_ptr, s_ptr, row, stride_q, cols, mask, y):
    """Quantize the float32 row y (already rounded to the activation dtype) and store (q, scale)."""
    scale = row_scale(tl.max(tl.abs(y), axis=0))
    store_scaled(q_ptr, row, stride_q, cols, mask, y, scale)
    tl.store(s_ptr + row, scale)


def buffer_dtype() -> torch.dtype:
    """What a quantizing kernel writes: float8, or float32 in the interpreter (torch casts after)."""
    return torch.float32 if interpreter_active() else FP8


def quant_buffers(T: int, K: int, device):
    """(q, scale) output buffers of a quantizing kernel: [T, K] and float32 [T, 1]."""
    return (torch.empty((T, K), dtype=buffer_dtype(), device=device),
            torch.empty((T, 1), dtype=torch.float32, device=device))


def finish(q: torch.Tensor, s: torch.Tensor):
    """(q as float8, scale) from the buffers a kernel filled."""
    return (q.to(FP8), s) if q.dtype != FP8 else (q, s)
