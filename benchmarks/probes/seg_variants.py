"""Context attention of a join pass (quail_kernels.seg_attention, non-causal, merged in place) against
variants of its inner loop, on BIO-2's shapes: a pass holds ~3 anchors of ~5,140 cached keys, each
with ~1,127 partners x 9 fresh tokens as one query segment; Qwen3-4B heads (32 query, 8 KV, d=128).

Variants (all TMA loads, 128-key steps unless named):
- base: the kernel as shipped (scores scaled, then the running max; exp2 of the difference);
- fma: the running max taken on raw scores and scaled once per row, the exponent one FMA per score;
- pipe: fma, and the next key block's scores issued before this block's softmax (manual software
  pipelining: the tensor cores work on QK^T of block j+1 while the softmax of block j runs);
- launch variants of these (key step 64, stages, 256-row tiles).

Each variant's output is checked against base (bf16: max abs diff) and its time taken with
triton.testing.do_bench (median); TFLOP/s = 4 * d * n_q * (query rows x keys) / time.

    PYTHONPATH=. python3 benchmarks/probes/seg_variants.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from quail_kernels.seg_attention import seg_attention, seg_block_t, seg_items, segments  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def _softmax_pv(s, acc, m_i, l_i, vb, qk_scale):
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(vb.dtype), vb, acc)
    return acc, m_new, l_i


@triton.jit(do_not_specialize=["n_items", "n_seg"])
def _variant_kernel(
    q_ptr, k_desc, v_desc, k_ptr, v_ptr, o_ptr, lse_ptr, items_ptr, seg_ptr,
    n_items, n_seg, s_qt, s_qh, s_kt, s_vt, s_ot, s_oh, s_lt, s_lh, qk_scale,
    REP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
    MERGE: tl.constexpr, PIPE: tl.constexpr, WS: tl.constexpr,
):
    item = tl.program_id(0)
    kvh = tl.program_id(1)
    g = tl.load(items_ptr + item)
    first = tl.load(items_ptr + n_items + item)
    q_lo = tl.load(seg_ptr + g)
    q_len = tl.load(seg_ptr + n_seg + g)
    k_lo = tl.load(seg_ptr + 2 * n_seg + g)
    k_len = tl.load(seg_ptr + 3 * n_seg + g)
    r = tl.arange(0, BLOCK_M)
    tok = first + r // REP
    head = kvh * REP + r % REP
    row_ok = (tok < q_len) & (r < BLOCK_T * REP)
    dd = tl.arange(0, D)
    rows = (q_lo + tok).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * s_qt + head[:, None] * s_qh + dd[None, :], mask=row_ok[:, None], other=0.0)
    o_ptrs = o_ptr + rows[:, None] * s_ot + head[:, None] * s_oh + dd[None, :]
    l_ptrs = lse_ptr + rows * s_lt + head * s_lh
    if MERGE:
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
    n_full = k_len // BLOCK_N
    if PIPE:
        if n_full > 0:
            kb = k_desc.load([k_lo, kvh * D])
            s = tl.dot(q, tl.trans(kb))
            for j in range(1, n_full):
                kb = k_desc.load([k_lo + j * BLOCK_N, kvh * D])
                s_next = tl.dot(q, tl.trans(kb))
                vb = v_desc.load([k_lo + (j - 1) * BLOCK_N, kvh * D])
                acc, m_i, l_i = _softmax_pv(s, acc, m_i, l_i, vb, qk_scale)
                s = s_next
            vb = v_desc.load([k_lo + (n_full - 1) * BLOCK_N, kvh * D])
            acc, m_i, l_i = _softmax_pv(s, acc, m_i, l_i, vb, qk_scale)
    elif WS:
        for j in tl.range(0, n_full, warp_specialize=True):
            kb = k_desc.load([k_lo + j * BLOCK_N, kvh * D])
            vb = v_desc.load([k_lo + j * BLOCK_N, kvh * D])
            acc, m_i, l_i = _softmax_pv(tl.dot(q, tl.trans(kb)), acc, m_i, l_i, vb, qk_scale)
    else:
        for j in range(0, n_full):
            kb = k_desc.load([k_lo + j * BLOCK_N, kvh * D])
            vb = v_desc.load([k_lo + j * BLOCK_N, kvh * D])
            acc, m_i, l_i = _softmax_pv(tl.dot(q, tl.trans(kb)), acc, m_i, l_i, vb, qk_scale)
    cols = tl.arange(0, BLOCK_N)
    kp = k_ptr + (k_lo + cols).to(tl.int64)[:, None] * s_kt + kvh * D + dd[None, :]
    vp = v_ptr + (k_lo + cols).to(tl.int64)[:, None] * s_vt + kvh * D + dd[None, :]
    for start in range(n_full * BLOCK_N, k_len, BLOCK_N):
        ok = (start + cols) < k_len
        kb = tl.load(kp + start * s_kt, mask=ok[:, None], other=0.0)
        vb = tl.load(vp + start * s_vt, mask=ok[:, None], other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(kb)), float("-inf"))
        acc, m_i, l_i = _softmax_pv(s, acc, m_i, l_i, vb, qk_scale)
    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(l_ptrs, lse, mask=row_ok)


def variant(q, k, v, seg, items, block_t, out, lse, *, merge, pipe=False, ws=False, block_n=128, num_warps=8,
            num_stages=3):
    from triton.tools.tensor_descriptor import TensorDescriptor

    T, n_q, d = q.shape
    n_kv = k.shape[1]
    rep = n_q // n_kv
    block_m = triton.next_power_of_2(block_t * rep)
    k_desc = TensorDescriptor.from_tensor(k.reshape(k.shape[0], n_kv * d), [block_n, d])
    v_desc = TensorDescriptor.from_tensor(v.reshape(v.shape[0], n_kv * d), [block_n, d])
    _variant_kernel[(items.shape[1], n_kv)](
        q, k_desc, v_desc, k, v, out, lse, items, seg, items.shape[1], seg.shape[1],
        q.stride(0), q.stride(1), k.stride(0), v.stride(0), out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        (1.0 / math.sqrt(d)) * LOG2E, REP=rep, BLOCK_T=block_t, BLOCK_M=block_m, BLOCK_N=block_n, D=d,
        MERGE=merge, PIPE=pipe, WS=ws, num_warps=num_warps, num_stages=num_stages)
    return out, lse


def pass_args(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The shape of one BIO-2 pass's context attention (also benchmarks/probes/fp8_attn_probe.py)."""
    ap.add_argument("--anchors", type=int, default=3)
    ap.add_argument("--anchor-tokens", type=int, default=5140)
    ap.add_argument("--q-rows", type=int, default=10143)
    ap.add_argument("--out", default=".")
    return ap


