"""Launch settings of the short-sequence attention kernel on a FILTER pass (100 docs x ~330 tokens + 30 folded).

Each setting is checked against SDPA in float32 and timed (median of do_bench); run on the GPU:
    PYTHONPATH=. python3 benchmarks/probes/attn_short_probe.py $OUT      # writes $OUT/attn_short.json
"""
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import torch
import triton
import triton.testing

from quail_kernels.varlen_attention import varlen_attention
from quail_kernels._util import query_blocks

out_dir = Path(sys.argv[1])
dev = torch.device("cuda")
rng = np.random.default_rng(0)
lens = rng.integers(300, 360, 100)
cu = np.concatenate([[0], np.cumsum(lens)])
T, nq, nkv, d, F = int(cu[-1]), 32, 8, 128, 30
q = torch.randn(T, nq, d, device=dev, dtype=torch.bfloat16)
kv = torch.randn(T, 2 * nkv, d, device=dev, dtype=torch.bfloat16)
k, v = kv[:, :nkv], kv[:, nkv:]
kf = torch.randn(F, nkv, d, device=dev, dtype=torch.bfloat16)
vf = torch.randn(F, nkv, d, device=dev, dtype=torch.bfloat16)
cu32 = torch.tensor(cu, device=dev, dtype=torch.int32)
fold = torch.tensor(np.stack([np.zeros(100), np.full(100, F)]).ravel(), device=dev, dtype=torch.int32).view(2, -1)
pairs = int(sum(n * (n + 1) // 2 + n * F for n in lens))
flops = 4 * nq * d * pairs


def ref():
    outs = []
    for i in range(100):
        a, b = cu[i], cu[i + 1]
        kk = torch.cat([kf, k[a:b]]).repeat_interleave(4, 1).transpose(0, 1).float()
        vv = torch.cat([vf, v[a:b]]).repeat_interleave(4, 1).transpose(0, 1).float()
        qq = q[a:b].transpose(0, 1).float()
        n = b - a
        mask = torch.ones(n, F + n, dtype=torch.bool, device=dev)
        mask[:, F:] = torch.tril(torch.ones(n, n, dtype=torch.bool, device=dev))
        o = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask)
        outs.append(o.transpose(0, 1))
    return torch.cat(outs)


want = ref()
res = {"pairs": pairs, "flops": flops, "variants": []}
for bt, bn, nw, ns in itertools.chain(
        [(32, 64, 8, 3)],
        itertools.product([32], [32, 64, 128], [4, 8], [2, 3, 4]),
        itertools.product([16], [32, 64], [4], [2, 3]),
        itertools.product([64], [32, 64], [8, 16], [2, 3])):
    items = torch.tensor(query_blocks(lens, bt, longest_first=True), device=dev, dtype=torch.int32)
    launch = {"block_n": bn, "num_warps": nw, "num_stages": ns}
    try:
        f = lambda: varlen_attention(q, k, v, items, cu32, cu32, bt, True, kf=kf, vf=vf, fold=fold, launch=launch)  # noqa
        o, _ = f()
        err = float((o.float() - want).norm() / want.norm())
        ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
        nf = lambda: varlen_attention(q, k, v, items, cu32, cu32, bt, True, launch=launch)  # noqa
        ms_nofold = triton.testing.do_bench(nf, warmup=25, rep=200, return_mode="median")
    except Exception as e:  # noqa: BLE001  (a launch that does not fit)
        print(bt, bn, nw, ns, "failed", type(e).__name__, str(e)[:100])
        continue
    row = {"block_t": bt, "block_n": bn, "warps": nw, "stages": ns, "ms": ms, "ms_nofold": ms_nofold,
           "tflops": flops / ms / 1e9, "rel_err": err}
    res["variants"].append(row)
    print(row, flush=True)
best = min(res["variants"], key=lambda r: r["ms"] if r["rel_err"] < 1e-2 else 1e9)
print("BEST", best, "default", res["variants"][0])
(out_dir / "attn_short.json").write_text(json.dumps(res, indent=1))
