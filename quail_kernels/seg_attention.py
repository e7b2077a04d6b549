"""Attention over segments of packed rows, GQA-packed, returning the log-sum-exp.

A segment is (query rows, key rows) of the packed batch: segment s's query
rows [q_start, q_start + q_len) of `q` attend to key rows [k_start, k_start +
k_len) of `k`/`v`, either all of them (`causal=False`: a join anchor's
partners, grouped into one segment, over the anchor's cached context) or
causally (`causal=True`, q_len == k_len: a long sequence over its own keys;
query i sees keys j <= i).

Per program: BLOCK_T query tokens x REP query heads of one KV head form one
tile of BLOCK_M rows (the heads of one token are adjacent in memory), so each
key block is loaded once for REP heads, the tile is full even for short
segments, and a segment's keys stream once per (query block, KV head). Full key
blocks run without masks; with `tma=True` on a Hopper GPU they come through
tensor descriptors (the bulk copy engine).

`merge=True` merges the result, by log-sum-exp, into a partial result already
in `out`/`lse` for the same rows (e.g. the new tokens' causal attention to
themselves): the online softmax starts from it, so there is no second pass,
no gather of rows and no extra registers in the epilogue.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from quail_kernels._quant import row_scale, scaled
from quail_kernels._util import check_device, check_tensor, interpreter_active, query_blocks

LOG2E = 1.4426950408889634


@triton.jit
def _seg_step(q, acc, m_i, l_i, kb, vb, ok, sc_row, sc_mat, MASKED: tl.constexpr, FUSED: tl.constexpr):
    # sc_row / sc_mat: the logits' scale into log2 units, a scalar or per row ([BLOCK_M] / [BLOCK_M, 1],
    # float8 keys). FUSED: the raw logits are scaled inside the exponent's argument (one multiply-add per
    # logit) and P @ V accumulates into the rescaled output in the tensor-core instruction itself
    s = tl.dot(q, tl.trans(kb))
    if MASKED:
        s = tl.where(ok, s, float("-inf"))
    if FUSED:
        m_new = tl.maximum(m_i, tl.max(s, 1) * sc_row)
        p = tl.exp2(s * sc_mat - m_new[:, None])
    else:
        s = s * sc_mat
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    if FUSED:
        acc = tl.dot(p.to(vb.dtype), vb, acc * alpha[:, None])
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(vb.dtype), vb)
    return acc, m_new, l_i


@triton.jit(do_not_specialize=["n_items", "n_seg"])
def _seg_attn_kernel(
    q_ptr, k_ptr, v_ptr, k_desc, v_desc, o_ptr, lse_ptr, items_ptr, seg_ptr, amax_ptr,
    n_items, n_seg, s_qt, s_qh, s_kt, s_vt, s_ot, s_oh, s_lt, s_lh, qk_scale,
    REP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
    CAUSAL: tl.constexpr, MERGE: tl.constexpr, TMA: tl.constexpr, UPCAST: tl.constexpr, FP8: tl.constexpr,
    FUSED: tl.constexpr,
):
    item = tl.program_id(0)
    kvh = tl.program_id(1)
    g = tl.load(items_ptr + item)
    first = tl.load(items_ptr + n_items + item)
    q_lo = tl.load(seg_ptr + g)
    q_len = tl.load(seg_ptr + n_seg + g)
    k_lo = tl.load(seg_ptr + 2 * n_seg + g)
    k_len = tl.load(seg_ptr + 3 * n_seg + g)
    r = tl.arange(0, BLOCK_M)  # BLOCK_M: BLOCK_T * REP rounded up to a power of two
    tok = first + r // REP
    head = kvh * REP + r % REP
    row_ok = (tok < q_len) & (r < BLOCK_T * REP)
    dd = tl.arange(0, D)
    rows = (q_lo + tok).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * s_qt + head[:, None] * s_qh + dd[None, :], mask=row_ok[:, None], other=0.0)
    if FP8:  # float8 keys: their channel scales fold into the query, which is quantized per row
        qf = q.to(tl.float32) * row_scale(tl.load(amax_ptr + kvh * D + dd))[None, :]
        sq = row_scale(tl.max(tl.abs(qf), 1))
        q = scaled(qf, sq[:, None])
        if not UPCAST:  # (the interpreter's float8 conversion is wrong: there the query stays float32)
            q = q.to(k_ptr.dtype.element_ty)
        sc_row = sq * qk_scale
        sc_mat = sc_row[:, None]
    else:
        sc_row = qk_scale
        sc_mat = qk_scale
    if UPCAST and not FP8:  # Triton's CPU interpreter multiplies 16-bit dots wrongly
        q = q.to(tl.float32)
    o_ptrs = o_ptr + rows[:, None] * s_ot + head[:, None] * s_oh + dd[None, :]
    l_ptrs = lse_ptr + rows * s_lt + head * s_lh
    if MERGE:  # start from the partial result already there: it acts as one more key block of
        # total weight exp(lse_b) and output o_b (log2 units: m = lse_b * log2(e), l = 1, acc = o_b)
        lse_b = tl.load(l_ptrs, mask=row_ok, other=float("-inf"))
        has_b = lse_b > float("-inf")
        m_i = tl.where(has_b, lse_b * 1.4426950408889634, float("-inf"))
        l_i = tl.where(has_b, 1.0, 0.0)
        o_b = tl.load(o_ptrs, mask=row_ok[:, None], other=0.0).to(tl.float32)
        acc = tl.where(has_b[:, None], o_b, 0.0)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
    cols = tl.arange(0, BLOCK_N)
    if CAUSAL:  # keys <= first are visible to every row of the tile; the rest up to the last row's token
        n_full = (first + 1) // BLOCK_N
        hi = tl.minimum(k_len, first + BLOCK_T)
    else:
        n_full = k_len // BLOCK_N
        hi = k_len
    kp = k_ptr + (k_lo + cols).to(tl.int64)[:, None] * s_kt + kvh * D + dd[None, :]
    vp = v_ptr + (k_lo + cols).to(tl.int64)[:, None] * s_vt + kvh * D + dd[None, :]
    for j in range(0, n_full):
        if TMA:
            kb = k_desc.load([k_lo + j * BLOCK_N, kvh * D])
            vb = v_desc.load([k_lo + j * BLOCK_N, kvh * D])
        else:
            kb = tl.load(kp + j * BLOCK_N * s_kt)
            vb = tl.load(vp + j * BLOCK_N * s_vt)
        if UPCAST:
            kb = kb.to(tl.float32)
            vb = vb.to(tl.float32)
        acc, m_i, l_i = _seg_step(q, acc, m_i, l_i, kb, vb, None, sc_row, sc_mat, False, FUSED)
    for start in range(n_full * BLOCK_N, hi, BLOCK_N):  # masked blocks: the tail, or the causal diagonal
        c = start + cols
        ok = c < k_len
        kb = tl.load(kp + start * s_kt, mask=ok[:, None], other=0.0)
        vb = tl.load(vp + start * s_vt, mask=ok[:, None], other=0.0)
        if UPCAST:
            kb = kb.to(tl.float32)
            vb = vb.to(tl.float32)
        ok2 = ok[None, :]
        if CAUSAL:
            ok2 = ok2 & (c[None, :] <= tok[:, None])
        acc, m_i, l_i = _seg_step(q, acc, m_i, l_i, kb, vb, ok2, sc_row, sc_mat, True, FUSED)
    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(l_ptrs, lse, mask=row_ok)


def seg_block_t(rep: int, block_m: int = 128) -> int:
    """Query tokens per program so that tokens x query heads of one KV head fill (at most) block_m rows."""
    return max(1, block_m // rep)


def segments(q_start, q_len, k_start, k_len) -> np.ndarray:
    """int32 [4, n_seg]: (q_start, q_len, k_start, k_len) per segment."""
    return np.stack([np.asarray(x, dtype=np.int64) for x in (q_start, q_len, k_start, k_len)]).astype(np.int32)


def seg_items(q_lens, block_t: int, longest_first: bool = False) -> np.ndarray:
    """int32 [2, n_items]: (segment, first query token) of every program (quail_kernels._util.query_blocks)."""
    return query_blocks(q_lens, block_t, longest_first).astype(np.int32)


def seg_attention(q, k, v, seg, items, block_t, *, causal=False, out=None, lse=None, merge=False,
                  block_n=None, num_warps=None, num_stages=None, tma=False, amax=None, fused_step=None):
    """Attention of the query rows of each segment over its key rows (see the module docstring).

    q: [T, n_q, d]; k, v: [C, n_kv, d] (heads contiguous: stride(1) == d);
    seg: int32 [4, n_seg] from `segments`; items, block_t: from `seg_items` /
    `seg_block_t` (on q's device). Writes out [T, n_q, d] and lse float32
    [T, n_q] at the segments' query rows only (other rows untouched).
    merge=True: `out`/`lse` already hold a partial result for those rows,
    merged with this one by log-sum-exp. Returns (out, lse).
    amax: k holds float8 keys and amax [n_kv, d] their channel maxima, as quail_kernels.kv_fp8.gather_fp8
    returns them (non-causal only); the query is quantized in the kernel, v stays q's dtype.
    fused_step: the softmax step's fused form (`_seg_step`), None: where it was measured faster on the
    H200 (causal segments and float8 keys, 2-4% per call; bf16 contexts ran 2% slower with it:
    benchmarks/probes/results/h200_324259c_forms/).
    """
    check_tensor("q", q, ndim=3, dtypes=(torch.float16, torch.bfloat16, torch.float32))
    T, n_q, d = q.shape
    fp8 = amax is not None
    if fp8 and causal:
        raise ValueError("seg_attention: float8 keys are for the non-causal (context) form only")
    check_tensor("k", k, ndim=3, dtype=torch.float8_e4m3fn if fp8 else q.dtype)
    n_kv = k.shape[1]
    check_tensor("v", v, shape=tuple(k.shape), dtype=q.dtype)
    if fp8:
        check_tensor("amax", amax, shape=(n_kv, d), dtype=torch.float32)
    if n_q % n_kv or d & (d - 1) or k.shape[2] != d:
        raise ValueError(f"seg_attention: need n_q % n_kv == 0, a power-of-two head size and equal q/k sizes, "
                         f"got n_q={n_q}, n_kv={n_kv}, d={d}, k's d={k.shape[2]}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(1) != d:
            raise ValueError(f"seg_attention: {name} must have contiguous heads (stride(1) == {d}), "
                             f"got strides {tuple(t.stride())}")
    check_tensor("seg", seg, ndim=2, dtype=torch.int32)
    check_tensor("items", items, ndim=2, dtype=torch.int32)
    if seg.shape[0] != 4 or not seg.is_contiguous():
        raise ValueError(f"seg_attention: seg must be a contiguous int32 [4, n_seg], got {tuple(seg.shape)}")
    if items.shape[0] != 2 or not items.is_contiguous():
        raise ValueError(f"seg_attention: items must be a contiguous int32 [2, n_items], got {tuple(items.shape)}")
    check_device(q=q, k=k, v=v, seg=seg, items=items, **({"amax": amax} if fp8 else {}))
    rep = n_q // n_kv
    if merge and (out is None or lse is None):
        raise ValueError("seg_attention: merge=True needs the partial out and lse to merge into")
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty((T, n_q), dtype=torch.float32, device=q.device) if lse is None else lse
    check_tensor("out", out, shape=(T, n_q, d), dtype=q.dtype)
    check_tensor("lse", lse, shape=(T, n_q), dtype=torch.float32, unit_last_stride=False)
    n_items = items.shape[1]
    if n_items == 0 or T == 0:
        return out, lse
    block_m = triton.next_power_of_2(block_t * rep)
    cpu = q.device.type == "cpu"
    if block_n is None:
        block_n = 64 if cpu else 128
    if num_warps is None:
        num_warps = 8 if block_m >= 128 else 4
    if num_stages is None:
        num_stages = 2 if cpu else 3
    use_tma = bool(tma) and not cpu and not interpreter_active()
    k_desc = v_desc = None
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        k_desc = TensorDescriptor.from_tensor(k.reshape(k.shape[0], n_kv * d), [block_n, d])
        v_desc = TensorDescriptor.from_tensor(v.reshape(v.shape[0], n_kv * d), [block_n, d])
    _seg_attn_kernel[(n_items, n_kv)](
        q, k, v, k_desc, v_desc, out, lse, items, seg, amax,
        n_items, seg.shape[1], q.stride(0), q.stride(1), k.stride(0), v.stride(0),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        (1.0 / math.sqrt(d)) * LOG2E,
        REP=rep, BLOCK_T=block_t, BLOCK_M=block_m, BLOCK_N=block_n, D=d, CAUSAL=bool(causal), MERGE=bool(merge),
        TMA=use_tma, UPCAST=cpu, FP8=fp8, FUSED=bool(causal or fp8) if fused_step is None else bool(fused_step),
        num_warps=num_warps, num_stages=num_stages,
    )
    return out, lse


def seg_attention_ref(q, k, v, seg, causal=False, out=None, lse=None, merge=False):
    """float32 reference of `seg_attention` (seg may be a host array)."""
    q_start, q_len, k_start, k_len = (np.asarray(torch.as_tensor(seg).cpu()).astype(np.int64))
    T, n_q, d = q.shape
    rep = n_q // k.shape[1]
    out = torch.zeros(T, n_q, d, dtype=torch.float32) if out is None else out.float().clone()
    lse = torch.full((T, n_q), float("-inf")) if lse is None else lse.float().clone()
    for s, n, ks, kn in zip(q_start.tolist(), q_len.tolist(), k_start.tolist(), k_len.tolist()):
        if n == 0:
            continue
        qg = q[s:s + n].float().transpose(0, 1)  # [n_q, n, d]
        kg = k[ks:ks + kn].float().repeat_interleave(rep, 1).transpose(0, 1)
        vg = v[ks:ks + kn].float().repeat_interleave(rep, 1).transpose(0, 1)
        sc = qg @ kg.transpose(1, 2) / math.sqrt(d)
        if causal:
            sc = sc.masked_fill(~torch.ones(n, kn, dtype=torch.bool).tril(), float("-inf"))
        if kn:
            lse_g, o_g = torch.logsumexp(sc, -1), torch.softmax(sc, -1) @ vg
        else:
            lse_g, o_g = torch.full((n_q, n), float("-inf")), torch.zeros(n_q, n, d)
        o_g, lse_g = o_g.transpose(0, 1), lse_g.transpose(0, 1)
        if merge:
            from quail_kernels.lse_merge import merge_attn_ref

            o_g, lse_g = merge_attn_ref(o_g, lse_g, out[s:s + n], lse[s:s + n])
        out[s:s + n], lse[s:s + n] = o_g, lse_g
    return out, lse
