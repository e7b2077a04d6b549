"""A join pass's context attention in bf16 against float8 keys and queries (the FP8 engine's).

On BIO-2's shapes (a pass holds ~3 anchors of ~5,140 cached keys, each with ~1,127 partners x 9
fresh tokens as one query segment; Qwen3-4B heads, 32 query / 8 KV, d=128), per layer:

- bf16: the context gathered from the pool (`index_select` of K and V), then quail_kernels.seg_attention
  merged into a partial result, as gpu_worker.cuda_ops runs it;
- fp8: quail_kernels.kv_fp8.gather_fp8 (the keys into float8 with channel scales) and V's `index_select`,
  then quail_kernels.seg_attention on them, at the engine's launch and at launch variants.

Each is timed with triton.testing.do_bench (median ms); TFLOP/s = 4 * d * n_q * query rows * keys /
time. The float8 result is compared with the bf16 one (relative RMS of the output, max |lse| diff)
for keys of two scales (scores of standard deviation ~1 and ~4). (Float8 values too, V transposed,
were measured with this probe as it was at 829e812: probes/results/h200_829e812/.)

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
sys.path.insert(0, os.path.dirname(__file__))
from gpu_worker.cuda_ops import CTX_CONFIG  # noqa: E402
from quail_kernels.kv_fp8 import gather_fp8  # noqa: E402
from quail_kernels.seg_attention import seg_attention, seg_block_t, seg_items  # noqa: E402
from seg_variants import pass_args, pass_segments  # noqa: E402

ENGINE = tuple(CTX_CONFIG[k] for k in ("block_m", "block_n", "num_warps", "num_stages"))
VARIANTS = {  # name: (block_m, block_n, num_warps, num_stages); keys and values through tensor descriptors
    "engine": ENGINE,
    "k_s4": (128, 128, 8, 4),
    "k_n64": (128, 64, 8, 3),
    "k_n64_s4": (128, 64, 8, 4),
    "k_m256_n64": (256, 64, 8, 3),
}


def main() -> int:
    ap = pass_args(argparse.ArgumentParser())
    ap.add_argument("--variants", default=",".join(VARIANTS), help="float8 launches to time")
    ap.add_argument("--name", default="fp8_attn_probe.json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n_q, n_kv, d = 32, 8, 128
    T, C = a.anchors * a.q_rows, a.anchors * a.anchor_tokens
    pool = 2 * C
    seg = pass_segments(a, dev)
    slots = torch.randperm(pool, device=dev)[:C].sort().values  # a pass's context: scattered runs of the pool
    q = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    out0 = torch.randn(T, n_q, d, device=dev, dtype=torch.bfloat16)
    lse0 = torch.randn(T, n_q, device=dev) + 3.0
    flops = 4 * d * n_q * a.anchors * a.q_rows * a.anchor_tokens
    res = {"shape": vars(a), "flops": flops, "ctx_config": CTX_CONFIG, "timings": {}, "accuracy": {}}

    items = {}  # block_m -> (programs, query tokens per program), built once, outside the timings
    for bm, *_ in VARIANTS.values():
        bt = seg_block_t(n_q // n_kv, bm)
        items[bm] = torch.from_numpy(seg_items(np.full(a.anchors, a.q_rows), bt)).to(dev), bt

    def attend(k, v, launch, amax=None, merge=True, out=None, lse=None):
        bm, bn, w, s = launch
        it, bt = items[bm]
        return seg_attention(q, k, v, seg, it, bt, out=out0.clone() if out is None else out,
                             lse=lse0.clone() if lse is None else lse, merge=merge, block_n=bn, num_warps=w,
                             num_stages=s, tma=True, amax=amax)

    for scale in (1.0, 4.0):
        kp = (torch.randn(pool, n_kv, d, device=dev) * scale).to(torch.bfloat16)
        vp = torch.randn(pool, n_kv, d, device=dev, dtype=torch.bfloat16)
        vc = vp.index_select(0, slots)
        ob, lb = attend(kp.index_select(0, slots), vc, ENGINE)
        k8, amax = gather_fp8(kp, slots)
        of, lf = attend(k8, vc, ENGINE, amax)
        res["accuracy"][f"key_scale_{scale:g}"] = r = {
            "out_rel_rms": float((of.float() - ob.float()).pow(2).mean().sqrt() / ob.float().pow(2).mean().sqrt()),
            "out_max_abs": float((of.float() - ob.float()).abs().max()),
            "lse_max_abs": float((lf - lb).abs().max())}
        print(scale, r, flush=True)
    tm = res["timings"]
    bench = lambda f: float(triton.testing.do_bench(f, warmup=50, rep=300))  # noqa: E731
    kc = kp.index_select(0, slots)
    o1, l1 = out0.clone(), lse0.clone()
    tm["bf16_gather_ms"] = bench(lambda: (kp.index_select(0, slots), vp.index_select(0, slots)))
    tm["bf16_attention_ms"] = bench(lambda: attend(kc, vc, ENGINE, merge=False, out=o1, lse=l1))
    tm["fp8_gather_ms"] = bench(lambda: (gather_fp8(kp, slots), vp.index_select(0, slots)))
    for name in a.variants.split(","):
        tm[f"fp8_attention_{name}_ms"] = bench(lambda: attend(k8, vc, VARIANTS[name], amax, merge=False, out=o1,
                                                               lse=l1))
        print(name, tm[f"fp8_attention_{name}_ms"], flush=True)
    res["tflops"] = {k.removesuffix("_ms"): round(flops / (v * 1e-3) / 1e12, 1)
                     for k, v in tm.items() if "attention" in k}
    print(json.dumps(res, indent=1))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, a.name), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
