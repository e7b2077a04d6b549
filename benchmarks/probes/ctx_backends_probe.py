"""A join pass's context attention (each anchor's partners over its cached keys, merged by log-sum-exp
into their causal part) in the engine's Triton segment kernel against torch's attention backends that
return the log-sum-exp: cuDNN (dense per anchor with grouped-query heads, with K/V heads repeated, with
the query heads folded into the rows; ragged over all anchors in one call) and FlashAttention-2
(ragged). BIO-2's shapes (benchmarks/probes/seg_variants.py): 3 anchors of 5,140 keys, 10,143 partner
rows each, Qwen3-4B heads (32 query, 8 KV, d=128), bf16.

Every variant's time includes what it needs to produce the engine's result (copies, the merge); its
output is checked against the segment kernel (max abs diff of out and lse). TFLOP/s = 4 d n_q rows keys
/ time (attention only, as the engine's other figures count it).

    PYTHONPATH=. python3 benchmarks/probes/ctx_backends_probe.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from benchmarks.probes.seg_variants import pass_args, pass_segments  # noqa: E402
from quail_kernels import merge_attn  # noqa: E402
from quail_kernels.seg_attention import seg_attention, seg_block_t, seg_items  # noqa: E402


def main() -> int:
    a = pass_args(argparse.ArgumentParser()).parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n_q, n_kv, d = 32, 8, 128
    rep = n_q // n_kv
    A, S, K = a.anchors, a.q_rows, a.anchor_tokens
    q = torch.randn(A * S, n_q, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(A * K, n_kv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(A * K, n_kv, d, device=dev, dtype=torch.bfloat16)
    o0 = torch.randn(A * S, n_q, d, device=dev, dtype=torch.bfloat16)
    lse0 = torch.randn(A * S, n_q, device=dev, dtype=torch.float32) + 3.0
    seg = pass_segments(a, dev)
    scale = 1.0 / math.sqrt(d)
    flops = 4 * d * n_q * A * S * K
    cu_q = torch.arange(0, A + 1, device=dev, dtype=torch.int32) * S
    cu_k = torch.arange(0, A + 1, device=dev, dtype=torch.int32) * K
    bt = seg_block_t(rep, 128)
    items = torch.from_numpy(seg_items(seg[1].cpu().numpy(), bt)).to(dev)

    def seg_kernel():
        o, l = o0.clone(), lse0.clone()
        seg_attention(q, k, v, seg, items, bt, out=o, lse=l, merge=True, block_n=128, num_warps=8, num_stages=3,
                      tma=True)
        return o, l

    def merged(o_c, l_c):  # o_c [A*S, n_q, d], l_c [A*S, n_q] (any strides)
        return merge_attn(o0, lse0, o_c, l_c)

    def per_anchor(fn):
        outs, lses = [], []
        for i in range(A):
            o, l = fn(q[i * S:(i + 1) * S], k[i * K:(i + 1) * K], v[i * K:(i + 1) * K])
            outs.append(o)
            lses.append(l)
        return torch.cat(outs), torch.cat(lses)

    def bhsd(x):  # [rows, H, d] -> [1, H, rows, d] (a view)
        return x.transpose(0, 1).unsqueeze(0)

    def cudnn_dense(qa, ka, va):
        o, l = torch.ops.aten._scaled_dot_product_cudnn_attention(bhsd(qa), bhsd(ka), bhsd(va), None, True,
                                                                 scale=scale)[:2]
        return o[0].transpose(0, 1), l[0].transpose(0, 1)

    def cudnn_rep(qa, ka, va):
        kr, vr = (x.repeat_interleave(rep, dim=1) for x in (ka, va))
        return cudnn_dense(qa, kr, vr)

    def cudnn_fold(qa, ka, va):  # query heads of one KV head as more rows: [1, n_kv, rows * rep, d]
        qf = qa.view(S, n_kv, rep, d).permute(1, 0, 2, 3).reshape(1, n_kv, S * rep, d)
        o, l = torch.ops.aten._scaled_dot_product_cudnn_attention(qf, bhsd(ka), bhsd(va), None, True,
                                                                 scale=scale)[:2]
        o = o.view(n_kv, S, rep, d).permute(1, 0, 2, 3).reshape(S, n_q, d)
        l = l.view(n_kv, S, rep).permute(1, 0, 2).reshape(S, n_q)
        return o, l

    def flash_dense(qa, ka, va):
        o, l = torch.ops.aten._scaled_dot_product_flash_attention(bhsd(qa), bhsd(ka), bhsd(va), scale=scale)[:2]
        return o[0].transpose(0, 1), l[0].transpose(0, 1)

    def cudnn_varlen():
        o, l = torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu_q, cu_k, S, K, True, scale=scale)[:2]
        if l.dim() == 2 and l.shape[0] == n_q:
            l = l.t()
        elif l.dim() == 3:
            l = l.reshape(-1, l.shape[-1]) if l.shape[-1] == n_q else l.squeeze(-1)
        return o, l

    def flash_varlen():
        o, l = torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, S, K, 0.0, False, False, scale=scale)[:2]
        return o, (l.t() if l.shape[0] == n_q else l)

    variants = {
        "seg_kernel": seg_kernel,
        "cudnn_dense_gqa": lambda: merged(*per_anchor(cudnn_dense)),
        "cudnn_dense_repeat_kv": lambda: merged(*per_anchor(cudnn_rep)),
        "cudnn_fold_heads": lambda: merged(*per_anchor(cudnn_fold)),
        "cudnn_varlen": lambda: merged(*cudnn_varlen()),
        "flash_dense_gqa": lambda: merged(*per_anchor(flash_dense)),
        "flash_varlen_gqa": lambda: merged(*flash_varlen()),
        "merge_only": lambda: merged(o0, lse0),
    }
    attn_only = {
        "cudnn_dense_gqa": lambda: per_anchor(cudnn_dense),
        "cudnn_fold_heads": lambda: per_anchor(cudnn_fold),
        "cudnn_varlen": cudnn_varlen,
        "flash_varlen_gqa": flash_varlen,
    }
    ref_o, ref_l = seg_kernel()
    res = {"shape": vars(a), "flops": flops, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "device": torch.cuda.get_device_name(), "variants": {}}
    for name, fn in variants.items():
        try:
            o, l = fn()
            torch.cuda.synchronize()
            r = {"out_shape": list(o.shape), "lse_shape": list(l.shape),
                 "max_abs_diff_out": float((o.float() - ref_o.float()).abs().max()),
                 "max_abs_diff_lse": float((l.float() - ref_l).abs().max())}
            ms = [triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") for _ in range(2)]
            r["ms"] = [round(x, 4) for x in ms]
            r["tflops"] = round(flops / (min(ms) * 1e-3) / 1e12, 1)
            if name in attn_only:
                ms_a = min(triton.testing.do_bench(attn_only[name], warmup=25, rep=200, return_mode="median")
                           for _ in range(2))
                r["attention_only_ms"] = round(ms_a, 4)
                r["attention_only_tflops"] = round(flops / (ms_a * 1e-3) / 1e12, 1)
        except Exception as e:  # a backend this torch or shape refuses is reported, not fatal
            r = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
        res["variants"][name] = r
        print(name, r, flush=True)
    # a new (rows, keys) shape per anchor, as a join's anchors have: the first call of each shape
    import time
    first = {}
    for name, call in (("cudnn_dense_gqa", lambda qa, ka, va: cudnn_dense(qa, ka, va)),
                       ("flash_dense_gqa", lambda qa, ka, va: flash_dense(qa, ka, va))):
        ts = []
        try:
            for j in range(5):
                s_j, k_j = S - 37 * (j + 1), K - 53 * (j + 1)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                call(q[:s_j], k[:k_j], v[:k_j])
                torch.cuda.synchronize()
                ts.append(round((time.perf_counter() - t0) * 1e3, 2))
            first[name] = ts
        except Exception as e:
            first[name] = f"{type(e).__name__}: {str(e)[:200]}"
    res["first_call_ms_new_shapes"] = first
    print("first calls", first, flush=True)
    res["causal"] = causal_section()
    with open(os.path.join(a.out, "ctx_backends_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


def causal_section() -> dict:
    """A FILTER pass's causal part (100 documents of 300-360 tokens over themselves, no frame): the
    engine's short-sequence Triton kernel against FA2 and cuDNN, ragged, grouped-query heads."""
    from quail_kernels._util import query_blocks
    from quail_kernels.varlen_attention import varlen_attention

    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(1)
    lens = torch.randint(300, 361, (100,), generator=g)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])
    T, n_q, n_kv, d = int(cu[-1]), 32, 8, 128
    q = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(T, n_kv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(T, n_kv, d, device=dev, dtype=torch.bfloat16)
    cu32 = cu.to(dev, torch.int32)
    mx = int(lens.max())
    flops = 4 * n_q * d * int(sum(n * (n + 1) // 2 for n in lens.tolist()))
    bt = 16
    items = torch.from_numpy(query_blocks(lens.numpy(), bt, longest_first=True).astype("int32")).to(dev)
    items = items.view(2, -1)
    scale = 1.0 / math.sqrt(d)
    fns = {
        "triton_varlen": lambda: varlen_attention(q, k, v, items, cu32, cu32, bt, causal=True,
                                                  launch={"block_n": 32, "num_warps": 4, "num_stages": 3}),
        "flash_varlen": lambda: torch.ops.aten._flash_attention_forward(q, k, v, cu32, cu32, mx, mx, 0.0, True,
                                                                        False, scale=scale)[:2],
        "cudnn_varlen": lambda: torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu32, cu32, mx, mx, True,
                                                                        0.0, True, scale=scale)[:2],
    }
    ref = fns["triton_varlen"]()[0]
    out = {"flops": flops, "tokens": T}
    for name, fn in fns.items():
        try:
            o = fn()[0]
            torch.cuda.synchronize()
            ms = min(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") for _ in range(2))
            out[name] = {"ms": round(ms, 4), "tflops": round(flops / (ms * 1e-3) / 1e12, 1),
                         "max_abs_diff_out": float((o.float() - ref.float()).abs().max())}
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
        print("causal", name, out[name], flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
