"""Decode attention on the paged KV pool: one new token per sequence, keys read in place by slot.

A decode step's queries are one token per sequence. Each sequence's keys are
listed as segments of a flat slot list: a segment is (its query sequences, a
run of slots). A document's KV shared by the sequences forking from it is ONE
segment over all of them (read once per step for the group, the cascade /
Hydragen form); the rest of each sequence's context (its own prompt words
and generated tokens) is a segment of its own. `plan_decode` cuts segments
into work items of at most `qb` sequences and `chunk` keys (split-K: short
batches still fill the GPU); each item writes a partial result (output and
log-sum-exp) per sequence, and a combine kernel merges a sequence's partials
by their log-sum-exp.

Both kernels read their work list and counts from device memory and run a
fixed grid (items past `n_items` do nothing), so a step's launches can be
captured once in a CUDA graph and replayed with new lists.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from quail_kernels._util import block_size, check_device, check_tensor, interpreter_active

LOG2E = 1.4426950408889634
CHUNK = 256  # keys per work item (split-K)
# keys per inner step; the launcher's default 2 warps and 2 stages: on an H100, GENERATE-shaped steps (416
# sequences of 330 keys) read 2.30 TB/s against 1.90 with 4 warps, EXTRACT-shaped ones (8 sequences under
# each 1,000-key document) 1.83 against 1.50 (benchmarks/probes/results/decode_attn_sweep_h100.json)
BLOCK_N = 64
QB_ROWS = 32  # query rows per program: qb sequences x their query heads of one KV head
# where no segment has several sequences (no shared document), fewer rows: on an H100, GENERATE-shaped steps
# read 2.36 TB/s with 16 rows against 2.22 with 32; EXTRACT-shaped ones (8 forks a document) need 32
# (1.66 against 1.53) (benchmarks/probes/results/decode_attn_sweep_h100_980f870.json)
SOLO_ROWS = 16
PERSISTENT = 1024  # programs per KV head of the fixed grid (each takes every 1024th item)


def seqs_per_item(rep: int, shared: bool = True) -> int:
    """Query sequences per work item: `QB_ROWS` rows of `rep` heads each where a segment may hold several
    sequences, else `SOLO_ROWS` (at least one sequence)."""
    return max(1, (QB_ROWS if shared else SOLO_ROWS) // rep)


@triton.jit
def _decode_part_kernel(
    q_ptr, k_ptr, v_ptr, slots_ptr, items_ptr, n_items_ptr, po_ptr, pl_ptr,
    cap, n_kv, s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, qk_scale,
    REP: tl.constexpr, QB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # persistent over the work list: program i takes items i, i + programs, ... below the count on the
    # device (a grid fixed for a CUDA graph launches no program per empty slot of the list)
    kvh = tl.program_id(1)
    for item in range(tl.program_id(0), tl.load(n_items_ptr), tl.num_programs(0)):
        _decode_item(q_ptr, k_ptr, v_ptr, slots_ptr, items_ptr, po_ptr, pl_ptr, item, kvh,
                     cap, n_kv, s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, qk_scale, REP, QB, BLOCK_M, BLOCK_N, D, UPCAST)


@triton.jit
def _decode_item(
    q_ptr, k_ptr, v_ptr, slots_ptr, items_ptr, po_ptr, pl_ptr, item, kvh,
    cap, n_kv, s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, qk_scale,
    REP: tl.constexpr, QB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    q_lo = tl.load(items_ptr + item)
    q_n = tl.load(items_ptr + cap + item)
    k_lo = tl.load(items_ptr + 2 * cap + item)
    k_n = tl.load(items_ptr + 3 * cap + item)
    p_lo = tl.load(items_ptr + 4 * cap + item)
    r = tl.arange(0, BLOCK_M)  # row r: sequence r // REP of the item, query head kvh * REP + r % REP
    j = r // REP
    h = r % REP
    row_ok = (j < q_n) & (r < QB * REP)
    dd = tl.arange(0, D)
    qrow = (q_lo + j).to(tl.int64)
    q = tl.load(q_ptr + qrow[:, None] * s_qt + (kvh * REP + h)[:, None] * s_qh + dd[None, :],
                mask=row_ok[:, None], other=0.0)
    if UPCAST:  # Triton's CPU interpreter multiplies 16-bit dots wrongly
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, k_n, BLOCK_N):
        c = start + cols
        ok = c < k_n
        slot = tl.load(slots_ptr + k_lo + c, mask=ok, other=0).to(tl.int64)
        kb = tl.load(k_ptr + slot[:, None] * s_kt + kvh * s_kh + dd[None, :], mask=ok[:, None], other=0.0)
        vb = tl.load(v_ptr + slot[:, None] * s_vt + kvh * s_vh + dd[None, :], mask=ok[:, None], other=0.0)
        if UPCAST:
            kb = kb.to(tl.float32)
            vb = vb.to(tl.float32)
        s = tl.dot(q, tl.trans(kb)) * qk_scale
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(vb.dtype), vb)
        m_i = m_new
    has = l_i > 0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) / 1.4426950408889634, float("-inf"))
    prow = (p_lo + j).to(tl.int64) * n_kv + kvh  # partial row of (sequence, KV head): REP heads x D
    tl.store(po_ptr + (prow * REP + h)[:, None] * D + dd[None, :], o, mask=row_ok[:, None])
    tl.store(pl_ptr + prow * REP + h, lse, mask=row_ok)



@triton.jit
def _decode_combine_kernel(
    po_ptr, pl_ptr, ptr_ptr, ent_ptr, out_ptr, n_kv, s_ot, s_oh,
    REP: tl.constexpr, REP_P2: tl.constexpr, D: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    lo = tl.load(ptr_ptr + b)
    hi = tl.load(ptr_ptr + b + 1)
    rr = tl.arange(0, REP_P2)
    rok = rr < REP
    dd = tl.arange(0, D)
    m = tl.full([REP_P2], float("-inf"), tl.float32)
    l = tl.zeros([REP_P2], tl.float32)
    acc = tl.zeros([REP_P2, D], tl.float32)
    for e in range(lo, hi):
        prow = tl.load(ent_ptr + e).to(tl.int64) * n_kv + kvh
        lse = tl.load(pl_ptr + prow * REP + rr, mask=rok, other=float("-inf"))
        o = tl.load(po_ptr + (prow * REP + rr)[:, None] * D + dd[None, :], mask=rok[:, None], other=0.0)
        m_new = tl.maximum(m, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        w = tl.exp(lse - m_safe)
        acc = acc * alpha[:, None] + w[:, None] * o
        l = l * alpha + w
        m = m_new
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    optr = out_ptr + b.to(tl.int64) * s_ot + (kvh * REP + rr)[:, None] * s_oh + dd[None, :]
    tl.store(optr, out.to(out_ptr.dtype.element_ty), mask=rok[:, None])


class DecodePlan:
    """A decode step's work list (host, numpy): items int64 [5, n] (first query sequence, sequences, first
    slot, slots, first partial row), ptr int64 [n_seq + 1] and ents int64 [n_ent] (each sequence's partial
    rows, CSR), and the number of partial rows."""

    __slots__ = ("items", "ptr", "ents", "n_partials")

    def __init__(self, items, ptr, ents, n_partials):
        self.items, self.ptr, self.ents, self.n_partials = items, ptr, ents, n_partials


def plan_decode(q_lo, q_n, k_lo, k_n, n_seq: int, qb: int, chunk: int = CHUNK) -> DecodePlan:
    """The work list of segments (int arrays: query sequences [q_lo, q_lo + q_n) attend to the slots
    [k_lo, k_lo + k_n) of the flat slot list) over `n_seq` sequences: segments of more than `qb`
    sequences split into blocks of `qb`, keys into chunks of `chunk` (an empty segment still one item)."""
    q_lo, q_n, k_lo, k_n = (np.asarray(x, dtype=np.int64) for x in (q_lo, q_n, k_lo, k_n))
    nb = (q_n + qb - 1) // qb  # query blocks per segment
    seg = np.repeat(np.arange(len(q_lo)), nb)
    blk = np.arange(int(nb.sum())) - np.repeat(np.cumsum(nb) - nb, nb)
    bq_lo = q_lo[seg] + blk * qb
    bq_n = np.minimum(qb, q_n[seg] - blk * qb)
    bk_lo, bk_n = k_lo[seg], k_n[seg]
    nc = np.maximum(1, (bk_n + chunk - 1) // chunk)  # key chunks per block
    it = np.repeat(np.arange(len(bq_lo)), nc)
    ch = np.arange(int(nc.sum())) - np.repeat(np.cumsum(nc) - nc, nc)
    iq_lo, iq_n = bq_lo[it], bq_n[it]
    ik_lo = bk_lo[it] + ch * chunk
    ik_n = np.clip(bk_n[it] - ch * chunk, 0, chunk)
    ip_lo = np.cumsum(iq_n) - iq_n
    n_part = int(iq_n.sum())
    # each partial row's sequence, then the rows of each sequence in order (CSR)
    row_seq = np.repeat(iq_lo - ip_lo, iq_n) + np.arange(n_part)
    ents = np.argsort(row_seq, kind="stable")
    ptr = np.zeros(n_seq + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_seq, minlength=n_seq)[:n_seq], out=ptr[1:])
    return DecodePlan(np.stack([iq_lo, iq_n, ik_lo, ik_n, ip_lo]), ptr, ents.astype(np.int64), n_part)


def decode_attention(q, k_cache, v_cache, slots, items, n_items, ptr, ents, part_o, part_lse, out=None,
                     programs: int = 0, qb: int = 0, block_n: int = BLOCK_N, num_warps: int = 2,
                     num_stages: int = 2):
    """Attention of one query token per sequence over its segments' keys (module docstring).

    q: [B, n_q, d]; k_cache, v_cache: [n_slots, n_kv, d]; slots: int64 flat slot list; items: int64 [5, cap]
    (`DecodePlan.items` in its first columns; cap fixes the grid); n_items: int64 [1]; ptr: int64 [B + 1]; ents:
    int64 partial rows; part_o float32 [P, n_kv, rep, d] and part_lse float32 [P, n_kv, rep]: scratch for P >= the
    plan's partial rows; programs: programs per KV head, each taking every so many items (default min(cap,
    PERSISTENT): a fixed grid, for a CUDA graph); qb: the plan's sequences per item (default `seqs_per_item(rep)`);
    block_n, num_warps, num_stages: the item kernel's keys per inner step and launch settings. Returns out [B, n_q,
    d] (q's dtype); a sequence with no partial row gets zeros. Nothing here reads a device value on the host.
    """
    check_device(q=q, k_cache=k_cache, v_cache=v_cache, slots=slots, items=items, part_o=part_o)
    B, n_q, d = q.shape
    n_kv = k_cache.shape[1]
    check_tensor("q", q, ndim=3)
    check_tensor("k_cache", k_cache, shape=(None, n_kv, d))
    check_tensor("v_cache", v_cache, shape=(None, n_kv, d))
    check_tensor("items", items, ndim=2, dtype=torch.int64)
    check_tensor("ptr", ptr, shape=(B + 1,), dtype=torch.int64)
    rep = n_q // n_kv
    if rep * n_kv != n_q:
        raise ValueError(f"q: {n_q} query heads is not a multiple of the {n_kv} KV heads")
    check_tensor("part_o", part_o, shape=(None, n_kv, rep, d), dtype=torch.float32)
    check_tensor("part_lse", part_lse, shape=(part_o.shape[0], n_kv, rep), dtype=torch.float32)
    if out is None:
        out = torch.empty_like(q)
    qb = qb or seqs_per_item(rep)
    upcast = interpreter_active()
    cap = items.shape[1]
    _decode_part_kernel[(programs or min(cap, PERSISTENT), n_kv)](
        q, k_cache, v_cache, slots, items, n_items, part_o, part_lse,
        cap, n_kv, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0),
        v_cache.stride(1), LOG2E / math.sqrt(d),
        REP=rep, QB=qb, BLOCK_M=max(16, block_size(qb * rep)), BLOCK_N=block_n, D=d, UPCAST=upcast,
        num_warps=num_warps, num_stages=num_stages)
    _decode_combine_kernel[(B, n_kv)](
        part_o, part_lse, ptr, ents, out, n_kv, out.stride(0), out.stride(1),
        REP=rep, REP_P2=block_size(rep), D=d, num_warps=4 if d >= 128 else 2)
    return out


def decode_attention_ref(q, k_cache, v_cache, keys: list[torch.Tensor]) -> torch.Tensor:
    """Plain-torch reference: sequence b attends (float32) to the slots `keys[b]` (empty: zeros)."""
    B, n_q, d = q.shape
    n_kv = k_cache.shape[1]
    rep = n_q // n_kv
    out = torch.zeros_like(q)
    for b, sl in enumerate(keys):
        if sl.numel() == 0:
            continue
        k = k_cache.index_select(0, sl).float().repeat_interleave(rep, 1)  # [C, n_q, d]
        v = v_cache.index_select(0, sl).float().repeat_interleave(rep, 1)
        s = torch.einsum("hd,chd->hc", q[b].float(), k) / math.sqrt(d)
        out[b] = torch.einsum("hc,chd->hd", s.softmax(-1), v).to(q.dtype)
    return out
