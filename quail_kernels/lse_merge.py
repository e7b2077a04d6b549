"""Merge two partial attention results by their log-sum-exp.

Split attention computes, for the same queries, one result over the cached
prefix keys and one over the fresh keys. With m = max(lse_a, lse_b):
    out = (exp(lse_a - m) * out_a + exp(lse_b - m) * out_b)
          / (exp(lse_a - m) + exp(lse_b - m))
    lse = m + log(exp(lse_a - m) + exp(lse_b - m))
A part with lse = -inf attended to no key and contributes nothing (its out is
ignored, even if it holds NaN); both -inf gives out 0 and lse -inf.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels._util import FLOAT_DTYPES, block_size, check_device, check_tensor


@triton.jit
def _merge_attn_kernel(
    oa_ptr, la_ptr, ob_ptr, lb_ptr, out_ptr, lse_ptr,
    H, D,
    s_oa_t, s_oa_h, s_la_t, s_la_h, s_ob_t, s_ob_h, s_lb_t, s_lb_h, s_out_t, s_out_h, s_lse_t,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # one program per token t; out_*: [H, D], lse_*: [H] for this token
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    hmask = h < H
    la = tl.load(la_ptr + t * s_la_t + h * s_la_h, mask=hmask, other=float("-inf"))
    lb = tl.load(lb_ptr + t * s_lb_t + h * s_lb_h, mask=hmask, other=float("-inf"))
    m = tl.maximum(la, lb)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # avoids -inf - -inf = NaN
    wa = tl.exp(la - m_safe)
    wb = tl.exp(lb - m_safe)
    total = wa + wb
    lse = tl.where(total > 0.0, m_safe + tl.log(tl.where(total > 0.0, total, 1.0)), float("-inf"))
    tl.store(lse_ptr + t * s_lse_t + h, lse, mask=hmask)

    hh = h[:, None]
    dd = tl.arange(0, BLOCK_D)[None, :]
    mask = (hh < H) & (dd < D)
    oa = tl.load(oa_ptr + t * s_oa_t + hh * s_oa_h + dd, mask=mask, other=0.0).to(tl.float32)
    ob = tl.load(ob_ptr + t * s_ob_t + hh * s_ob_h + dd, mask=mask, other=0.0).to(tl.float32)
    pa = tl.where((la > float("-inf"))[:, None], wa[:, None] * oa, 0.0)
    pb = tl.where((lb > float("-inf"))[:, None], wb[:, None] * ob, 0.0)
    inv = 1.0 / tl.where(total > 0.0, total, 1.0)
    out = (pa + pb) * inv[:, None]
    tl.store(out_ptr + t * s_out_t + hh * s_out_h + dd, out.to(out_ptr.dtype.element_ty), mask=mask)


def merge_attn(out_a, lse_a, out_b, lse_b):
    """Merge partial attention outputs by log-sum-exp.

    out_a, out_b: [T, H, d] (last dim contiguous); lse_a, lse_b: float32 [T, H]
    (any strides, so a transposed [H, T] lse works). Returns (out [T, H, d] in
    out_a.dtype, lse float32 [T, H]).
    """
    check_tensor("out_a", out_a, ndim=3, dtypes=FLOAT_DTYPES)
    T, H, D = out_a.shape
    check_tensor("out_b", out_b, shape=(T, H, D), dtypes=FLOAT_DTYPES)
    check_tensor("lse_a", lse_a, shape=(T, H), dtype=torch.float32, unit_last_stride=False)
    check_tensor("lse_b", lse_b, shape=(T, H), dtype=torch.float32, unit_last_stride=False)
    check_device(out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b)
    out = torch.empty((T, H, D), dtype=out_a.dtype, device=out_a.device)
    lse = torch.empty((T, H), dtype=torch.float32, device=out_a.device)
    if T == 0 or H == 0:
        return out, lse
    BLOCK_H, BLOCK_D = block_size(H), block_size(D)
    _merge_attn_kernel[(T,)](
        out_a, lse_a, out_b, lse_b, out, lse,
        H, D,
        out_a.stride(0), out_a.stride(1), lse_a.stride(0), lse_a.stride(1),
        out_b.stride(0), out_b.stride(1), lse_b.stride(0), lse_b.stride(1),
        out.stride(0), out.stride(1), lse.stride(0),
        BLOCK_H=BLOCK_H, BLOCK_D=BLOCK_D, num_warps=4 if BLOCK_H * BLOCK_D <= 4096 else 8,
    )
    return out, lse


def merge_attn_ref(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m_safe = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    wa, wb = torch.exp(lse_a - m_safe), torch.exp(lse_b - m_safe)
    total = wa + wb
    pa = torch.where((lse_a > float("-inf"))[..., None], wa[..., None] * out_a.float(), 0.0)
    pb = torch.where((lse_b > float("-inf"))[..., None], wb[..., None] * out_b.float(), 0.0)
    safe_total = torch.where(total > 0, total, torch.ones_like(total))
    out = (pa + pb) / safe_total[..., None]
    lse = torch.where(total > 0, m_safe + torch.log(safe_total), torch.full_like(m, float("-inf")))
    return out.to(out_a.dtype), lse
