"""A pass's cached context K/V gathered from the KV pool into float8 (e4m3), for kernels.seg_attention.

The context keys of a join pass (each anchor's cached tokens, read by all its partners) are
gathered once per layer. Here they are gathered straight into float8 with one float32 scale per
(KV head, channel) over the whole gather: s = max|x| / 448 over the gathered rows, x ~= q * s.
A channel scale factors out of both products of attention: for K it folds into the query
(q . k = sum_d (q_d s_d) k8_d), for V into the output (sum_j p_j v_jd = s_d sum_j p_j v8_jd).
V is written transposed, [n_kv, d, C] (C padded to 16), so that each key block is the K-major
operand Hopper's FP8 tensor cores need in P @ V. The engine's FP8 path gathers the keys alone
(`values=False`: V stays 16-bit): with float8 values Triton 3.6's kernel ran slower than bf16 on
the H200 (benchmarks/probes/results/h200_829e812/fp8_attn_probe.json).

Two launches: the channels' absolute maxima (atomic max over row blocks), then the quantized
copy. Both read the pool through the slot indices, as `index_select` would.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._quant import FP8, row_scale
from kernels._util import check_device, check_tensor, interpreter_active

ROWS = 64  # gathered rows per program


@triton.jit
def _load_rows(ptr, slots, ok, stride, h, D: tl.constexpr):
    dd = tl.arange(0, D)
    return tl.load(ptr + slots[:, None] * stride + h * D + dd[None, :], mask=ok[:, None], other=0.0).to(tl.float32)


@triton.jit
def _amax_kernel(k_ptr, v_ptr, slots_ptr, amax_ptr, C, s_k, s_v, n_kv, ROWS: tl.constexpr, D: tl.constexpr,
                 VALUES: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    h = tl.program_id(1)
    ok = r < C
    slots = tl.load(slots_ptr + r, mask=ok, other=0).to(tl.int64)
    dd = tl.arange(0, D)
    k = _load_rows(k_ptr, slots, ok, s_k, h, D)
    tl.atomic_max(amax_ptr + h * D + dd, tl.max(tl.abs(k), 0))
    if VALUES:
        v = _load_rows(v_ptr, slots, ok, s_v, h, D)
        tl.atomic_max(amax_ptr + (n_kv + h) * D + dd, tl.max(tl.abs(v), 0))


@triton.jit
def _quant_kernel(k_ptr, v_ptr, slots_ptr, amax_ptr, k8_ptr, vt8_ptr, C, Cp, s_k, s_v, n_kv,
                  ROWS: tl.constexpr, D: tl.constexpr, VALUES: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    h = tl.program_id(1)
    ok = r < C
    slots = tl.load(slots_ptr + r, mask=ok, other=0).to(tl.int64)
    dd = tl.arange(0, D)
    ks = row_scale(tl.load(amax_ptr + h * D + dd))
    k = _load_rows(k_ptr, slots, ok, s_k, h, D)
    kq = tl.minimum(tl.maximum(k / ks[None, :], -448.0), 448.0)
    tl.store(k8_ptr + r.to(tl.int64)[:, None] * (n_kv * D) + h * D + dd[None, :], kq.to(k8_ptr.dtype.element_ty),
             mask=ok[:, None])
    if VALUES:
        vs = row_scale(tl.load(amax_ptr + (n_kv + h) * D + dd))
        v = _load_rows(v_ptr, slots, ok, s_v, h, D)
        vq = tl.trans(tl.minimum(tl.maximum(v / vs[None, :], -448.0), 448.0))  # [D, ROWS]
        tl.store(vt8_ptr + (h * D + dd).to(tl.int64)[:, None] * Cp + r[None, :], vq.to(vt8_ptr.dtype.element_ty),
                 mask=ok[None, :])


def padded(c: int) -> int:
    """Row length of the transposed V: C rounded up to 16 bytes (a tensor descriptor's stride)."""
    return -(-c // 16) * 16


def gather_fp8(k_cache, v_cache, slots, values: bool = True):
    """k_cache, v_cache [S, n_kv, d] (16-bit or float32, heads contiguous); slots int [C] ->
    (k8 float8 [C, n_kv, d], vt8 float8 [n_kv, d, Cp], amax float32 [2, n_kv, d]): the gathered rows,
    V transposed, and the channels' absolute maxima (scale = max(amax, 1e-12) / 448, kernels._quant).
    values=False: float8 keys only; V comes back gathered as it is ([C, n_kv, d]), amax[1] zero."""
    check_tensor("k_cache", k_cache, ndim=3, dtypes=(torch.float16, torch.bfloat16, torch.float32))
    S, n_kv, d = k_cache.shape
    check_tensor("v_cache", v_cache, shape=(None, n_kv, d), dtype=k_cache.dtype)
    check_tensor("slots", slots, ndim=1, dtypes=(torch.int32, torch.int64))
    if d & (d - 1):
        raise ValueError(f"gather_fp8: need a power-of-two head size, got d={d}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(1) != d:
            raise ValueError(f"gather_fp8: {name} must have contiguous heads (stride(1) == {d}), "
                             f"got strides {tuple(t.stride())}")
    dev = check_device(k_cache=k_cache, v_cache=v_cache, slots=slots)
    C = slots.shape[0]
    cp = padded(C)
    # Triton's interpreter converts to float8 wrongly (kernels/_quant.py): there the kernel writes
    # the scaled values in float32 and torch casts them
    buf = torch.float32 if interpreter_active() else FP8
    k8 = torch.empty((C, n_kv, d), dtype=buf, device=dev)
    if not values:
        vt8 = None
    elif cp != C:
        vt8 = torch.zeros((n_kv, d, cp), dtype=buf, device=dev)
    else:
        vt8 = torch.empty((n_kv, d, cp), dtype=buf, device=dev)
    amax = torch.zeros((2, n_kv, d), dtype=torch.float32, device=dev)
    if C:
        grid = (triton.cdiv(C, ROWS), n_kv)
        args = (k_cache, v_cache, slots, amax)
        _amax_kernel[grid](*args, C, k_cache.stride(0), v_cache.stride(0), n_kv, ROWS=ROWS, D=d, VALUES=values,
                           num_warps=4)
        _quant_kernel[grid](*args, k8, vt8, C, cp, k_cache.stride(0), v_cache.stride(0), n_kv, ROWS=ROWS, D=d,
                            VALUES=values, num_warps=4)
    if not values:
        return k8.to(FP8) if buf != FP8 else k8, v_cache.index_select(0, slots), amax
    if buf != FP8:
        k8, vt8 = k8.to(FP8), vt8.to(FP8)
    return k8, vt8, amax


def gather_fp8_ref(k_cache, v_cache, slots, values: bool = True):
    """torch reference of `gather_fp8`."""
    idx = slots.long()
    k, v = k_cache.index_select(0, idx).float(), v_cache.index_select(0, idx).float()
    amax = torch.stack([k.abs().amax(0), v.abs().amax(0)]) if len(idx) else \
        torch.zeros((2,) + tuple(k_cache.shape[1:]), device=k_cache.device)
    if not values:
        amax[1] = 0
        return (k / (amax[0].clamp_min(1e-12) / 448.0)).clamp(-448, 448).to(FP8), v_cache.index_select(0, idx), amax
    s = amax.clamp_min(1e-12) / 448.0
    k8 = (k / s[0]).clamp(-448, 448).to(FP8)
    vt = (v / s[1]).clamp(-448, 448).permute(1, 2, 0)
    vt8 = torch.zeros(vt.shape[:2] + (padded(len(idx)),), dtype=FP8, device=k_cache.device)
    vt8[..., :len(idx)] = vt.to(FP8)
    return k8, vt8, amax


def dequant(k8, vt8, amax, C):
    """float32 (k, v) [C, n_kv, d] of a gather: what the FP8 attention computes with (vt8 may be the
    16-bit V of values=False)."""
    s = amax.clamp_min(1e-12) / 448.0
    if vt8.dtype != FP8:
        return k8.float() * s[0], vt8.float()
    return k8.float() * s[0], vt8[..., :C].float().permute(2, 0, 1) * s[1]
