"""The short-sequence attention kernel (quail_kernels.varlen_attention) in its forms and launch settings.

Per call: a FILTER pass's causal attention (96 documents of 300-360 tokens after a 30-token folded frame)
and a join pass's partners (4,000 sequences of 13 tokens after 8 folded words), each setting checked
against SDPA in float32 and timed (median of do_bench). Forms: "masked" (every key block masked, the kernel
before this probe), "split" (whole blocks every row sees unmasked, plain softmax step), "split+fused" (the
default). Then whole FILTER calls (2,048 x 300 words, fresh texts every run) through the public API with
the variants named by --whole, interleaved, order mirrored every round.

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/short_attn_forms.py --tokenizer .cache/tok --commit $C --out $OUT

It needs the kernel of 5e6f78b (launch's `split` / `fused`), where it ran (results/h200_5e6f78b/): the
split forms ran slower per call (FILTER pass 0.54 against 0.50 ms, join partners 0.63 against 0.52 ms at
the default launch) and in whole FILTER calls (median 7.79 against 7.75 s; FP8 5.00 against 4.88 s), so
the kernel after 5e6f78b keeps the all-masked loop and has no such switches.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from gpu_bench import matmul_rate  # noqa: E402
from public_bench import Words, timed, with_sol  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from quail_kernels._util import query_blocks  # noqa: E402
from quail_kernels.varlen_attention import _varlen_attn_kernel, varlen_attention  # noqa: E402

FORMS = {"masked": {"split": False, "fused": False}, "split": {"split": True, "fused": False},
         "split+fused": {"split": True, "fused": True}}
# (query tokens per program, keys per step, warps, stages); the first is the launcher's default at 4 query
# heads per KV head
LAUNCHES = [(16, 32, 4, 3), (16, 32, 4, 2), (16, 32, 4, 4), (16, 64, 4, 3), (16, 64, 4, 2), (32, 32, 4, 3),
            (32, 64, 8, 3), (32, 64, 4, 2), (32, 128, 8, 2)]


def shape(dev, lens, F, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    cu = np.concatenate([[0], np.cumsum(lens)])
    T, nq, nkv, d = int(cu[-1]), 32, 8, 128
    q = torch.randn(T, nq, d, generator=g).to(dev, torch.bfloat16)
    kv = torch.randn(T, 2 * nkv, d, generator=g).to(dev, torch.bfloat16)
    k, v = kv[:, :nkv], kv[:, nkv:]  # the engine's k and v are views of one projection
    kf, vf = (torch.randn(F, nkv, d, generator=g).to(dev, torch.bfloat16) for _ in range(2))
    n = len(lens)
    fold = torch.tensor(np.stack([np.zeros(n), np.full(n, F)]), device=dev, dtype=torch.int32).contiguous()
    pairs = int(sum(x * (x + 1) // 2 + x * F for x in lens))
    return {"lens": lens, "cu": cu, "q": q, "k": k, "v": v, "kf": kf, "vf": vf, "fold": fold, "F": F,
            "cu32": torch.tensor(cu, device=dev, dtype=torch.int32), "flops": 4 * nq * d * pairs}


def reference(s):
    outs, F = [], s["F"]
    for a, b in zip(s["cu"][:-1], s["cu"][1:]):
        kk, vv = (torch.cat([f, x[a:b]]).repeat_interleave(4, 1).transpose(0, 1).float()
                  for f, x in ((s["kf"], s["k"]), (s["vf"], s["v"])))
        n = b - a
        mask = torch.ones(n, F + n, dtype=torch.bool, device=kk.device)
        mask[:, F:] = torch.tril(torch.ones(n, n, dtype=torch.bool, device=kk.device))
        o = torch.nn.functional.scaled_dot_product_attention(s["q"][a:b].transpose(0, 1).float(), kk, vv,
                                                             attn_mask=mask)
        outs.append(o.transpose(0, 1))
    return torch.cat(outs)


def per_call(dev):
    rng = np.random.default_rng(0)
    shapes = {"FILTER pass": shape(dev, rng.integers(300, 361, 96), 30, 1),
              "join partners": shape(dev, np.full(4000, 13), 8, 2)}
    rows = []
    for name, s in shapes.items():
        want = reference(s)
        for (bt, bn, nw, ns), (form, fkw) in itertools.product(LAUNCHES, FORMS.items()):
            items = torch.tensor(query_blocks(s["lens"], bt, longest_first=True), device=dev, dtype=torch.int32)
            launch = {"block_n": bn, "num_warps": nw, "num_stages": ns, **fkw}
            f = functools.partial(varlen_attention, s["q"], s["k"], s["v"], items, s["cu32"], s["cu32"], bt, True,
                                  kf=s["kf"], vf=s["vf"], fold=s["fold"], launch=launch)
            try:
                o, _ = f()
                err = float((o.float() - want).norm() / want.norm())
                ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
            except Exception as e:  # noqa: BLE001  (a launch that does not fit)
                print(name, bt, bn, nw, ns, form, "failed", type(e).__name__, str(e)[:120], flush=True)
                continue
            row = {"shape": name, "block_t": bt, "block_n": bn, "warps": nw, "stages": ns, "form": form, "ms": ms,
                   "tflops": s["flops"] / ms / 1e9, "rel_err": err}
            rows.append(row)
            print(row, flush=True)
    return rows


def whole(a, variants: dict, rate):
    eng = Engine(EngineConfig(model=a.model, device="cuda", tokenizer=a.tokenizer, quantize=a.quantize))
    kmod = eng.rt.ops.kernels
    default = kmod.varlen_attention
    fns = {v: functools.partial(default, launch=kw) if kw else default for v, kw in variants.items()}
    w = Words(eng.tokenizer, 11)
    for fn in fns.values():  # compile every variant
        kmod.varlen_attention = fn
        eng.filter(w.texts(200, 300), [wl.QUESTION])
    runs = []
    for r in range(a.rounds):
        for v in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            kmod.varlen_attention = fns[v]
            docs = w.texts(2048, 300)
            _, st = timed(eng, eng.rt.device, lambda: eng.filter(docs, [wl.QUESTION]))
            st = with_sol(eng, st, rate, len(docs))
            row = {"round": r, "variant": v, "quantize": a.quantize, "wall_s": st["wall_s"], "pct_sol": st["pct_sol"]}
            runs.append(row)
            print(row, flush=True)
    kmod.varlen_attention = default
    del eng
    torch.cuda.empty_cache()
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--model", default="qwen3-4b-random")
    ap.add_argument("--quantize", default=None)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--whole", default='{"default": {}, "masked": {"split": false, "fused": false}}',
                    help="JSON: variant name -> launch over the kernel's defaults, for whole FILTER calls")
    ap.add_argument("--skip-per-call", action="store_true")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default="/tmp/short_attn_forms")
    a = ap.parse_args()
    if "SPLIT" not in _varlen_attn_kernel.arg_names:  # elsewhere launch's split/fused are ignored: equal forms
        raise SystemExit("short_attn_forms.py needs the kernel of 5e6f78b (git checkout 5e6f78b -- quail_kernels)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    tag = f"short_attn_forms{'_' + a.quantize if a.quantize else ''}.json"
    res = {"commit": a.commit, "device": torch.cuda.get_device_name(dev), "matmul_tflops": matmul_rate(dev)}
    if not a.skip_per_call:
        res["per_call"] = per_call(dev)
        (out / tag).write_text(json.dumps(res, indent=1))
    res["whole_filter"] = whole(a, json.loads(a.whole), res["matmul_tflops"])
    by = {}
    for row in res["whole_filter"]:
        by.setdefault(row["variant"], []).append(row["wall_s"])
    res["median_wall_s"] = {v: statistics.median(x) for v, x in by.items()}
    print("median wall s:", res["median_wall_s"], flush=True)
    (out / tag).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
