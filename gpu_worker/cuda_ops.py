"""CUDA ops: the Triton kernels of kernels/ and split attention on the device.

Same interface and semantics as `ops.TorchOps`. Split attention per forward
pass (see attention.py) runs as two variable-length calls over the whole
packed batch, whatever the number of sequences:

- self part: every sequence's new tokens attend causally to themselves;
- context part: the new tokens of each group (sequences sharing one cached
  context, e.g. an anchor's partners) form ONE query sequence that attends,
  without a mask, to the group's context keys, gathered once per layer from
  the KV cache. A context is read once per group, not once per sequence.

The two partial results merge by log-sum-exp (kernels.merge_attn). Each part
runs on flash attention (torch's FA2 through `aten._flash_attention_forward`,
grouped-query heads native) or on the Triton kernel below, which packs the
query heads sharing a KV head into one tile (fewer, fuller programs for
many short sequences). `prepare_meta` builds all index tensors once per pass
with one host-to-device copy; the attention itself never syncs the host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .attention import AttnMeta, split_attention_torch
from .ops import TorchOps

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: CudaOps falls back to torch everywhere
    triton = None

FLASH_DTYPES = (torch.bfloat16, torch.float16)
SHORT_SEQ = 32  # self part: sequences up to this length go to the Triton kernel ("auto")


@dataclass
class AttnPart:
    """One variable-length attention call: query sequences against key sequences."""

    cu_q: torch.Tensor  # int32 [n + 1] offsets into the query rows of this part
    cu_k: torch.Tensor  # int32 [n + 1] offsets into its key rows
    max_q: int
    max_k: int
    items: torch.Tensor  # int32 [2, n_items] (sequence, first query token) per Triton program
    block_t: int  # query tokens per Triton program


@dataclass
class AttnPlan:
    """Device metadata of one pass (built by `build_plan`, shared by all layers)."""

    self_part: AttnPart
    ctx_part: AttnPart | None
    ctx_lo: int  # tokens with a context are rows [ctx_lo, T) when ctx_rows is None
    ctx_rows: torch.Tensor | None  # int64 rows of those tokens when not one contiguous range
    ctx_slots: torch.Tensor | None  # int64 [sum C] context slots of every group, concatenated


def _blocks(lens: np.ndarray, block_t: int, longest_first: bool) -> np.ndarray:
    """[2, n_items] (sequence, first token) of query blocks of `block_t` tokens."""
    nblk = (lens + block_t - 1) // block_t
    seq = np.repeat(np.arange(len(lens), dtype=np.int64), nblk)
    first = np.arange(int(nblk.sum()), dtype=np.int64) - np.repeat(np.cumsum(nblk) - nblk, nblk)
    start = first * block_t
    if longest_first:  # causal: blocks deep in a sequence see the most keys; start those first
        order = np.argsort(-start, kind="stable")
        seq, start = seq[order], start[order]
    return np.stack([seq, start])


def _block_t(max_q: int, rep: int) -> int:
    """Query tokens per Triton program: rep * block_t rows fill a 64- or 128-row tile."""
    rows = 64 if max_q * rep <= 64 else 128
    return max(1, rows // rep)


def build_plan(meta: AttnMeta, device, n_rep: int) -> AttnPlan:
    """Index tensors of both attention parts for one pass (one host-to-device copy).

    n_rep: query heads per KV head (sets the Triton query block).
    """
    cu = np.asarray(meta.cu_seqlens, dtype=np.int64)
    lens = np.diff(cu)
    self_bt = _block_t(int(lens.max()) if len(lens) else 1, n_rep)
    arrays = [cu, np.zeros(0, np.int64), _blocks(lens, self_bt, longest_first=True).ravel()]
    ctx_groups = [g for g in meta.groups if g.ctx_slots is not None and g.ctx_slots.numel() > 0]
    ctx_rows = None
    ctx_lo = int(cu[-1])
    if ctx_groups:
        q_len = np.array([g.tok_hi - g.tok_lo for g in ctx_groups], dtype=np.int64)
        k_len = np.array([g.ctx_slots.numel() for g in ctx_groups], dtype=np.int64)
        cu_q = np.concatenate([[0], np.cumsum(q_len)])
        cu_k = np.concatenate([[0], np.cumsum(k_len)])
        ctx_bt = _block_t(int(q_len.max()), n_rep)
        arrays += [cu_q, cu_k, _blocks(q_len, ctx_bt, longest_first=False).ravel()]
        contiguous = all(a.tok_hi == b.tok_lo for a, b in zip(ctx_groups, ctx_groups[1:]))
        if contiguous and ctx_groups[-1].tok_hi == cu[-1]:
            ctx_lo = ctx_groups[0].tok_lo
        else:
            rows = np.concatenate([np.arange(g.tok_lo, g.tok_hi) for g in ctx_groups])
            arrays.append(rows)
    sizes = [len(a) for a in arrays]
    packed = torch.from_numpy(np.concatenate(arrays).astype(np.int64))
    if torch.device(device).type == "cuda":
        packed = packed.pin_memory().to(device, non_blocking=True)
    parts, off = [], 0
    for n in sizes:
        parts.append(packed[off:off + n])
        off += n
    i32 = lambda t: t.to(torch.int32)  # noqa: E731  (one small cast kernel each, no sync)
    self_part = AttnPart(i32(parts[0]), i32(parts[0]), int(lens.max()) if len(lens) else 0,
                         int(lens.max()) if len(lens) else 0, i32(parts[2]).view(2, -1), self_bt)
    ctx_part, ctx_slots = None, None
    if ctx_groups:
        ctx_part = AttnPart(i32(parts[3]), i32(parts[4]), int(q_len.max()), int(k_len.max()),
                            i32(parts[5]).view(2, -1), ctx_bt)
        if len(parts) > 6:
            ctx_rows = parts[6]
        ctx_slots = torch.cat([g.ctx_slots for g in ctx_groups]) if len(ctx_groups) > 1 else ctx_groups[0].ctx_slots
    return AttnPlan(self_part, ctx_part, ctx_lo, ctx_rows, ctx_slots)


# --- Triton attention ------------------------------------------------------------------------

if triton is not None:

    @triton.jit
    def _varlen_attn_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, items_ptr, cu_q_ptr, cu_k_ptr,
        n_items, s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_ot, s_oh, s_lt, s_lh, qk_scale,
        REP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
        CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
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
        BLOCK_M: tl.constexpr = BLOCK_T * REP
        r = tl.arange(0, BLOCK_M)
        tok = first + r // REP
        head = kvh * REP + r % REP
        row_ok = tok < q_len
        dd = tl.arange(0, D)
        q_rows = (q_lo + tok).to(tl.int64)
        q = tl.load(q_ptr + q_rows[:, None] * s_qt + head[:, None] * s_qh + dd[None, :],
                    mask=row_ok[:, None], other=0.0)
        if UPCAST:  # Triton's CPU interpreter multiplies 16-bit dots wrongly
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        hi = k_len
        if CAUSAL:  # self part: key j visible to token i iff j <= i
            hi = tl.minimum(k_len, first + BLOCK_T)
        for start in range(0, hi, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < hi
            k_rows = (k_lo + cols).to(tl.int64)
            kt = tl.load(k_ptr + k_rows[None, :] * s_kt + kvh * s_kh + dd[:, None],
                         mask=col_ok[None, :], other=0.0)  # [D, BLOCK_N]
            if UPCAST:
                kt = kt.to(tl.float32)
            s = tl.dot(q, kt) * qk_scale  # log2 units
            ok = col_ok[None, :]
            if CAUSAL:
                ok = ok & (cols[None, :] <= tok[:, None])
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            vt = tl.load(v_ptr + k_rows[:, None] * s_vt + kvh * s_vh + dd[None, :],
                         mask=col_ok[:, None], other=0.0)  # [BLOCK_N, D]
            if UPCAST:
                vt = vt.to(tl.float32)
            acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
            m_i = m_new
        has = l_i > 0.0
        out = acc / tl.where(has, l_i, 1.0)[:, None]
        lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
        tl.store(o_ptr + q_rows[:, None] * s_ot + head[:, None] * s_oh + dd[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
        tl.store(lse_ptr + q_rows * s_lt + head * s_lh, lse, mask=row_ok)


def triton_varlen_attention(q, k, v, part: AttnPart, causal: bool):
    """q: [Tq, n_q, d]; k, v: [Tk, n_kv, d] -> (out [Tq, n_q, d], lse float32 [Tq, n_q])."""
    Tq, n_q, d = q.shape
    n_kv = k.shape[1]
    if n_q % n_kv or d & (d - 1) or q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError(f"triton attention: expected n_q % n_kv == 0, power-of-two d and unit last "
                         f"strides, got n_q={n_q}, n_kv={n_kv}, d={d}")
    rep = n_q // n_kv
    out = torch.empty_like(q)
    lse = torch.empty((Tq, n_q), dtype=torch.float32, device=q.device)
    n_items = part.items.shape[1]
    if Tq == 0 or n_items == 0:
        return out, lse
    block_m = part.block_t * rep
    _varlen_attn_kernel[(n_items, n_kv)](
        q, k, v, out, lse, part.items, part.cu_q, part.cu_k,
        n_items, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        (1.0 / math.sqrt(d)) * 1.4426950408889634,
        REP=rep, BLOCK_T=part.block_t, BLOCK_N=64 if block_m >= 128 else 32, D=d, CAUSAL=causal,
        UPCAST=q.device.type == "cpu",
        num_warps=8 if block_m >= 128 else 4, num_stages=3 if block_m >= 128 else 2,
    )
    return out, lse


_FLASH_GQA = [True]  # cleared if this torch's flash attention refuses fewer KV heads


def flash_varlen_attention(q, k, v, part: AttnPart, causal: bool):
    """torch's flash attention (FA2). Returns (out [Tq, n_q, d], lse float32 [Tq, n_q])."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1 and _FLASH_GQA[0]:
        try:
            out, lse = torch.ops.aten._flash_attention_forward(
                q, k, v, part.cu_q, part.cu_k, part.max_q, part.max_k, 0.0, causal, False)[:2]
        except RuntimeError:
            _FLASH_GQA[0] = False
    if rep == 1 or not _FLASH_GQA[0]:
        k, v = (x.repeat_interleave(rep, dim=1) for x in (k, v)) if rep > 1 else (k, v)
        out, lse = torch.ops.aten._flash_attention_forward(
            q, k, v, part.cu_q, part.cu_k, part.max_q, part.max_k, 0.0, causal, False)[:2]
    if lse.dim() == 2 and lse.shape[0] == q.shape[1]:  # [n_q, Tq] (varlen layout)
        lse = lse.t()
    return out, lse


