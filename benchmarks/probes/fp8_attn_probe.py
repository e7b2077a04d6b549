"""A join pass's context attention in bf16 against float8 keys, values, queries and probabilities.

On BIO-2's shapes (a pass holds ~3 anchors of ~5,140 cached keys, each with ~1,127 partners x 9
fresh tokens as one query segment; Qwen3-4B heads, 32 query / 8 KV, d=128), per layer:

- bf16: the context gathered from the pool (`index_select` of K and V), then kernels.seg_attention
  merged into a partial result, as gpu_worker.cuda_ops runs it;
- fp8: kernels.kv_fp8.gather_fp8 (K, or K and V, into float8 with channel scales, V transposed),
  then kernels.seg_attention on it, at the engine's launch (float8 keys, 16-bit values) and at launch
  variants, with float8 values among them (`kv_*`; `kv_tkv`, values through tensor descriptors,
  stopped with an illegal instruction at 829e812: run it alone, last).

Each is timed with triton.testing.do_bench (median ms); TFLOP/s = 4 * d * n_q * query rows * keys /
time. The float8 result is compared with the bf16 one (relative RMS of the output, max |lse| diff)
for keys of two scales (scores of standard deviation ~1 and ~4).

    PYTHONPATH=. python3 benchmarks/probes/fp8_attn_probe.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from gpu_worker.cuda_ops import CTX_CONFIG, FP8_CTX_CONFIG  # noqa: E402
from kernels.kv_fp8 import gather_fp8  # noqa: E402
from kernels.seg_attention import seg_attention, seg_block_t, seg_items, segments  # noqa: E402

VARIANTS = {  # name: (block_m, block_n, num_warps, num_stages, tma: False, True, "k" or "v", float8 values)
    "engine": tuple(FP8_CTX_CONFIG[k] for k in ("block_m", "block_n", "num_warps", "num_stages", "tma")) + (False,),
    "k_s4": (128, 128, 8, 4, True, False),
    "k_n64": (128, 64, 8, 3, True, False),
    "k_n64_s4": (128, 64, 8, 4, True, False),
    "k_m256_n64": (256, 64, 8, 3, True, False),
    "kv_t0": (128, 128, 8, 3, False, True),
    "kv_t0_n64": (128, 64, 8, 3, False, True),
    "kv_tk": (128, 128, 8, 3, "k", True),
    "kv_tkv": (128, 128, 8, 3, True, True),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--anchors", type=int, default=3)
    ap.add_argument("--anchor-tokens", type=int, default=5140)
    ap.add_argument("--q-rows", type=int, default=10143)
    ap.add_argument("--out", default=".")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="float8 launches to time (a launch that fails "
                    "on the device can end the process: list those last, or alone)")
    ap.add_argument("--name", default="fp8_attn_probe.json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n_q, n_kv, d = 32, 8, 128
    T, C = a.anchors * a.q_rows, a.anchors * a.anchor_tokens
    pool = 2 * C
    seg = torch.from_numpy(segments(np.arange(a.anchors) * a.q_rows, [a.q_rows] * a.anchors,
                                    np.arange(a.anchors) * a.anchor_tokens, [a.anchor_tokens] * a.anchors)).to(dev)
    slots = torch.randperm(pool, device=dev)[:C].sort().values  # a pass's context: scattered runs of the pool
    q = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    out0 = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    lse0 = torch.randn(T, n_q, device=dev) + 3.0
    flops = 4 * d * n_q * a.anchors * a.q_rows * a.anchor_tokens
    res = {"shape": vars(a), "flops": flops, "ctx_config": CTX_CONFIG, "timings": {}, "accuracy": {}}

    def items_for(block_m):
        bt = seg_block_t(n_q // n_kv, block_m)
        return torch.from_numpy(seg_items(np.full(a.anchors, a.q_rows), bt)).to(dev), bt

    def bf16_layer(kc_pool, vc_pool):
        items, bt = items_for(CTX_CONFIG["block_m"])
        kc, vc = kc_pool.index_select(0, slots), vc_pool.index_select(0, slots)
        return seg_attention(q, kc, vc, seg, items, bt, out=out0.clone(), lse=lse0.clone(), merge=True,
                             block_n=CTX_CONFIG["block_n"], num_warps=CTX_CONFIG["num_warps"],
                             num_stages=CTX_CONFIG["num_stages"], tma=CTX_CONFIG["tma"])

    def fp8_layer(kc_pool, vc_pool, variant="engine", gathered=None):
        bm, bn, w, s, tma, values = VARIANTS[variant]
        items, bt = items_for(bm)
        k8, vt8, amax = gathered or gather_fp8(kc_pool, vc_pool, slots, values)
        return seg_attention(q, k8, vt8, seg, items, bt, out=out0.clone(), lse=lse0.clone(), merge=True,
                             block_n=bn, num_warps=w, num_stages=s, tma=tma, amax=amax)

    for scale in (1.0, 4.0):
        kp = (torch.randn(pool, n_kv, d, device=dev) * scale).to(torch.bfloat16)
        vp = torch.randn(pool, n_kv, d, device=dev, dtype=torch.bfloat16)
        ob, lb = bf16_layer(kp, vp)
        for variant in ("engine", "kv_t0"):
            of, lf = fp8_layer(kp, vp, variant)
            res["accuracy"][f"{variant}_key_scale_{scale:g}"] = r = {
                "out_rel_rms": float((of.float() - ob.float()).pow(2).mean().sqrt() / ob.float().pow(2).mean().sqrt()),
                "out_max_abs": float((of.float() - ob.float()).abs().max()),
                "lse_max_abs": float((lf - lb).abs().max())}
            print(variant, scale, r, flush=True)
    tm = res["timings"]
    bench = lambda f: float(triton.testing.do_bench(f, warmup=50, rep=300))  # noqa: E731
    kc, vc = kp.index_select(0, slots), vp.index_select(0, slots)
    tm["bf16_gather_ms"] = bench(lambda: (kp.index_select(0, slots), vp.index_select(0, slots)))
    items, bt = items_for(CTX_CONFIG["block_m"])
    o1, l1 = out0.clone(), lse0.clone()
    tm["bf16_attention_ms"] = bench(lambda: seg_attention(
        q, kc, vc, seg, items, bt, out=o1, lse=l1, merge=False, block_n=CTX_CONFIG["block_n"],
        num_warps=CTX_CONFIG["num_warps"], num_stages=CTX_CONFIG["num_stages"], tma=CTX_CONFIG["tma"]))
    tm["fp8_gather_ms"] = bench(lambda: gather_fp8(kp, vp, slots))
    tm["fp8_keys_gather_ms"] = bench(lambda: gather_fp8(kp, vp, slots, values=False))
    gathers = {v: gather_fp8(kp, vp, slots, v) for v in (False, True)}
    for name in a.variants.split(","):
        bm, bn, w, s, tma, values = VARIANTS[name]
        it, bt = items_for(bm)
        g8 = gathers[values]
        try:
            tm[f"fp8_attention_{name}_ms"] = bench(lambda: seg_attention(
                q, g8[0], g8[1], seg, it, bt, out=o1, lse=l1, merge=False, block_n=bn, num_warps=w,
                num_stages=s, tma=tma, amax=g8[2]))
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (a launch that does not fit is a result)
            tm[f"fp8_attention_{name}_ms"] = f"{type(e).__name__}: {str(e)[:200]}"
        print(name, tm[f"fp8_attention_{name}_ms"], flush=True)
    res["tflops"] = {k.removesuffix("_ms"): round(flops / (v * 1e-3) / 1e12, 1)
                     for k, v in tm.items() if "attention" in k and isinstance(v, float)}
    print(json.dumps(res, indent=1))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, a.name), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
