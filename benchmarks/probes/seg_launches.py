"""Every attention launch of a BIO-2 join through the public API, timed on the device one by one.

Wraps quail_kernels.seg_attention and varlen_attention as the engine calls them (CUDA events around each
call, no synchronization inside the run) for a join of --anchors anchors of 4,500-5,500 words x 1,127
partners (BIO-2's texts, qwen3-4b-random, default settings but the KV pool), after a warm-up join on other
texts. Per kind of launch (the anchors' causal segments, the partners' context segments, the second context
segments below a shared base, the short causal kernel): calls, device ms, and for the segment kernel the
attended pairs and TFLOP/s (4 * d * n_q per pair). Then a few recorded context launches are replayed alone
(triton.testing.do_bench, same inputs), to tell the kernel's rate inside a pass from its rate alone.

    PYTHONPATH=. python3 benchmarks/probes/seg_launches.py --tokenizer .cache/tok --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_workloads as wl  # noqa: E402
from public_bench import Words  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402


def pairs_of(seg: np.ndarray, causal: bool) -> int:
    q_len, k_len = seg[1].astype(np.int64), seg[3].astype(np.int64)
    return int((q_len * (q_len + 1) // 2).sum()) if causal else int((q_len * k_len).sum())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--model", default="qwen3-4b-random")
    ap.add_argument("--anchors", type=int, default=8)
    ap.add_argument("--partners", type=int, default=1127)
    ap.add_argument("--kv-pool", type=int, default=400_000)
    ap.add_argument("--replay", type=int, default=3, help="context launches replayed alone")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default=".")
    ap.add_argument("--name", default="seg_launches.json")
    a = ap.parse_args()
    eng = Engine(EngineConfig(model=a.model, device="cuda", tokenizer=a.tokenizer, kv_pool_tokens=a.kv_pool))
    kern = eng.rt.ops.kernels
    w = Words(eng.tokenizer, 41)
    eng.join(w.texts(3, 5000), w.partners(a.partners), wl.JOIN_QUESTION)  # compile every launch

    calls, keep = [], []
    seg_fn, var_fn = kern.seg_attention, kern.varlen_attention

    def seg_wrap(q, k, v, seg, items, block_t, **kw):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        kind = "causal" if kw.get("causal") else ("ctx" if not calls or calls[-1]["kind"] != "ctx" else "ctx2")
        saved = None
        if kind == "ctx" and len(keep) < a.replay and len([c for c in calls if c["kind"] == "ctx"]) % 37 == 5:
            saved = [x.clone() for x in (q, k, v, seg, items, kw["out"], kw["lse"])]
        e0.record()
        r = seg_fn(q, k, v, seg, items, block_t, **kw)
        e1.record()
        calls.append({"kind": kind, "ev": (e0, e1), "seg": seg, "n_items": int(items.shape[1]), "T": q.shape[0],
                      "C": k.shape[0], "d": q.shape[2], "n_q": q.shape[1]})
        if saved is not None:
            keep.append((len(calls) - 1, saved, block_t, {k2: v2 for k2, v2 in kw.items() if k2 not in ("out", "lse")}))
        return r

    def var_wrap(*args, **kw):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        r = var_fn(*args, **kw)
        e1.record()
        calls.append({"kind": "short causal (varlen)", "ev": (e0, e1)})
        return r

    kern.seg_attention, kern.varlen_attention = seg_wrap, var_wrap
    anchors = w.texts(a.anchors, lambda: int(w.rng.integers(4500, 5501)))
    partners = w.partners(a.partners)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    eng.join(anchors, partners, wl.JOIN_QUESTION)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    kern.seg_attention, kern.varlen_attention = seg_fn, var_fn

    res = {"commit": a.commit, "device": torch.cuda.get_device_name(), "anchors": a.anchors, "partners": a.partners,
           "wall_s": wall, "passes": eng.stats.get("forward_passes"), "kinds": {}}
    for c in calls:
        c["ms"] = c["ev"][0].elapsed_time(c["ev"][1])
        if "seg" in c:
            s = c["seg"].cpu().numpy()
            c["pairs"] = pairs_of(s, c["kind"] == "causal")
            c["n_seg"] = s.shape[1]
            c["q_rows"] = int(s[1].sum())
            c["k_len_mean"] = float(s[3].mean())
    for kind in sorted({c["kind"] for c in calls}):
        cs = [c for c in calls if c["kind"] == kind]
        ms = sum(c["ms"] for c in cs)
        r = res["kinds"][kind] = {"calls": len(cs), "ms": round(ms, 2)}
        if "pairs" in cs[0]:
            flops = sum(4 * c["d"] * c["n_q"] * c["pairs"] for c in cs)
            r["tflops"] = round(flops / (ms * 1e-3) / 1e12, 1)
            r["n_seg"] = sorted({c["n_seg"] for c in cs})
            r["q_rows_per_call"] = [min(c["q_rows"] for c in cs), max(c["q_rows"] for c in cs)]
            r["k_len_mean"] = round(float(np.mean([c["k_len_mean"] for c in cs])), 1)
            per = [4 * c["d"] * c["n_q"] * c["pairs"] / (c["ms"] * 1e-3) / 1e12 for c in cs]
            r["tflops_per_call_p10_p50_p90"] = [round(float(x), 1) for x in np.percentile(per, [10, 50, 90])]
        print(kind, json.dumps(r), flush=True)
    res["attention_ms"] = round(sum(c["ms"] for c in calls), 1)
    replays = res["replays"] = []
    for i, (q, k, v, seg, items, out, lse), bt, kw in keep:
        c = calls[i]
        ms = float(triton.testing.do_bench(lambda: seg_fn(q, k, v, seg, items, bt, out=out, lse=lse, **kw),
                                           warmup=20, rep=200))
        fl = 4 * c["d"] * c["n_q"] * c["pairs"]
        replays.append({"call": i, "in_pass_ms": round(c["ms"], 3), "alone_ms": round(ms, 3),
                        "in_pass_tflops": round(fl / (c["ms"] * 1e-3) / 1e12, 1),
                        "alone_tflops": round(fl / (ms * 1e-3) / 1e12, 1), "n_seg": c["n_seg"],
                        "q_rows": c["q_rows"], "k_len_mean": c["k_len_mean"], "n_items": c["n_items"]})
        print("replay", json.dumps(replays[-1]), flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, a.name), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
