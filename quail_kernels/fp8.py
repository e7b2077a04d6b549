"""FP8 (e4m3) activations for the projections: per-row scales, fused into the kernel before each GEMM.

A row x is stored as q = clamp(x / s, -448, 448) in float8_e4m3fn with
s = max|x| / 448 (float32, one per row), so x ~= q * s. Weights get the same
per-output-row scheme once; a projection is then
`torch._scaled_mm(q_x, q_w.t(), scale_a=s_x [T, 1], scale_b=s_w [1, N])` with
bf16 output (Hopper's FP8 tensor cores, about twice the bf16 rate; gpu_worker/quant.py
calls it with fast accumulation); the torch reference is quail_kernels/quant_ref.py.

The kernels here produce (q, s) where the bf16 path produces x: after RMSNorm
(rmsnorm.py, QUANT), after SiLU-and-mul, and from a plain row (the attention
output before o_proj). Each rounds x to the activation dtype first, exactly as
the bf16 path would, then quantizes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels import quant_ref
from quail_kernels._quant import finish, quant_buffers, row_scale, store_quant, store_scaled
from quail_kernels._util import FLOAT_DTYPES, block_size, check_device, check_tensor, num_warps_for
from quail_kernels.rmsnorm import _check as _check_norm
from quail_kernels.rmsnorm import _launch as _norm_launch
from quail_kernels.silu_mul import check_gate_up


@triton.jit
def _quant_rows_kernel(x_ptr, q_ptr, s_ptr, K, stride_x, stride_q, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < K
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    store_quant(q_ptr, s_ptr, row, stride_q, cols, mask, x)


@triton.jit
def _silu_row(gu_ptr, row, stride_gu, F, cols, mask):
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + F + cols, mask=mask, other=0.0).to(tl.float32)
    return (g / (1.0 + tl.exp(-g)) * u).to(gu_ptr.dtype.element_ty).to(tl.float32)


@triton.jit
def _silu_mul_quant_kernel(gu_ptr, q_ptr, s_ptr, F, stride_gu, stride_q, A: tl.constexpr, B: tl.constexpr):
    # one row per program, held in registers as two power-of-two tiles, [0, A) and [A, A + B): fewer
    # masked lanes than one tile of next_power_of_2(F) (Qwen3-4B's F = 9,728: 8,192 + 2,048 lanes
    # against 16,384; on the H200 0.40 ms against 0.62 ms for a 32,768-row pass,
    # benchmarks/probes/silu_quant_probe.py)
    row = tl.program_id(0).to(tl.int64)
    ca = tl.arange(0, A)
    cb = A + tl.arange(0, B)
    ma = ca < F
    mb = cb < F
    ya = _silu_row(gu_ptr, row, stride_gu, F, ca, ma)
    yb = _silu_row(gu_ptr, row, stride_gu, F, cb, mb)
    scale = row_scale(tl.maximum(tl.max(tl.abs(ya), axis=0), tl.max(tl.abs(yb), axis=0)))
    store_scaled(q_ptr, row, stride_q, ca, ma, ya, scale)
    store_scaled(q_ptr, row, stride_q, cb, mb, yb, scale)
    tl.store(s_ptr + row, scale)


def quant_rows(x: torch.Tensor):
    """x [T, K] -> (q float8_e4m3fn [T, K], scale float32 [T, 1]), x ~= q * scale."""
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    check_device(x=x)
    T, K = x.shape
    q, s = quant_buffers(T, K, x.device)
    if T and K:
        B = block_size(K)
        _quant_rows_kernel[(T,)](x, q, s, K, x.stride(0), q.stride(0), BLOCK=B, num_warps=num_warps_for(B))
    return finish(q, s)


def two_tiles(n: int) -> tuple[int, int]:
    """Power-of-two tiles (A, B), A + B >= n, of `_silu_mul_quant_kernel`'s row: A the largest power of
    two <= n (at least 16), B what is left, rounded up (at least 16)."""
    a = max(16, block_size(n + 1) // 2)
    return a, max(16, block_size(n - a))


def silu_and_mul_fp8(gate_up: torch.Tensor):
    """silu(gate) * up rounded to gate_up's dtype, then quantized: (q [T, F], scale [T, 1])."""
    T, F = check_gate_up(gate_up)
    q, s = quant_buffers(T, F, gate_up.device)
    if T and F:
        A, B = two_tiles(F)
        _silu_mul_quant_kernel[(T,)](gate_up, q, s, F, gate_up.stride(0), q.stride(0), A=A, B=B,
                                     num_warps=num_warps_for(A))
    return finish(q, s)


def rmsnorm_fp8(x, weight, eps):
    """rmsnorm(x) * weight (HF casts), quantized: (q [T, D], scale [T, 1])."""
    _check_norm(x, None, weight, eps)
    return _norm_launch(x, None, weight, eps, quant=True)[0]


def fused_add_rmsnorm_fp8(x, residual, weight, eps):
    """new_residual = x + residual; ((q, scale) of rmsnorm(new_residual) * weight, new_residual)."""
    _check_norm(x, residual, weight, eps)
    return _norm_launch(x, residual, weight, eps, quant=True)


quant_rows_ref = quant_ref.quant_rows  # the torch reference (also the CPU path)
