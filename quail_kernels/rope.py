"""QK-norm + rotary embedding + KV-cache store, fused into one pass per token.

Rotary convention: Hugging Face "rotate_half" (non-interleaved). With
x1 = x[:d/2], x2 = x[d/2:] and c = cos[pos], s = sin[pos] (each [d/2]):
    out[:d/2] = x1 * c - x2 * s
    out[d/2:] = x2 * c + x1 * s
QK-norm (Qwen3) is a per-head RMSNorm over d applied before the rotation, with
LlamaRMSNorm's casting: normalised row rounded to the input dtype, times the
weight, rounded again. The rotation itself is computed in float32 and rounded
once to the dtype of q / k.

When caches are given, token t's rotated k and raw v go to row slots[t] of
k_cache / v_cache; slot -1 means "do not store". Slots outside [0, n_slots)
are skipped as well (the store is masked so a bad slot never writes out of
bounds); positions must lie in [0, max_pos).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels._util import FLOAT_DTYPES, block_size, check_device, check_tensor

INTERPRETER_BLOCK_T = 32  # tokens per program in Triton's interpreter (on the GPU: one)


@triton.jit
def _norm_rope_heads(x_ptr, x_row, w_ptr, out_ptr, out_row, j, jmask, mask, c, s, half, d, eps,
                     HAS_NORM: tl.constexpr):
    """Rows x_row of heads [BLOCK_H, d] (x_ptr names their dtype): QK-norm with weight w_ptr if HAS_NORM,
    rotated, stored at out_row; returns the two rotated halves in out's dtype."""
    x1 = tl.load(x_row + j, mask=mask, other=0.0)
    x2 = tl.load(x_row + half + j, mask=mask, other=0.0)
    if HAS_NORM:
        a1 = x1.to(tl.float32)
        a2 = x2.to(tl.float32)
        ms = (tl.sum(a1 * a1, axis=1) + tl.sum(a2 * a2, axis=1)) / d
        rstd = (1.0 / tl.sqrt(ms + eps))[:, None]
        w1 = tl.load(w_ptr + j, mask=jmask, other=0.0).to(tl.float32)
        w2 = tl.load(w_ptr + half + j, mask=jmask, other=0.0).to(tl.float32)
        x1 = (w1 * (a1 * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(x_ptr.dtype.element_ty)
        x2 = (w2 * (a2 * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(x_ptr.dtype.element_ty)
    y1 = x1.to(tl.float32)
    y2 = x2.to(tl.float32)
    o1 = (y1 * c - y2 * s).to(out_ptr.dtype.element_ty)
    o2 = (y2 * c + y1 * s).to(out_ptr.dtype.element_ty)
    tl.store(out_row + j, o1, mask=mask)
    tl.store(out_row + half + j, o2, mask=mask)
    return o1, o2


@triton.jit
def _token_rows(t0, pos_ptr, cos_ptr, sin_ptr, stride_cos, stride_sin, j, jmask, T, n_h,
                BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """Rows [BLOCK_T * BLOCK_H, 1] of (token, head) pairs from token t0: (token, head, mask, cos, sin)."""
    r = tl.arange(0, BLOCK_T * BLOCK_H)[:, None]
    t = t0 + r // BLOCK_H
    h = r % BLOCK_H
    pos = tl.load(pos_ptr + t, mask=t < T, other=0)
    c = tl.load(cos_ptr + pos * stride_cos + j, mask=jmask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos * stride_sin + j, mask=jmask, other=0.0).to(tl.float32)
    return t, h, (h < n_h) & (t < T) & jmask, c, s


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, k_ptr, v_ptr, pos_ptr, cos_ptr, sin_ptr, qw_ptr, kw_ptr,
    q_out_ptr, k_out_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    T, n_q, n_kv, d, half, n_slots, eps,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cos, stride_sin,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_kcs, stride_kch, stride_vcs, stride_vch,
    HAS_NORM: tl.constexpr, HAS_CACHE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    # one program per BLOCK_T tokens; a row of a block is one (token, head): q [BLOCK_T * BLOCK_HQ, half]
    # per half, k and v [BLOCK_T * BLOCK_HKV, half] (BLOCK_T is 1 on the GPU; in Triton's interpreter a
    # block of tokens per program saves its per-program cost)
    t0 = tl.program_id(0).to(tl.int64) * BLOCK_T
    j = tl.arange(0, BLOCK_HALF)[None, :]  # [1, BLOCK_HALF], index into a half
    jmask = j < half

    tq, hq, qmask, c, s = _token_rows(t0, pos_ptr, cos_ptr, sin_ptr, stride_cos, stride_sin, j, jmask, T, n_q,
                                      BLOCK_T, BLOCK_HQ)
    _norm_rope_heads(q_ptr, q_ptr + tq * stride_qt + hq * stride_qh, qw_ptr,
                     q_out_ptr, q_out_ptr + tq * stride_qot + hq * stride_qoh,
                     j, jmask, qmask, c, s, half, d, eps, HAS_NORM)

    tk, hk, kmask, c, s = _token_rows(t0, pos_ptr, cos_ptr, sin_ptr, stride_cos, stride_sin, j, jmask, T, n_kv,
                                      BLOCK_T, BLOCK_HKV)
    ko1, ko2 = _norm_rope_heads(k_ptr, k_ptr + tk * stride_kt + hk * stride_kh, kw_ptr,
                                k_out_ptr, k_out_ptr + tk * stride_kot + hk * stride_koh,
                                j, jmask, kmask, c, s, half, d, eps, HAS_NORM)
    if HAS_CACHE:
        slot = tl.load(slot_ptr + tk, mask=tk < T, other=-1)  # [rows, 1]
        cmask = kmask & (slot >= 0) & (slot < n_slots)
        kc_row = k_cache_ptr + slot * stride_kcs + hk * stride_kch
        tl.store(kc_row + j, ko1, mask=cmask)
        tl.store(kc_row + half + j, ko2, mask=cmask)
        v_row = v_ptr + tk * stride_vt + hk * stride_vh
        v1 = tl.load(v_row + j, mask=cmask, other=0.0)
        v2 = tl.load(v_row + half + j, mask=cmask, other=0.0)
        vc_row = v_cache_ptr + slot * stride_vcs + hk * stride_vch
        tl.store(vc_row + j, v1, mask=cmask)
        tl.store(vc_row + half + j, v2, mask=cmask)


def _check(q, k, v, positions, cos, sin, q_norm_weight, k_norm_weight, eps, k_cache, v_cache, slots):
    check_tensor("q", q, ndim=3, dtypes=FLOAT_DTYPES)
    T, n_q, d = q.shape
    if d % 2:
        raise ValueError(f"q: expected an even head size d, got d={d}")
    check_tensor("k", k, shape=(T, None, d), dtype=q.dtype)
    n_kv = k.shape[1]
    check_tensor("positions", positions, shape=(T,), dtype=torch.int64, unit_last_stride=False)
    check_tensor("cos", cos, shape=(None, d // 2), dtype=torch.float32)
    check_tensor("sin", sin, shape=cos.shape, dtype=torch.float32)
    if (q_norm_weight is None) != (k_norm_weight is None):
        raise ValueError("q_norm_weight, k_norm_weight: expected both tensors or both None, got one of each")
    if q_norm_weight is not None:
        check_tensor("q_norm_weight", q_norm_weight, shape=(d,), dtypes=FLOAT_DTYPES)
        check_tensor("k_norm_weight", k_norm_weight, shape=(d,), dtypes=FLOAT_DTYPES)
    if not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps: expected a non-negative float, got {eps!r}")
    given = [x is not None for x in (k_cache, v_cache, slots)]
    if any(given) and not all(given):
        raise ValueError(
            "k_cache, v_cache, slots: expected all three tensors or all None, got "
            + ", ".join(f"{n}={'tensor' if g else 'None'}" for n, g in zip(("k_cache", "v_cache", "slots"), given))
        )
    if v is not None:
        check_tensor("v", v, shape=(T, n_kv, d), dtype=q.dtype)
    if k_cache is not None:
        if v is None:
            raise ValueError("v: expected a [T, n_kv, d] tensor when caches are given, got None")
        check_tensor("k_cache", k_cache, shape=(None, n_kv, d), dtype=k.dtype)
        check_tensor("v_cache", v_cache, shape=k_cache.shape, dtype=v.dtype)
        check_tensor("slots", slots, shape=(T,), dtype=torch.int64, unit_last_stride=False)
    check_device(q=q, k=k, v=v, positions=positions, cos=cos, sin=sin, q_norm_weight=q_norm_weight,
                 k_norm_weight=k_norm_weight, k_cache=k_cache, v_cache=v_cache, slots=slots)


def qk_norm_rope(q, k, v, positions, cos, sin, q_norm_weight, k_norm_weight, eps, k_cache, v_cache, slots):
    """Per-head RMSNorm (optional) + rotary embedding of q and k; store k, v.

    q: [T, n_q, d], k, v: [T, n_kv, d] (last dim contiguous, any token/head
    strides, so views of a fused qkv projection work); positions, slots: int64
    [T]; cos, sin: float32 [max_pos, d/2]; norm weights: [d] or None;
    k_cache, v_cache: [n_slots, n_kv, d] or None (written in place).
    Returns (q_out [T, n_q, d], k_out [T, n_kv, d]), new contiguous tensors.
    """
    _check(q, k, v, positions, cos, sin, q_norm_weight, k_norm_weight, eps, k_cache, v_cache, slots)
    T, n_q, d = q.shape
    n_kv = k.shape[1]
    q_out = torch.empty((T, n_q, d), dtype=q.dtype, device=q.device)
    k_out = torch.empty((T, n_kv, d), dtype=k.dtype, device=k.device)
    if T == 0:
        return q_out, k_out
    has_norm = q_norm_weight is not None
    has_cache = k_cache is not None
    # placeholders for absent optional pointers; never read (constexpr-gated)
    qw, kw = (q_norm_weight, k_norm_weight) if has_norm else (q, q)
    kc, vc, sl, vv = (k_cache, v_cache, slots, v) if has_cache else (k_out, k_out, positions, k)
    BLOCK_HQ, BLOCK_HKV, BLOCK_HALF = block_size(n_q), block_size(n_kv), block_size(d // 2)
    BLOCK_T = 1 if q.device.type == "cuda" else INTERPRETER_BLOCK_T
    sq, sk, sv = q.stride(), k.stride(), vv.stride()
    sqo, sko, skc, svc = q_out.stride(), k_out.stride(), kc.stride(), vc.stride()
    _qk_norm_rope_kernel[(triton.cdiv(T, BLOCK_T),)](
        q, k, vv, positions, cos, sin, qw, kw,
        q_out, k_out, kc, vc, sl,
        T, n_q, n_kv, d, d // 2, kc.shape[0], float(eps),
        sq[0], sq[1], sk[0], sk[1], sv[0], sv[1],
        cos.stride(0), sin.stride(0),
        sqo[0], sqo[1], sko[0], sko[1],
        skc[0], skc[1], svc[0], svc[1],
        HAS_NORM=has_norm, HAS_CACHE=has_cache,
        BLOCK_T=BLOCK_T, BLOCK_HQ=BLOCK_HQ, BLOCK_HKV=BLOCK_HKV, BLOCK_HALF=BLOCK_HALF,
        num_warps=4 if BLOCK_HQ * BLOCK_HALF <= 2048 else 8,
    )
    return q_out, k_out


def _head_rmsnorm_ref(x, weight, eps):
    h = x.float()
    normed = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (weight * normed).to(x.dtype)


def _rotate_ref(x, cos_t, sin_t):
    # x: [T, H, d]; cos_t, sin_t: [T, 1, d/2] float32
    half = x.shape[-1] // 2
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    return torch.cat((x1 * cos_t - x2 * sin_t, x2 * cos_t + x1 * sin_t), dim=-1).to(x.dtype)


def qk_norm_rope_ref(q, k, v, positions, cos, sin, q_norm_weight, k_norm_weight, eps, k_cache, v_cache, slots):
    if q_norm_weight is not None:
        q = _head_rmsnorm_ref(q, q_norm_weight, eps)
        k = _head_rmsnorm_ref(k, k_norm_weight, eps)
    cos_t, sin_t = cos[positions][:, None, :], sin[positions][:, None, :]
    q_out, k_out = _rotate_ref(q, cos_t, sin_t), _rotate_ref(k, cos_t, sin_t)
    if k_cache is not None:
        keep = (slots >= 0) & (slots < k_cache.shape[0])
        k_cache[slots[keep]] = k_out[keep].to(k_cache.dtype)
        v_cache[slots[keep]] = v[keep].to(v_cache.dtype)
    return q_out, k_out