# --- the ops namespace -----------------------------------------------------------------------

class CudaOps:
    """Triton kernels + device split attention; torch fallbacks where a kernel is missing.

    self_attn / ctx_attn: "flash", "triton" or "auto" (self: Triton when every
    sequence of the pass is short, else flash; context: flash).
    """

    name = "cuda"

    def __init__(self, use_triton: bool | None = None, self_attn: str = "auto", ctx_attn: str = "flash"):
        self.kernels = _load_kernels(use_triton)
        self.self_attn, self.ctx_attn = self_attn, ctx_attn
        self.name = "cuda+triton" if self.kernels is not None else "cuda"

    # elementwise ---------------------------------------------------------------------------
    def rmsnorm(self, x, weight, eps):
        if self.kernels is None:
            return TorchOps.rmsnorm(x, weight, eps)
        return self.kernels.rmsnorm(x, weight, eps)

    def add_rmsnorm(self, x, residual, weight, eps):
        if self.kernels is None:
            return TorchOps.add_rmsnorm(x, residual, weight, eps)
        return self.kernels.fused_add_rmsnorm(x, residual, weight, eps)

    def silu_and_mul(self, gate_up):
        if self.kernels is None:
            return TorchOps.silu_and_mul(gate_up)
        return self.kernels.silu_and_mul(gate_up)

    def qk_norm_rope(self, q, k, v, positions, cos, sin, q_norm_w, k_norm_w, eps, k_cache, v_cache, slots):
        if self.kernels is None:
            return TorchOps.qk_norm_rope(q, k, v, positions, cos, sin, q_norm_w, k_norm_w, eps,
                                         k_cache, v_cache, slots)
        return self.kernels.qk_norm_rope(q, k, v, positions, cos, sin, q_norm_w, k_norm_w, eps,
                                         k_cache, v_cache, slots)

    # attention -----------------------------------------------------------------------------
    def prepare_meta(self, meta: AttnMeta, device):
        """Once per pass; the plan itself is built by the first layer (which knows the heads)."""
        meta.device_meta["plan"] = None
        meta.device_meta["device"] = device

    @staticmethod
    def _plan(meta: AttnMeta, device, n_rep: int) -> AttnPlan:
        plan = meta.device_meta.get("plan")
        if plan is None:
            plan = meta.device_meta["plan"] = build_plan(meta, device, n_rep)
        return plan

    def attention(self, q, k, v, k_cache, v_cache, meta: AttnMeta):
        on_gpu = q.device.type == "cuda"
        if (on_gpu and q.dtype not in FLASH_DTYPES) or (not on_gpu and self.kernels is None):
            # float32 on the GPU: the plain-torch reference (flash needs 16-bit, Triton's dot is tf32)
            return split_attention_torch(q, k, v, k_cache, v_cache, meta, self._merge)
        plan = self._plan(meta, meta.device_meta.get("device", q.device), q.shape[1] // k.shape[1])
        sp = plan.self_part
        use_triton = self.self_attn == "triton" or (self.self_attn == "auto" and sp.max_q <= SHORT_SEQ)
        attn = triton_varlen_attention if use_triton or q.device.type != "cuda" else flash_varlen_attention
        out, lse = attn(q, k, v.contiguous(), sp, causal=True)
        cp = plan.ctx_part
        if cp is None:
            return out
        kc = k_cache.index_select(0, plan.ctx_slots)  # [C, n_kv, d], once per layer for all groups
        vc = v_cache.index_select(0, plan.ctx_slots)
        rows = plan.ctx_rows
        qc = q[plan.ctx_lo:] if rows is None else q.index_select(0, rows)
        attn = triton_varlen_attention if self.ctx_attn == "triton" or q.device.type != "cuda" \
            else flash_varlen_attention
        o_ctx, lse_ctx = attn(qc, kc, vc, cp, causal=False)
        if rows is None:
            merged, _ = self._merge(out[plan.ctx_lo:], lse[plan.ctx_lo:], o_ctx, lse_ctx)
            out[plan.ctx_lo:] = merged
        else:
            merged, _ = self._merge(out.index_select(0, rows), lse.index_select(0, rows), o_ctx, lse_ctx)
            out.index_copy_(0, rows, merged)
        return out

    def _merge(self, o_a, lse_a, o_b, lse_b):
        if self.kernels is None:
            from .attention import merge

            return merge(o_a, lse_a, o_b, lse_b)
        return self.kernels.merge_attn(o_a, lse_a, o_b, lse_b)


def _load_kernels(use_triton: bool | None):
    """The kernels package when Triton can run here; None (torch ops) otherwise."""
    try:
        import kernels
    except ImportError as e:
        if use_triton:
            raise RuntimeError(f"use_triton=True but the kernels package does not import: {e}") from e
        return None
    if not kernels.triton_available() or not hasattr(kernels, "merge_attn"):
        if use_triton:
            raise RuntimeError("use_triton=True but Triton is not installed or has no CUDA device "
                               "(or TRITON_INTERPRET=1) to run on")
        return None
    return kernels
