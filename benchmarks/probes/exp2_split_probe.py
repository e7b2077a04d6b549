"""A join pass's context attention with part of the softmax's exponentials on the FMA units.

Per 128-key step the segment kernel issues 128 x 128 exponentials on the multi-function units
(16 per cycle per multiprocessor on Hopper), against 8.4 MFLOP of tensor-core products: about half
the products' time, and Triton's loop overlaps little of it. FlashAttention-4's answer: compute a
share of the exponentials as 2^n * p(f) (round to nearest by adding 1.5 * 2^23, a cubic on
[-0.5, 0.5], the integer n added to the exponent bits), which runs on the FMA and integer units.

Variants on BIO-2's shapes (benchmarks/probes/seg_variants.py; bf16, merged into a partial result as
the engine runs it; TMA loads):
- base: the kernel as shipped (quail_kernels.seg_attention, 128-key steps);
- split: each 128-key step as two 64-key halves, both on the multi-function units (the cost of splitting);
- poly_half: the same, the second half's exponentials by the polynomial;
- poly_all: 128-key steps, every exponential by the polynomial;
- poly4_half: poly_half with a quartic.
Each variant's output against base (max abs diff of out, lse) and its time (do_bench median, twice).

    PYTHONPATH=. python3 benchmarks/probes/exp2_split_probe.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from benchmarks.probes.seg_variants import pass_args, pass_segments  # noqa: E402
from quail_kernels.seg_attention import seg_attention, seg_block_t, seg_items  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def _exp2_poly(x, DEG4: tl.constexpr):
    """2^x for x <= 0 (-inf gives 0) on the FMA and integer units; relative error 7.7e-5 (cubic)."""
    x = tl.maximum(x, -126.0)
    t = x + 12582912.0  # 1.5 * 2^23: the sum's low mantissa bits hold round(x)
    n = t.to(tl.int32, bitcast=True) - 0x4B400000
    f = x - (t - 12582912.0)  # in [-0.5, 0.5]
    if DEG4:
        p = 0.00956051984 * f + 0.0559171229
        p = p * f + 0.240249817
        p = p * f + 0.693121958
        p = p * f + 0.99999919
    else:
        p = 0.0550887671 * f + 0.242604656
        p = p * f + 0.693276283
        p = p * f + 0.999928905
    return (p.to(tl.int32, bitcast=True) + (n << 23)).to(tl.float32, bitcast=True)


@triton.jit(do_not_specialize=["n_items", "n_seg"])
def _poly_kernel(
    q_ptr, k_desc, v_desc, k_ptr, v_ptr, o_ptr, lse_ptr, items_ptr, seg_ptr,
    n_items, n_seg, s_qt, s_qh, s_kt, s_vt, s_ot, s_oh, s_lt, s_lh, qk_scale,
    REP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
    SPLIT: tl.constexpr, POLY: tl.constexpr, DEG4: tl.constexpr,
):
    # POLY: 0 none, 1 the second half of a split step, 2 every exponential
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
    lse_b = tl.load(l_ptrs, mask=row_ok, other=float("-inf"))
    has_b = lse_b > float("-inf")
    m_i = tl.where(has_b, lse_b * 1.4426950408889634, float("-inf"))
    l_i = tl.where(has_b, 1.0, 0.0)
    o_b = tl.load(o_ptrs, mask=row_ok[:, None], other=0.0).to(tl.float32)
    acc = tl.where(has_b[:, None], o_b, 0.0)
    n_full = k_len // BLOCK_N
    HALF: tl.constexpr = BLOCK_N // 2
    for j in range(0, n_full):
        if SPLIT:
            k0 = k_desc.load([k_lo + j * BLOCK_N, kvh * D])
            k1 = k_desc.load([k_lo + j * BLOCK_N + HALF, kvh * D])
            s0 = tl.dot(q, tl.trans(k0)) * qk_scale
            s1 = tl.dot(q, tl.trans(k1)) * qk_scale
            m_new = tl.maximum(m_i, tl.maximum(tl.max(s0, 1), tl.max(s1, 1)))
            alpha = tl.exp2(m_i - m_new)
            p0 = tl.exp2(s0 - m_new[:, None])
            if POLY == 1:
                p1 = _exp2_poly(s1 - m_new[:, None], DEG4)
            else:
                p1 = tl.exp2(s1 - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p0, 1) + tl.sum(p1, 1)
            v0 = v_desc.load([k_lo + j * BLOCK_N, kvh * D])
            v1 = v_desc.load([k_lo + j * BLOCK_N + HALF, kvh * D])
            acc = acc * alpha[:, None]
            acc = tl.dot(p0.to(v0.dtype), v0, acc)
            acc = tl.dot(p1.to(v1.dtype), v1, acc)
        else:
            kb = k_desc.load([k_lo + j * BLOCK_N, kvh * D])
            s = tl.dot(q, tl.trans(kb)) * qk_scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            if POLY == 2:
                p = _exp2_poly(s - m_new[:, None], DEG4)
            else:
                p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            vb = v_desc.load([k_lo + j * BLOCK_N, kvh * D])
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(vb.dtype), vb, acc)
        m_i = m_new
    cols = tl.arange(0, BLOCK_N)
    kp = k_ptr + (k_lo + cols).to(tl.int64)[:, None] * s_kt + kvh * D + dd[None, :]
    vp = v_ptr + (k_lo + cols).to(tl.int64)[:, None] * s_vt + kvh * D + dd[None, :]
    for start in range(n_full * BLOCK_N, k_len, BLOCK_N):
        ok = (start + cols) < k_len
        kb = tl.load(kp + start * s_kt, mask=ok[:, None], other=0.0)
        vb = tl.load(vp + start * s_vt, mask=ok[:, None], other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(kb)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(vb.dtype), vb)
        m_i = m_new
    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(l_ptrs, lse, mask=row_ok)


def poly_variant(q, k, v, seg, items, block_t, out, lse, *, split, poly, deg4=False, block_n=128, num_warps=8,
                 num_stages=3):
    from triton.tools.tensor_descriptor import TensorDescriptor

    T, n_q, d = q.shape
    n_kv = k.shape[1]
    rep = n_q // n_kv
    block_m = triton.next_power_of_2(block_t * rep)
    tile = block_n // 2 if split else block_n
    k_desc = TensorDescriptor.from_tensor(k.reshape(k.shape[0], n_kv * d), [tile, d])
    v_desc = TensorDescriptor.from_tensor(v.reshape(v.shape[0], n_kv * d), [tile, d])
    _poly_kernel[(items.shape[1], n_kv)](
        q, k_desc, v_desc, k, v, out, lse, items, seg, items.shape[1], seg.shape[1],
        q.stride(0), q.stride(1), k.stride(0), v.stride(0), out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        (1.0 / math.sqrt(d)) * LOG2E, REP=rep, BLOCK_T=block_t, BLOCK_M=block_m, BLOCK_N=block_n, D=d,
        SPLIT=split, POLY=poly, DEG4=deg4, num_warps=num_warps, num_stages=num_stages)
    return out, lse


def main() -> int:
    a = pass_args(argparse.ArgumentParser()).parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n_q, n_kv, d = 32, 8, 128
    T, C = a.anchors * a.q_rows, a.anchors * a.anchor_tokens
    q = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(C, n_kv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(C, n_kv, d, device=dev, dtype=torch.bfloat16)
    seg = pass_segments(a, dev)
    o0 = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    lse0 = torch.randn(T, n_q, device=dev, dtype=torch.float32) + 3.0
    flops = 4 * d * n_q * a.anchors * a.q_rows * a.anchor_tokens
    bt = seg_block_t(n_q // n_kv, 128)
    items = torch.from_numpy(seg_items(seg[1].cpu().numpy(), bt)).to(dev)

    def base(o, l):
        return seg_attention(q, k, v, seg, items, bt, out=o, lse=l, merge=True, block_n=128, num_warps=8,
                             num_stages=3, tma=True)

    cases = {
        "base": base,
        "split": lambda o, l: poly_variant(q, k, v, seg, items, bt, o, l, split=True, poly=0),
        "poly_half": lambda o, l: poly_variant(q, k, v, seg, items, bt, o, l, split=True, poly=1),
        "poly4_half": lambda o, l: poly_variant(q, k, v, seg, items, bt, o, l, split=True, poly=1, deg4=True),
        "poly_all": lambda o, l: poly_variant(q, k, v, seg, items, bt, o, l, split=False, poly=2),
        "split_s2": lambda o, l: poly_variant(q, k, v, seg, items, bt, o, l, split=True, poly=0, num_stages=2),
        "poly_half_s2": lambda o, l: poly_variant(q, k, v, seg, items, bt, o, l, split=True, poly=1, num_stages=2),
    }
    ref_o, ref_l = base(o0.clone(), lse0.clone())
    res = {"shape": vars(a), "flops": flops, "variants": {}}
    for name, fn in cases.items():
        try:
            o, l = fn(o0.clone(), lse0.clone())
            torch.cuda.synchronize()
            err_o = float((o.float() - ref_o.float()).abs().max())
            err_l = float((l - ref_l).abs().max())
            ob, lb = o0.clone(), lse0.clone()
            ms = [triton.testing.do_bench(lambda: fn(ob, lb), warmup=25, rep=200, return_mode="median")
                  for _ in range(2)]
            res["variants"][name] = {"ms": [round(x, 4) for x in ms],
                                     "tflops": round(flops / (min(ms) * 1e-3) / 1e12, 1),
                                     "max_abs_diff_out": err_o, "max_abs_diff_lse": err_l}
        except Exception as e:  # a variant the compiler refuses is reported, not fatal
            res["variants"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(name, res["variants"][name], flush=True)
    with open(os.path.join(a.out, "exp2_split_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
