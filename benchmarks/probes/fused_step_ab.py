"""The segment kernel's softmax step at its per-call default (fused for causal segments and float8 keys,
plain for bf16 contexts) against plain everywhere (the kernel before eea3de8), whole joins through the
public API in one lease: BIO-2 shape (--bio2-anchors anchors of 4,500-5,500 words x 1,127 partners) and
JOIN 8 x 1,000, fresh texts every run (nothing resident), the two variants interleaved, order mirrored
every round.

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/fused_step_ab.py --tokenizer .cache/tok --commit $C --out $OUT
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from gpu_bench import count_pairs, matmul_rate  # noqa: E402
from public_bench import Words, timed, with_sol  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--model", default="qwen3-4b-random")
    ap.add_argument("--quantize", default=None)
    ap.add_argument("--bio2-anchors", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default="/tmp/fused_step_ab")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    eng = Engine(EngineConfig(model=a.model, device="cuda", tokenizer=a.tokenizer, quantize=a.quantize))
    count_pairs(eng)
    kmod = eng.rt.ops.kernels
    default = kmod.seg_attention
    variants = {"default": default, "plain": functools.partial(default, fused_step=False)}
    w = Words(eng.tokenizer, 7)
    for fn in variants.values():  # compile both forms
        kmod.seg_attention = fn
        eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)
    rate = matmul_rate(eng.rt.device)
    res = {"commit": a.commit, "quantize": a.quantize, "matmul_tflops": rate, "runs": []}
    partners_b, partners_j = w.partners(1127), w.partners(1000)
    for r in range(a.rounds):
        for v in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
            kmod.seg_attention = variants[v]
            for name, anchors, partners in (
                    (f"BIO-2 {a.bio2_anchors}", w.texts(a.bio2_anchors, lambda: int(w.rng.integers(4500, 5501))),
                     partners_b),
                    ("JOIN 8x1000", w.texts(8, 5000), partners_j)):
                _, st = timed(eng, eng.rt.device, lambda: eng.join(anchors, partners, wl.JOIN_QUESTION))
                st = with_sol(eng, st, rate, len(anchors) * len(partners))
                row = {"round": r, "variant": v, "workload": name,
                       **{k: st[k] for k in ("wall_s", "requested_tok_s", "pct_sol")}}
                res["runs"].append(row)
                print(row, flush=True)
        (out / "fused_step_ab.json").write_text(json.dumps(res, indent=1))
    kmod.seg_attention = default
    summary = {}
    for row in res["runs"]:
        summary.setdefault(row["workload"], {}).setdefault(row["variant"], []).append(row["wall_s"])
    res["median_wall_s"] = {wk: {v: statistics.median(x) for v, x in d.items()} for wk, d in summary.items()}
    print("median wall s:", res["median_wall_s"], flush=True)
    (out / "fused_step_ab.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
