"""Causal (or unmasked) attention of short packed sequences, GQA-packed, returning the log-sum-exp.

Sequence s's query rows [cu_q[s], cu_q[s+1]) attend to its key rows [cu_k[s],
cu_k[s+1]): causally (`causal=True`, a sequence over its own new keys: query
i sees keys j <= i) or all of them. Per program (item, KV head): `block_t`
query tokens x the REP query heads of that KV head form one tile, so even
thousands of 13-token sequences (a join's partners) run as few, full programs.

A short cached context per sequence (the chat frame every filter prompt
shares, or a context read by one sequence only) can be read in the same
program before the sequence's own keys (`kf`, `vf`, `fold`): every key of it
is visible, and there is no second call and no merge.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from quail_kernels._util import check_device, check_tensor

LOG2E = 1.4426950408889634


@triton.jit
def _attend_keys(q, acc, m_i, l_i, k_ptr, v_ptr, k_lo, hi, kvh, tok, s_kt, s_kh, s_vt, s_vh, qk_scale,
                 BLOCK_N: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """Online softmax of q [BLOCK_M, D] over keys [k_lo, k_lo + hi) of head kvh."""
    dd = tl.arange(0, D)
    for start in range(0, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < hi
        k_rows = (k_lo + cols).to(tl.int64)
        kb = tl.load(k_ptr + k_rows[:, None] * s_kt + kvh * s_kh + dd[None, :],
                     mask=col_ok[:, None], other=0.0)  # [BLOCK_N, D]
        vb = tl.load(v_ptr + k_rows[:, None] * s_vt + kvh * s_vh + dd[None, :],
                     mask=col_ok[:, None], other=0.0)
        if UPCAST:  # Triton's CPU interpreter multiplies 16-bit dots wrongly
            kb = kb.to(tl.float32)
            vb = vb.to(tl.float32)
        s = tl.dot(q, tl.trans(kb)) * qk_scale  # log2 units
        ok = col_ok[None, :]
        if CAUSAL:
            ok = ok & (cols[None, :] <= tok[:, None])
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(vb.dtype), vb)
        m_i = m_new
    return acc, m_i, l_i

# per-pass counts: specializing on them (== 1, % 16) would recompile mid-run
@triton.jit(do_not_specialize=["n_seq", "n_items"])
def _varlen_attn_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, items_ptr, cu_q_ptr, cu_k_ptr,
    kf_ptr, vf_ptr, fold_ptr, n_seq,
    n_items, s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_ot, s_oh, s_lt, s_lh,
    s_kft, s_kfh, s_vft, s_vfh, qk_scale,
    REP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_FOLD: tl.constexpr, UPCAST: tl.constexpr,
):
    # program (item, kv head): BLOCK_T query tokens x REP query heads = BLOCK_M rows
    # row r <-> token first + r // REP, head kvh * REP + r % REP; keys of head kvh
    item = tl.program_id(0)
    kvh = tl.program_id(1)
    seq = tl.load(items_ptr + item)
    first = tl.load(items_ptr + n_items + item)
    q_lo = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_lo
    k_lo = tl.load(cu_k_ptr + seq)
    k_len = tl.load(cu_k_ptr + seq + 1) - k_lo
    r = tl.arange(0, BLOCK_M)  # BLOCK_T * REP rounded up to a power of two (REP = 3: SmolLM2)
    tok = first + r // REP
    head = kvh * REP + r % REP
    row_ok = (tok < q_len) & (r < BLOCK_T * REP)
    dd = tl.arange(0, D)
    q_rows = (q_lo + tok).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * s_qt + head[:, None] * s_qh + dd[None, :],
                mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    if HAS_FOLD:  # the sequence's short cached context: every key visible
        f_lo = tl.load(fold_ptr + seq)
        f_len = tl.load(fold_ptr + n_seq + seq)
        acc, m_i, l_i = _attend_keys(q, acc, m_i, l_i, kf_ptr, vf_ptr, f_lo, f_len, kvh, tok,
                                     s_kft, s_kfh, s_vft, s_vfh, qk_scale, BLOCK_N, D, False, UPCAST)
    hi = k_len
    if CAUSAL:  # own keys: j visible to token i iff j <= i
        hi = tl.minimum(k_len, first + BLOCK_T)
    acc, m_i, l_i = _attend_keys(q, acc, m_i, l_i, k_ptr, v_ptr, k_lo, hi, kvh, tok,
                                 s_kt, s_kh, s_vt, s_vh, qk_scale, BLOCK_N, D, CAUSAL, UPCAST)
    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(o_ptr + q_rows[:, None] * s_ot + head[:, None] * s_oh + dd[None, :],
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_ptr + q_rows * s_lt + head * s_lh, lse, mask=row_ok)


def varlen_attention(q, k, v, items, cu_q, cu_k, block_t: int, causal: bool, out=None, lse=None, kf=None,
                     vf=None, fold=None, launch: dict | None = None):
    """q: [Tq, n_q, d]; k, v: [Tk, n_kv, d] -> (out [Tq, n_q, d], lse float32 [Tq, n_q]).

    items: int32 [2, n_items] (sequence, first query token) per program, blocks of
    `block_t` tokens (quail_kernels._util.query_blocks); cu_q, cu_k: int32 [n_seq + 1]
    row offsets of each sequence's queries and keys. Only the rows of `items` are
    written. kf, vf, fold: folded contexts (keys [F, n_kv, d] and per sequence
    (first row, length) int32 [2, n_seq]). launch: block_n / num_warps /
    num_stages over the defaults below.
    """
    check_tensor("q", q, ndim=3, dtypes=(torch.float16, torch.bfloat16, torch.float32))
    check_tensor("items", items, ndim=2, dtype=torch.int32)
    check_device(q=q, k=k, v=v, items=items, cu_q=cu_q, cu_k=cu_k)
    Tq, n_q, d = q.shape
    n_kv = k.shape[1]
    if n_q % n_kv or d & (d - 1) or q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError(f"varlen_attention: expected n_q % n_kv == 0, power-of-two d and unit last "
                         f"strides, got n_q={n_q}, n_kv={n_kv}, d={d}")
    rep = n_q // n_kv
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty((Tq, n_q), dtype=torch.float32, device=q.device) if lse is None else lse
    n_items = items.shape[1]
    if Tq == 0 or n_items == 0:
        return out, lse
    has_fold = fold is not None
    kf, vf, fold = (kf, vf, fold) if has_fold else (k, v, cu_q)
    block_m = triton.next_power_of_2(block_t * rep)
    cfg = {"block_n": 64 if block_m >= 128 else 32, "num_warps": 8 if block_m >= 128 else 4, "num_stages": 3,
           **(launch or {})}
    _varlen_attn_kernel[(n_items, n_kv)](
        q, k, v, out, lse, items, cu_q, cu_k, kf, vf, fold, cu_q.shape[0] - 1,
        n_items, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        kf.stride(0), kf.stride(1), vf.stride(0), vf.stride(1),
        (1.0 / math.sqrt(d)) * LOG2E,
        REP=rep, BLOCK_T=block_t, BLOCK_M=block_m, BLOCK_N=cfg["block_n"], D=d, CAUSAL=causal,
        HAS_FOLD=has_fold, UPCAST=q.device.type == "cpu", num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return out, lse


def varlen_attention_ref(q, k, v, cu_q, cu_k, causal: bool, kf=None, vf=None, fold=None):
    """float32 reference of `varlen_attention` over every row (host tensors or arrays for the offsets)."""
    cu_q, cu_k = (torch.as_tensor(x).cpu().long().tolist() for x in (cu_q, cu_k))
    fold = None if fold is None else torch.as_tensor(fold).cpu().long()
    T, n_q, d = q.shape
    rep = n_q // k.shape[1]
    out = torch.zeros(T, n_q, d, dtype=torch.float32)
    lse = torch.full((T, n_q), float("-inf"))
    for s in range(len(cu_q) - 1):
        q0, n, k0, kn = cu_q[s], cu_q[s + 1] - cu_q[s], cu_k[s], cu_k[s + 1] - cu_k[s]
        if n == 0:
            continue
        keys, vals = k[k0:k0 + kn].float(), v[k0:k0 + kn].float()
        ok = torch.ones(n, kn, dtype=torch.bool).tril() if causal else torch.ones(n, kn, dtype=torch.bool)
        if fold is not None and fold[1, s] > 0:
            f0, fn = int(fold[0, s]), int(fold[1, s])
            keys = torch.cat([kf[f0:f0 + fn].float(), keys])
            vals = torch.cat([vf[f0:f0 + fn].float(), vals])
            ok = torch.cat([torch.ones(n, fn, dtype=torch.bool), ok], dim=1)
        qg = q[q0:q0 + n].float().transpose(0, 1)  # [n_q, n, d]
        kg, vg = (x.repeat_interleave(rep, 1).transpose(0, 1) for x in (keys, vals))
        sc = (qg @ kg.transpose(1, 2) / math.sqrt(d)).masked_fill(~ok, float("-inf"))
        lse_g = torch.logsumexp(sc, -1)
        o_g = torch.where(torch.isfinite(lse_g)[..., None], torch.softmax(sc, -1).nan_to_num(0.0) @ vg, 0.0)
        out[q0:q0 + n], lse[q0:q0 + n] = o_g.transpose(0, 1), lse_g.transpose(0, 1)
    return out, lse
