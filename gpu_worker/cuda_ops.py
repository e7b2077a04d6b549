"""CUDA ops: the Triton kernels of quail_kernels/ and split attention on the device.

Same interface and semantics as `ops.TorchOps`. Split attention per forward
pass (see attention.py) runs as a few variable-length calls over the whole
packed batch, whatever the number of sequences:

- self part: every sequence's new tokens attend causally to themselves;
  sequences up to TRITON_MAX_Q tokens in quail_kernels.varlen_attention (it packs
  the query heads of one KV head into one tile: few, full programs even for
  thousands of 13-token partners), longer ones in torch's flash attention
  (FA2 through `aten._flash_attention_forward`, grouped-query heads native);
- context part: the new tokens of each group (sequences sharing one cached
  context, e.g. an anchor's partners) form ONE query sequence that attends,
  without a mask, to the group's context keys, gathered once per layer from
  the KV cache: a context is read once per group, not once per sequence.
  The two partial results merge by log-sum-exp (quail_kernels.merge_attn).
  A short context (the chat frame every filter prompt shares) or one used
  by a single sequence is instead read inside the Triton self kernel, which
  saves the second call, the merge and a copy; so are the few words between
  a shared anchor and a partner group's context (their first word), while
  the anchor itself is split.

`prepare_meta` + the first layer build every index tensor of the pass with one
host-to-device copy; the attention itself never syncs the host.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from quail_kernels._util import query_blocks

from .attention import AttnMeta, split_attention_torch
from .ops import TorchOps, linear
from .runner import to_device_aligned

FLASH_DTYPES = (torch.bfloat16, torch.float16)
TRITON_MAX_Q = 512  # "auto": sequences up to this long take the Triton kernel, longer ones flash
FOLD_CTX = 128  # a context this short is read inside the Triton kernel (no second call, no merge)
FOLD_CTX_SOLO = 1024  # ... and one this long when a single sequence uses it (nothing to share)
# launch of quail_kernels.seg_attention (split contexts, long sequences): query rows per program, keys per
# step, warps, pipeline depth, keys through tensor descriptors (H200: 575 TFLOP/s on the JOIN context,
# benchmarks/probes/results/attn_probe.json)
CTX_CONFIG = {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 3, "tma": True}
# the same kernel on float8 keys (the FP8 engine's join contexts): keys of one byte leave shared memory
# for more stages; these entries override CTX_CONFIG's there
CTX_CONFIG_FP8: dict = {}


@dataclass
class AttnPart:
    """One variable-length attention call: query sequences against key sequences."""

    cu_q: torch.Tensor  # int32 [n + 1] offsets into the query rows of this part
    cu_k: torch.Tensor  # int32 [n + 1] offsets into its key rows
    max_q: int
    max_k: int
    items: torch.Tensor | None = None  # int32 [2, n_items] (sequence, first query token) per program
    block_t: int = 0  # query tokens per Triton program


@dataclass
class AttnPlan:
    """Device metadata of one pass (built by `build_plan`, shared by all layers).

    Self part: sequences up to TRITON_MAX_Q tokens ("short") run in the Triton
    kernel, the rest ("long") in quail_kernels.seg_attention (causal segments, in
    place) or in flash attention, compacted by `long_rows` unless every
    sequence is long. A short context used by short sequences is
    folded into the Triton kernel (`fold`); every other context is split: its
    group's queries attend to it in `ctx_part`, merged by log-sum-exp (a split
    anchor's partner groups fold the words below it).
    """

    tri: AttnPart | None  # Triton self part: cu over all sequences, items of the short ones
    long: AttnPart | None  # flash self part over the long sequences
    long_rows: torch.Tensor | None  # int64 packed rows of the long sequences (None: all rows)
    fold: torch.Tensor | None  # int32 [2, n_seq] (first row in fold_slots, length) of folded contexts
    fold_slots: torch.Tensor | None  # int64 slots of the folded contexts, concatenated
    ctx_part: AttnPart | None
    ctx_lo: int  # split-context tokens are rows [ctx_lo, T) when ctx_rows is None
    ctx_rows: torch.Tensor | None
    ctx_slots: torch.Tensor | None  # int64 slots of the split contexts, concatenated
    ctx_seg: torch.Tensor | None = None  # int32 [4, n_groups] segments of the fused context kernel
    long_seg: torch.Tensor | None = None  # int32 [4, n_long] causal segments of the long sequences ...
    long_items: torch.Tensor | None = None  # ... and their programs (quail_kernels.seg_attention), when not flash
    long_bt: int = 0
    ctx_seg2: torch.Tensor | None = None  # int32 [4, n] second context segments (the part below a shared base) ...
    ctx_items2: torch.Tensor | None = None  # ... and their programs


def _block_t(rep: int) -> int:
    """Query tokens per Triton program: rep * block_t rows fill a 64-row tile.

    64 rows, 32-key steps, 4 warps, 3 stages ran a FILTER pass's causal
    attention (100 documents of ~330 tokens + a 30-token folded frame, H200)
    in 0.50 ms against 0.71 ms for 128 rows and 64-key steps
    (benchmarks/probes/results/attn_short_h200.json).
    """
    return max(1, 64 // rep)


def _ranges(cu: np.ndarray, idx) -> np.ndarray:
    return np.concatenate([np.arange(cu[i], cu[i + 1]) for i in idx]) if len(idx) else np.zeros(0, np.int64)


def build_plan(meta: AttnMeta, device, n_rep: int, self_attn: str = "auto", fold: bool = True,
               ctx_block_m: int = 0, long_block_m: int = 0, short_max: int = TRITON_MAX_Q) -> AttnPlan:
    """Index tensors of one pass (one host-to-device copy).

    n_rep: query heads per KV head (sets the Triton query block); self_attn:
    "auto", "triton" or "flash" (which sequences are long, see AttnPlan);
    ctx_block_m / long_block_m: query rows per program of quail_kernels.seg_attention
    for the split contexts / the long sequences, 0 for flash attention;
    short_max: longest "short" sequence under "auto".
    """
    on_gpu = torch.device(device).type == "cuda"
    cu = np.asarray(meta.cu_seqlens, dtype=np.int64)
    lens = np.diff(cu)
    n_seq = len(lens)
    if self_attn == "flash":
        long = np.ones(n_seq, dtype=bool)
    elif self_attn == "triton":
        long = np.zeros(n_seq, dtype=bool)
    else:
        long = lens > short_max
    arrays: dict[str, np.ndarray] = {"cu": cu}
    fold_rows = np.zeros((2, n_seq), dtype=np.int64)
    fold_pieces, fold_off, split_groups = [], 0, []
    any_long = bool(long.any())
    for g in meta.groups:
        c = 0 if g.ctx_slots is None else g.ctx_slots.numel()
        if c == 0:
            continue
        n = g.seq_hi - g.seq_lo
        short = fold and not (any_long and long[g.seq_lo:g.seq_hi].any())
        if short and (c <= FOLD_CTX or (n == 1 and c <= FOLD_CTX_SOLO)):
            piece = g.ctx_slots
        elif short and g.base_key and 0 < g.base_len < c and c - g.base_len <= FOLD_CTX:
            # the base (an anchor) is split, shared by every group below it; the few words between it and
            # this group's context (partners' shared first word) are folded into the self kernel, which
            # saves a second context call over all these rows
            piece = g.ctx_slots[g.base_len:]
            split_groups.append(replace(g, ctx_slots=g.ctx_slots[:g.base_len]))
        else:
            split_groups.append(g)
            continue
        fold_rows[0, g.seq_lo:g.seq_hi] = fold_off
        fold_rows[1, g.seq_lo:g.seq_hi] = piece.numel()
        fold_off += piece.numel()
        fold_pieces.append(piece)
    short_max = int(lens[~long].max()) if (~long).any() else 0
    tri_bt = _block_t(n_rep)
    if (~long).any():
        arrays["items"] = query_blocks(lens, tri_bt, longest_first=True, keep=~long).ravel()
        if fold_pieces:
            arrays["fold"] = fold_rows.ravel()
    long_bt = 0
    if long.any():
        long_idx = np.nonzero(long)[0]
        if long_block_m:
            long_bt = max(1, long_block_m // n_rep)
            ll, lc = lens[long_idx], cu[long_idx]
            arrays["long_seg"] = np.stack([lc, ll, lc, ll]).ravel()
            arrays["long_items"] = query_blocks(ll, long_bt, longest_first=True).ravel()
        else:
            arrays["long_cu"] = np.concatenate([[0], np.cumsum(lens[long_idx])])
            if not long.all():
                arrays["long_rows"] = _ranges(cu, long_idx)
    ctx_lo = int(cu[-1])
    if split_groups:
        q_len = np.array([g.tok_hi - g.tok_lo for g in split_groups], dtype=np.int64)
        k_len = np.array([g.ctx_slots.numel() for g in split_groups], dtype=np.int64)
        arrays["ctx_cu_q"] = np.concatenate([[0], np.cumsum(q_len)])
        arrays["ctx_cu_k"] = np.concatenate([[0], np.cumsum(k_len)])
        ctx_bt = max(1, ctx_block_m // n_rep) if ctx_block_m else _block_t(n_rep)
        arrays["ctx_items"] = query_blocks(q_len, ctx_bt).ravel()
        if ctx_block_m:  # fused: a base shared by adjacent groups is read once, their extras after it
            seg, seg2, ctx_keys = _shared_base_segments(split_groups)
            arrays["ctx_seg"] = seg.ravel()
            arrays["ctx_items"] = query_blocks(seg[1], ctx_bt).ravel()
            if seg2.shape[1]:
                arrays["ctx_seg2"] = seg2.ravel()
                arrays["ctx_items2"] = query_blocks(seg2[1], ctx_bt).ravel()
        contiguous = all(a.tok_hi == b.tok_lo for a, b in zip(split_groups, split_groups[1:]))
        if contiguous and split_groups[-1].tok_hi == cu[-1]:
            ctx_lo = split_groups[0].tok_lo
        else:
            arrays["ctx_rows"] = np.concatenate([np.arange(g.tok_lo, g.tok_hi) for g in split_groups])
    d = _to_device(arrays, device, on_gpu)
    i32 = lambda name: d[name].to(torch.int32)  # noqa: E731  (small cast kernels, no sync)
    cu32 = i32("cu")
    tri = long_part = None
    if "items" in d:
        tri = AttnPart(cu32, cu32, short_max, short_max, i32("items").view(2, -1), tri_bt)
    if "long_cu" in d:
        lcu = cu32 if long.all() else i32("long_cu")
        long_max = int(lens[long].max())
        long_part = AttnPart(lcu, lcu, long_max, long_max)
    ctx_part = None
    if split_groups:
        ctx_part = AttnPart(i32("ctx_cu_q"), i32("ctx_cu_k"), int(q_len.max()), int(k_len.max()),
                            i32("ctx_items").view(2, -1), ctx_bt)
    ctx_slots = _cat_slots(split_groups)
    if ctx_block_m and split_groups:
        ctx_slots = torch.cat(ctx_keys) if len(ctx_keys) > 1 else ctx_keys[0]
    return AttnPlan(tri, long_part, d.get("long_rows"), i32("fold").view(2, -1) if "fold" in d else None,
                    _cat(fold_pieces), ctx_part, ctx_lo, d.get("ctx_rows"), ctx_slots,
                    i32("ctx_seg").view(4, -1) if "ctx_seg" in d else None,
                    i32("long_seg").view(4, -1) if "long_seg" in d else None,
                    i32("long_items").view(2, -1) if "long_items" in d else None, long_bt,
                    i32("ctx_seg2").view(4, -1) if "ctx_seg2" in d else None,
                    i32("ctx_items2").view(2, -1) if "ctx_items2" in d else None)


def _shared_base_segments(groups):
    """Segments [4, n] (query start, query rows, key start, keys) of the fused context kernel.

    Adjacent groups under one base (an anchor, its partners split by shared
    words) read the base's keys in ONE segment over all their query rows; the
    rest of each group's context (the shared words) is a second segment,
    merged after the first. Returns (base segments, extra segments, slot
    tensors in key order): the gathered keys hold each base once, so a pass
    reads what its distinct contexts hold, not a copy per group.
    """
    runs, extras = [], []  # [q_lo, q_hi, base_key, base_len, slots]
    for g in groups:
        c = g.ctx_slots.numel()
        bl = g.base_len if g.base_key and 0 < g.base_len <= c else c
        r = runs[-1] if runs else None
        if r is not None and g.base_key and r[2] == g.base_key and r[3] == bl and r[1] == g.tok_lo:
            r[1] = g.tok_hi
        else:
            runs.append([g.tok_lo, g.tok_hi, g.base_key, bl, g.ctx_slots[:bl]])
        if c > bl:
            extras.append((g.tok_lo, g.tok_hi - g.tok_lo, g.ctx_slots[bl:]))
    keys, k0 = [], 0
    seg = np.zeros((4, len(runs)), dtype=np.int64)
    for i, (lo, hi, _, bl, sl) in enumerate(runs):
        seg[:, i] = (lo, hi - lo, k0, bl)
        keys.append(sl)
        k0 += bl
    seg2 = np.zeros((4, len(extras)), dtype=np.int64)
    for i, (lo, n, sl) in enumerate(extras):
        seg2[:, i] = (lo, n, k0, sl.numel())
        keys.append(sl)
        k0 += sl.numel()
    return seg, seg2, keys


def _to_device(arrays: dict, device, on_gpu: bool) -> dict:
    """All index arrays in one pinned host buffer and one non-blocking copy; views per name (on a GPU each
    16-byte aligned, runner.to_device_aligned)."""
    names = list(arrays)
    host = [torch.from_numpy(np.asarray(arrays[n], dtype=np.int64)) for n in names]
    if on_gpu:
        return dict(zip(names, to_device_aligned(host, device)))
    return dict(zip(names, host))


def _cat_slots(groups):
    return _cat([g.ctx_slots for g in groups])


def _cat(pieces):
    if not pieces:
        return None
    return torch.cat(pieces) if len(pieces) > 1 else pieces[0]


_FLASH_GQA = [True]  # cleared if this torch's flash attention refuses fewer KV heads


def flash_varlen_attention(q, k, v, part: AttnPart, causal: bool, repeat_kv: bool = False):
    """torch's flash attention (FA2). Returns (out [Tq, n_q, d], lse float32 [Tq, n_q]).

    repeat_kv: give it one K/V head per query head (copies) instead of its
    native grouped-query mode.
    """
    rep = q.shape[1] // k.shape[1]
    if rep > 1 and _FLASH_GQA[0] and not repeat_kv:
        try:
            out, lse = torch.ops.aten._flash_attention_forward(
                q, k, v, part.cu_q, part.cu_k, part.max_q, part.max_k, 0.0, causal, False)[:2]
        except RuntimeError:
            _FLASH_GQA[0] = False
    if rep == 1 or not _FLASH_GQA[0] or repeat_kv:
        k, v = (x.repeat_interleave(rep, dim=1) for x in (k, v)) if rep > 1 else (k, v)
        out, lse = torch.ops.aten._flash_attention_forward(
            q, k, v, part.cu_q, part.cu_k, part.max_q, part.max_k, 0.0, causal, False)[:2]
    if lse.dim() == 2 and lse.shape[0] == q.shape[1]:  # [n_q, Tq] (varlen layout)
        lse = lse.t().contiguous()  # fixed strides: the merge kernel is not re-specialized per pass
    return out, lse


# --- the ops namespace -----------------------------------------------------------------------

class CudaOps:
    """Triton kernels + device split attention; torch fallbacks where a kernel is missing.

    self_attn: "auto" (Triton for sequences up to TRITON_MAX_Q tokens, flash for
    longer ones), "triton" or "flash"; ctx_attn (split contexts): "fused"
    (quail_kernels.seg_attention: grouped queries, merged in place), "flash" (FA2,
    then a merge kernel) or "triton" (the varlen kernel, then merge); fold:
    read short contexts inside the Triton kernel (AttnPlan); long_attn
    (sequences over TRITON_MAX_Q tokens): "seg" (quail_kernels.seg_attention,
    causal) or "flash"; ctx_config: launch settings of the segment kernel over
    CTX_CONFIG; repeat_kv: flash attention on K/V heads repeated per query head; ctx_fp8: the fused
    context attention's scores from float8 keys and queries (quail_kernels.kv_fp8; the FP8 engine's default
    on the GPU: Hopper's tensor cores run that product at twice the bf16 rate).
    """

    name = "cuda"
    linear = staticmethod(linear)  # cuBLAS on the GPU
    # the 16-bit model adds the output and down projections into the residual stream inside the GEMM
    # (`linear_add`: cuBLAS's epilogue reads the residual) and normalizes after: the norm kernels read one
    # [T, hidden] tensor and write one instead of reading two and writing two
    residual_gemm = True

    @staticmethod
    def linear_add(x, w, residual):
        """residual += x @ w.t(), in place (one rounding of the sum); returns residual."""
        return residual.addmm_(x, w.t())

    def __init__(self, use_triton: bool | None = None, self_attn: str = "auto", ctx_attn: str = "fused",
                 fold: bool = True, repeat_kv: bool = False, ctx_config: dict | None = None,
                 long_attn: str = "seg", ctx_fp8: bool = False):
        self.kernels = _load_kernels(use_triton)
        if self.kernels is None:  # no Triton here: flash attention only
            self_attn, ctx_attn, long_attn, fold = "flash", "flash", "flash", False
        self.self_attn, self.ctx_attn, self.fold, self.repeat_kv = self_attn, ctx_attn, fold, repeat_kv
        self.long_attn = long_attn
        self.ctx_fp8 = ctx_fp8 and ctx_attn == "fused" and self.kernels is not None
        self.short_max = TRITON_MAX_Q
        # swiglu: rows up to which an interleaved gate/up weight goes through cuBLAS. 0: the fused kernel at every
        # size, whose rows do not depend on the pass's other rows (cuBLAS picks its kernel by the row count: a
        # decode's answers then move with the cache state). On an H100 at 36a31ab cuBLAS to 512 rows ran
        # GENERATE in 29.22 s against 28.67 s, though its product alone is faster at 416 rows (605 TFLOP/s
        # against 471: benchmarks/results/decode_h100_0a82529/decode_gemm_probe.json)
        self.swiglu_gemm_rows = 0
        self.ctx_config = dict(CTX_CONFIG, **(ctx_config or {}))
        self.ctx_config_fp8 = dict(self.ctx_config, **CTX_CONFIG_FP8)  # float8 keys: merged once
        self.name = "cuda+triton" if self.kernels is not None else "cuda"

    # elementwise (quant=True: quantized rows for an FP8 projection, fused into the kernel) ---------
    def rmsnorm(self, x, weight, eps, quant=False):
        if self.kernels is None:
            return TorchOps.rmsnorm(x, weight, eps, quant)
        return self.kernels.rmsnorm_fp8(x, weight, eps) if quant else self.kernels.rmsnorm(x, weight, eps)

    def add_rmsnorm(self, x, residual, weight, eps, quant=False):
        if self.kernels is None:
            return TorchOps.add_rmsnorm(x, residual, weight, eps, quant)
        if quant:
            return self.kernels.fused_add_rmsnorm_fp8(x, residual, weight, eps)
        return self.kernels.fused_add_rmsnorm(x, residual, weight, eps)

    def silu_and_mul(self, gate_up, quant=False):
        if self.kernels is None:
            return TorchOps.silu_and_mul(gate_up, quant)
        return self.kernels.silu_and_mul_fp8(gate_up) if quant else self.kernels.silu_and_mul(gate_up)

    def pack_gate_up(self, weight):
        """(weight, block): the MLP's [gate; up] weight interleaved for the fused SwiGLU GEMM where it runs
        (quail_kernels.gemm_swiglu: Hopper or later, or Triton's interpreter), else as it is with block 0."""
        block = self.kernels.gate_up_block(weight) if self.kernels is not None else 0
        return (self.kernels.interleave_gate_up(weight, block), block) if block else (weight, 0)

    def swiglu(self, x, gate_up, block: int = 0):
        """silu(x @ gate.T) * (x @ up.T): in one GEMM with the activation in its epilogue when `gate_up` was
        interleaved by `pack_gate_up` (block > 0), else cuBLAS and the SiLU-and-mul kernel. Up to
        `swiglu_gemm_rows` rows (a decode step's batch) an interleaved weight goes through cuBLAS too, its
        output's blocks of gate and up columns multiplied after by the SiLU-and-mul kernel (in float32, as the
        fused kernel does, from the product rounded to x.dtype)."""
        if block and x.shape[0] <= self.swiglu_gemm_rows:
            # each block of `block` gate columns is followed by the same up columns: a row of the [T * F / block,
            # 2 * block] view is one block's [gate | up], which the SiLU-and-mul kernel reads as its halves
            y = self.linear(x, gate_up)
            return self.silu_and_mul(y.view(-1, 2 * block)).view(x.shape[0], -1)
        if block:
            return self.kernels.gemm_swiglu(x, gate_up, block)
        return self.silu_and_mul(self.linear(x, gate_up))

    def quant_rows(self, x):
        return TorchOps.quant_rows(x) if self.kernels is None else self.kernels.quant_rows(x)

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

    def attention(self, q, k, v, k_cache, v_cache, meta: AttnMeta):
        dec = meta.device_meta.get("decode")
        if dec is not None:  # a decode step (step_graph.py): every key, the new tokens' too, from the cache
            return self.kernels.decode_attention(q, k_cache, v_cache, **dec)
        on_gpu = q.device.type == "cuda"
        if (on_gpu and q.dtype not in FLASH_DTYPES) or (not on_gpu and self.kernels is None):
            # float32 on the GPU: the plain-torch reference (flash needs 16-bit, Triton's dot is tf32)
            return split_attention_torch(q, k, v, k_cache, v_cache, meta, self._merge)
        plan = meta.device_meta.get("plan")
        if plan is None:  # first layer of the pass
            # no flash attention off the GPU: long sequences there only through the segment kernel
            self_attn = self.self_attn if on_gpu or self.long_attn == "seg" else "triton"
            plan = meta.device_meta["plan"] = build_plan(
                meta, meta.device_meta.get("device", q.device), q.shape[1] // k.shape[1], self_attn, self.fold,
                self.ctx_config["block_m"] if self.ctx_attn == "fused" else 0,
                self.ctx_config["block_m"] if self.long_attn == "seg" else 0,
                self.short_max)
        out, lse = self._self_part(q, k, v, k_cache, v_cache, plan)
        cp = plan.ctx_part
        if cp is None:
            return out
        if self.ctx_attn == "fused":  # in place: out/lse of the self part are merged in the epilogue
            launch = self._launch(on_gpu, q.shape[2], self.ctx_fp8)
            # the keys of every group, once per layer: [C, n_kv, d] (float8 with their channel maxima)
            if self.ctx_fp8:
                kc, launch["amax"] = self.kernels.gather_fp8(k_cache, plan.ctx_slots)
            else:
                kc = k_cache.index_select(0, plan.ctx_slots)
            vc = v_cache.index_select(0, plan.ctx_slots)
            self.kernels.seg_attention(q, kc, vc, plan.ctx_seg, cp.items, cp.block_t, out=out, lse=lse, merge=True,
                                       **launch)
            if plan.ctx_seg2 is not None:  # the rest of each context below a shared base, merged after it
                self.kernels.seg_attention(q, kc, vc, plan.ctx_seg2, plan.ctx_items2, cp.block_t, out=out, lse=lse,
                                           merge=True, **launch)
            return out
        kc, vc = k_cache.index_select(0, plan.ctx_slots), v_cache.index_select(0, plan.ctx_slots)
        rows = plan.ctx_rows
        qc = q[plan.ctx_lo:] if rows is None else q.index_select(0, rows)
        if self.ctx_attn == "triton" or not on_gpu:
            o_ctx, lse_ctx = self.kernels.varlen_attention(qc, kc, vc, cp.items, cp.cu_q, cp.cu_k, cp.block_t,
                                                           causal=False)
        else:
            o_ctx, lse_ctx = flash_varlen_attention(qc, kc, vc, cp, causal=False, repeat_kv=self.repeat_kv)
        if rows is None:
            merged, _ = self._merge(out[plan.ctx_lo:], lse[plan.ctx_lo:], o_ctx, lse_ctx)
            out[plan.ctx_lo:] = merged
        else:
            merged, _ = self._merge(out.index_select(0, rows), lse.index_select(0, rows), o_ctx, lse_ctx)
            out.index_copy_(0, rows, merged)
        return out

    def _launch(self, on_gpu: bool, head_dim: int, fp8: bool = False) -> dict:
        if not on_gpu:  # Triton's interpreter: the launcher's defaults
            return {}
        c = self.ctx_config_fp8 if fp8 else self.ctx_config
        if fp8 and head_dim != 128:  # float8 keys through descriptors: measured (and checked) at d=128 only
            c = dict(c, tma=False)  # (at d=32 Triton 3.6 stopped with an illegal instruction on the H200)
        if head_dim > 128:  # K and V tiles of 128 x d x 3 stages would not fit in shared memory
            return {"block_n": 64, "num_warps": c["num_warps"], "num_stages": 2, "tma": c["tma"]}
        return {"block_n": c["block_n"], "num_warps": c["num_warps"], "num_stages": c["num_stages"], "tma": c["tma"]}

    def _self_part(self, q, k, v, k_cache, v_cache, plan: AttnPlan):
        """Causal attention of every sequence to itself (+ its folded context): (out, lse [T, n_q])."""
        lp = plan.long
        if lp is not None and plan.long_rows is None:  # every sequence long, in flash: one call
            return flash_varlen_attention(q, k, v.contiguous(), lp, causal=True, repeat_kv=self.repeat_kv)
        out, lse = torch.empty_like(q), torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
        if plan.tri is not None:
            kf = vf = None
            if plan.fold is not None:
                kf, vf = k_cache.index_select(0, plan.fold_slots), v_cache.index_select(0, plan.fold_slots)
            t = plan.tri
            self.kernels.varlen_attention(q, k, v, t.items, t.cu_q, t.cu_k, t.block_t, causal=True, out=out, lse=lse,
                                          kf=kf, vf=vf, fold=plan.fold)
        if plan.long_seg is not None:  # long sequences in the segment kernel, in place
            self.kernels.seg_attention(q, k, v, plan.long_seg, plan.long_items, plan.long_bt, causal=True,
                                       out=out, lse=lse, **self._launch(q.device.type == "cuda", q.shape[2]))
        elif lp is not None:
            rows = plan.long_rows
            o_l, lse_l = flash_varlen_attention(*(x.index_select(0, rows) for x in (q, k, v)), lp, causal=True,
                                                repeat_kv=self.repeat_kv)
            out.index_copy_(0, rows, o_l)
            lse.index_copy_(0, rows, lse_l)
        return out, lse

    def _merge(self, o_a, lse_a, o_b, lse_b):
        if self.kernels is None:
            from .attention import merge

            return merge(o_a, lse_a, o_b, lse_b)
        return self.kernels.merge_attn(o_a, lse_a, o_b, lse_b)


def _load_kernels(use_triton: bool | None):
    """The kernels package when Triton can run here; None (torch ops) otherwise."""
    try:
        import quail_kernels as kernels
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