def pass_segments(a, dev) -> torch.Tensor:
    """Each anchor's partners as one query segment over its cached keys, laid out one after another."""
    return torch.from_numpy(segments(np.arange(a.anchors) * a.q_rows, [a.q_rows] * a.anchors,
                                     np.arange(a.anchors) * a.anchor_tokens, [a.anchor_tokens] * a.anchors)).to(dev)


def main() -> int:
    a = pass_args(argparse.ArgumentParser()).parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n_q, n_kv, d = 32, 8, 128
    T = a.anchors * a.q_rows
    C = a.anchors * a.anchor_tokens
    q = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(C, n_kv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(C, n_kv, d, device=dev, dtype=torch.bfloat16)
    seg = pass_segments(a, dev)
    # a partial result to merge into (the partners' causal attention to themselves)
    o0 = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    lse0 = torch.randn(T, n_q, device=dev, dtype=torch.float32) + 3.0
    flops = 4 * d * n_q * a.anchors * a.q_rows * a.anchor_tokens

    def run_base(block_t, **kw):
        items = torch.from_numpy(seg_items(seg[1].cpu().numpy(), block_t)).to(dev)
        o, l = o0.clone(), lse0.clone()
        fn = lambda: seg_attention(q, k, v, seg, items, block_t, out=o, lse=l, merge=True, **kw)  # noqa: E731
        return fn, (lambda: (seg_attention(q, k, v, seg, items, block_t, out=o0.clone(), lse=lse0.clone(),
                                           merge=True, **kw)))

    def run_var(block_t, **kw):
        items = torch.from_numpy(seg_items(seg[1].cpu().numpy(), block_t)).to(dev)
        o, l = o0.clone(), lse0.clone()
        fn = lambda: variant(q, k, v, seg, items, block_t, o, l, merge=True, **kw)  # noqa: E731
        return fn, (lambda: variant(q, k, v, seg, items, block_t, o0.clone(), lse0.clone(), merge=True, **kw))

    bt = seg_block_t(n_q // n_kv, 128)
    cases = {
        "base": run_base(bt, block_n=128, num_warps=8, num_stages=3, tma=True),
        "fma": run_var(bt),
        "pipe": run_var(bt, pipe=True),
        "fma_n64_s4": run_var(bt, block_n=64, num_stages=4),
        "pipe_n64_s4": run_var(bt, pipe=True, block_n=64, num_stages=4),
        "pipe_s2": run_var(bt, pipe=True, num_stages=2),
        "fma_m256_n64": run_var(seg_block_t(4, 256), block_n=64, num_warps=8, num_stages=3),
        "pipe_m256_n64": run_var(seg_block_t(4, 256), pipe=True, block_n=64, num_warps=8, num_stages=3),
        "fma_m64_w4": run_var(seg_block_t(4, 64), num_warps=4),
        "ws": run_var(bt, ws=True),
    }
    ref_o, ref_l = cases["base"][1]()
    res = {"shape": vars(a), "flops": flops, "variants": {}}
    for name, (fn, once) in cases.items():
        try:
            o, l = once()
            torch.cuda.synchronize()
            err_o = float((o.float() - ref_o.float()).abs().max())
            err_l = float((l - ref_l).abs().max())
            ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            ms2 = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            res["variants"][name] = {"ms": [round(ms, 4), round(ms2, 4)], "tflops": round(flops / (min(ms, ms2) * 1e-3) / 1e12, 1),
                                     "max_abs_diff_out": err_o, "max_abs_diff_lse": err_l}
        except Exception as e:  # a variant the compiler refuses is reported, not fatal
            res["variants"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(name, res["variants"][name], flush=True)
    with open(os.path.join(a.out, "seg_variants.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
