"""A pass's cached context keys gathered from the KV pool into float8 (e4m3), for quail_kernels.seg_attention.

The context keys of a join pass (each anchor's cached tokens, read by all its partners) are
gathered once per layer. Here they are gathered straight into float8 with one float32 scale per
(KV head, channel) over the whole gather: s = max|k| / 448 over the gathered rows, k ~= k8 * s.
A channel scale folds into the query (q . k = sum_d (q_d s_d) k8_d), which seg_attention then
quantizes per row, so the scores come from Hopper's FP8 tensor cores. The values stay 16-bit: with
float8 values (V transposed, the K-major operand of P @ V) Triton 3.6's kernel ran at less than half
the bf16 rate on the H200 and stopped with an illegal instruction through tensor descriptors
(benchmarks/probes/results/h200_829e812/fp8_attn_probe.json, the code at 829e812).

Two launches: the channels' absolute maxima (atomic max over row blocks), then the quantized
copy. Both read the pool through the slot indices, as `index_select` would.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels._quant import FP8, buffer_dtype, row_scale, store_scaled
from quail_kernels._util import check_device, check_tensor

ROWS = 64  # gathered rows per program


@triton.jit
def _rows(k_ptr, slots_ptr, C, s_k, ROWS: tl.constexpr, D: tl.constexpr):
    """This program's gathered rows of KV head program_id(1): (row numbers, mask, float32 [ROWS, D])."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    h = tl.program_id(1)
    ok = r < C
    slots = tl.load(slots_ptr + r, mask=ok, other=0).to(tl.int64)
    dd = tl.arange(0, D)
    k = tl.load(k_ptr + slots[:, None] * s_k + h * D + dd[None, :], mask=ok[:, None], other=0.0)
    return r, ok, k.to(tl.float32)


@triton.jit(do_not_specialize=["C"])  # every pass has its own context length: one kernel for all of them
def _amax_kernel(k_ptr, slots_ptr, amax_ptr, C, s_k, ROWS: tl.constexpr, D: tl.constexpr):
    _, _, k = _rows(k_ptr, slots_ptr, C, s_k, ROWS, D)
    tl.atomic_max(amax_ptr + tl.program_id(1) * D + tl.arange(0, D), tl.max(tl.abs(k), 0))


@triton.jit(do_not_specialize=["C"])
def _quant_kernel(k_ptr, slots_ptr, amax_ptr, k8_ptr, C, s_k, s_8, ROWS: tl.constexpr, D: tl.constexpr):
    r, ok, k = _rows(k_ptr, slots_ptr, C, s_k, ROWS, D)
    cols = tl.program_id(1) * D + tl.arange(0, D)
    ks = row_scale(tl.load(amax_ptr + cols))
    store_scaled(k8_ptr, r.to(tl.int64)[:, None], s_8, cols[None, :], ok[:, None], k, ks[None, :])


def gather_fp8(k_cache, slots):
    """k_cache [S, n_kv, d] (16-bit or float32, heads contiguous); slots int [C] ->
    (k8 float8 [C, n_kv, d], amax float32 [n_kv, d]): the gathered rows and the channels' absolute
    maxima (scale = max(amax, 1e-12) / 448, quail_kernels._quant.row_scale)."""
    check_tensor("k_cache", k_cache, ndim=3, dtypes=(torch.float16, torch.bfloat16, torch.float32))
    S, n_kv, d = k_cache.shape
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32, torch.int64))
    if d & (d - 1):
        raise ValueError(f"gather_fp8: need a power-of-two head size, got d={d}")
    if k_cache.stride(1) != d:
        raise ValueError(f"gather_fp8: k_cache must have contiguous heads (stride(1) == {d}), "
                         f"got strides {tuple(k_cache.stride())}")
    dev = check_device(k_cache=k_cache, slots=slots)
    C = slots.shape[0]
    k8 = torch.empty((C, n_kv, d), dtype=buffer_dtype(), device=dev)
    amax = torch.zeros((n_kv, d), dtype=torch.float32, device=dev)
    if C:
        grid = (triton.cdiv(C, ROWS), n_kv)
        _amax_kernel[grid](k_cache, slots, amax, C, k_cache.stride(0), ROWS=ROWS, D=d, num_warps=4)
        _quant_kernel[grid](k_cache, slots, amax, k8, C, k_cache.stride(0), n_kv * d, ROWS=ROWS, D=d, num_warps=4)
    return k8.to(FP8), amax


def gather_fp8_ref(k_cache, slots):
    """torch reference of `gather_fp8`."""
    k = k_cache.index_select(0, slots.long()).float()
    amax = k.abs().amax(0) if len(slots) else torch.zeros(k_cache.shape[1:], device=k_cache.device)
    return (k / (amax.clamp_min(1e-12) / 448.0)).clamp(-448, 448).to(FP8), amax


def dequant(k8, amax):
    """float32 keys [C, n_kv, d] of a gather: what the FP8 attention computes its scores with."""
    return k8.float() * (amax.clamp_min(1e-12) / 448.0)
