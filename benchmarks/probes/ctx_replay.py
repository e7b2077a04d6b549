"""The segment-attention calls of real JOIN / BIO-2 passes, timed in place and replayed with variants.

A JOIN 8 x 1,000 (and optionally BIO-2 scaled to --bio2-anchors anchors) runs through Engine.join at
default settings; every `quail_kernels.seg_attention` call is timed with CUDA events and classed as
causal (long sequences: the anchors' own tokens), context (a group's queries over its cached
context, merged in place) or extra context (the shared words under an anchor, `ctx_seg2`). The
first call of each kind and pass keeps its inputs; afterwards each kept call is replayed with the
softmax step plain and fused (both orders, averaged) and its FLOPs (4 * d * heads * attended pairs, from its segments) give TFLOP/s.

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/ctx_replay.py --tokenizer .cache/tok --bio2-anchors 16 --out $OUT
    ... --quantize fp8 --keep 6           # the FP8 engine's calls (float8 context keys)

results/h200_324259c_forms/: the kernel then had the two halves of the fused step as separate switches
(scale in the exponent's multiply-add: "fma"; P @ V accumulated in the dot: "dot_acc"); the first run there
also tried Triton's warp specialization of the key loop ("ws", no gain).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from public_bench import Words  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from quail_kernels.seg_attention import seg_items  # noqa: E402


def pairs(seg: np.ndarray, causal: bool) -> int:
    q_len, k_len = seg[1].astype(np.int64), seg[3].astype(np.int64)
    return int((q_len * (q_len + 1) // 2).sum()) if causal else int((q_len * k_len).sum())


class _Clock:
    """CUDA events on a GPU, the host clock elsewhere (--smoke on the CPU)."""

    def __init__(self, gpu: bool):
        self.gpu = gpu
        self.t = None
        if gpu:
            self.ev = torch.cuda.Event(enable_timing=True)

    def record(self):
        if self.gpu:
            self.ev.record()
        else:
            self.t = time.perf_counter()

    def elapsed_time(self, other) -> float:
        return self.ev.elapsed_time(other.ev) if self.gpu else (other.t - self.t) * 1e3


def bench(fn, gpu: bool) -> float:
    if gpu:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


class Recorder:
    """Wraps quail_kernels.seg_attention: events around each call, inputs of the first call per (pass, kind)."""

    def __init__(self, kernels_mod, keep: int):
        self.k, self.orig, self.keep = kernels_mod, kernels_mod.seg_attention, keep
        self.calls, self.kept, self.seen = [], [], set()

    def __call__(self, q, k, v, seg, items, block_t, *, causal=False, out=None, lse=None, merge=False, **launch):
        key = (seg.data_ptr(), causal, seg.shape[1])
        a, b = _Clock(q.is_cuda), _Clock(q.is_cuda)
        a.record()
        r = self.orig(q, k, v, seg, items, block_t, causal=causal, out=out, lse=lse, merge=merge, **launch)
        b.record()
        self.calls.append((key, a, b))
        if key not in self.seen:
            self.seen.add(key)
            segh = seg.cpu().numpy()
            entry = {"key": key, "causal": causal, "merge": merge, "seg": segh, "launch": launch,
                     "block_t": block_t, "q_rows": int(segh[1].sum()), "n_seg": int(segh.shape[1]),
                     "k_rows": int(segh[3].sum()), "pairs": pairs(segh, causal), "q_shape": tuple(q.shape),
                     "kv_shape": tuple(k.shape)}
            if len(self.kept) < self.keep:
                entry["tensors"] = (q.clone(), k.clone(), v.clone(), seg.clone(), items.clone(),
                                    None if out is None else out.clone(), None if lse is None else lse.clone())
            self.kept.append(entry)
        return r


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--model", default="qwen3-4b-random")
    ap.add_argument("--bio2-anchors", type=int, default=0)
    ap.add_argument("--keep", type=int, default=12)
    ap.add_argument("--quantize", default=None)
    ap.add_argument("--out", default="/tmp/ctx_replay")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny model, small sizes (Triton's interpreter)")
    a = ap.parse_args(argv)
    dev = "cpu" if a.smoke else "cuda"
    if a.smoke:
        a.model = "tiny-qwen3-random"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    Path(a.out).mkdir(parents=True, exist_ok=True)
    eng = Engine(EngineConfig(model=a.model, device=dev, tokenizer=a.tokenizer, quantize=a.quantize))
    w = Words(eng.tokenizer, 41)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)  # compile
    kmod = eng.rt.ops.kernels
    rec = Recorder(kmod, a.keep)
    kmod.seg_attention = rec
    res = {"commit": a.commit, "runs": {}}
    n_a, n_w, n_p = (2, 300, 40) if a.smoke else (8, 5000, 1000)
    work = [("JOIN 8x1000", w.texts(n_a, n_w), w.partners(n_p))]
    if a.bio2_anchors:
        work.append((f"BIO-2 {a.bio2_anchors}", w.texts(a.bio2_anchors, lambda: int(w.rng.integers(4500, 5501))),
                     w.partners(1127)))
    for name, anchors, partners in work:
        rec.calls.clear()
        sync()
        t = time.perf_counter()
        eng.join(anchors, partners, wl.JOIN_QUESTION)
        sync()
        wall = time.perf_counter() - t
        by = {}
        info = {e["key"]: e for e in rec.kept}
        for key, ev_a, ev_b in rec.calls:
            e = info[key]
            kind = "causal" if e["causal"] else ("context" if e["merge"] and e["k_rows"] > 64 * e["n_seg"] else "extra")
            d = by.setdefault(kind, {"calls": 0, "ms": 0.0, "flop": 0.0})
            d["calls"] += 1
            d["ms"] += ev_a.elapsed_time(ev_b)
            d["flop"] += 4.0 * 128 * 32 * e["pairs"]
        for d in by.values():
            d["tflops"] = d["flop"] / (d["ms"] / 1e3) / 1e12 if d["ms"] else 0.0
        res["runs"][name] = {"wall_s": wall, "by_kind": by}
        print(name, f"wall {wall:.2f}s", {k: (v["calls"], round(v["ms"], 1), round(v["tflops"])) for k, v in by.items()},
              flush=True)
    kmod.seg_attention = rec.orig
    # the softmax step's two forms (quail_kernels.seg_attention's `fused_step`), each way round: the first
    # variant warms the call, the two orders are averaged
    forms = {"plain": {"fused_step": False}, "fused": {"fused_step": True}}
    order = list(forms) + list(forms)[::-1]
    variants = {"default": {}, **{f"{n}#{i}": forms[n] for i, n in enumerate(order)}}
    rows = []
    for e in rec.kept:
        if "tensors" not in e:
            continue
        q, k, v, seg, items, out, lse = e["tensors"]
        row = {x: e[x] for x in ("causal", "merge", "q_rows", "n_seg", "k_rows", "pairs", "block_t")}
        flop = 4.0 * 128 * 32 * e["pairs"]
        ref = None
        for vname, var in variants.items():
            launch = dict(e["launch"], **{x: y for x, y in var.items() if x != "block_m"})
            bt = e["block_t"]
            it = items
            if "block_m" in var:
                bt = max(1, var["block_m"] // 4)
                it = torch.from_numpy(seg_items(e["seg"][1], bt)).to(q.device)
            o2 = None if out is None else out.clone()
            l2 = None if lse is None else lse.clone()

            def fn():
                return rec.orig(q, k, v, seg, it, bt, causal=e["causal"], out=o2, lse=l2, merge=e["merge"], **launch)
            try:
                r = fn()
                rows_q = torch.cat([torch.arange(int(s0), int(s0) + int(n0)) for s0, n0 in zip(e["seg"][0], e["seg"][1])])
                got = r[0][rows_q.to(q.device)].float()
                if ref is None:
                    ref = got.clone()
                diff = (got - ref).abs().max().item()
                ms = bench(fn, q.is_cuda)
                row[vname] = {"ms": ms, "tflops": flop / (ms / 1e3) / 1e12, "max_diff_vs_default": diff}
            except Exception as ex:  # noqa: BLE001 - a variant that does not compile is a result
                row[vname] = {"error": f"{type(ex).__name__}: {str(ex)[:200]}"}
        rows.append(row)
        print({x: row[x] for x in ("causal", "q_rows", "n_seg", "k_rows")},
              {vn: round(row[vn].get("tflops", -1)) for vn in variants}, flush=True)
        for n in forms:
            ms = [row[v]["ms"] for v in variants if v.split("#")[0] == n and "ms" in row[v]]
            row[n] = {"ms_mean": sum(ms) / len(ms), "tflops": flop / (sum(ms) / len(ms) / 1e3) / 1e12} if ms else {}
        print("   mean of both orders:", {n: round(row[n].get("tflops", -1)) for n in forms}, flush=True)
    res["replay"] = rows
    (Path(a.out) / f"ctx_replay{'_' + a.quantize if a.quantize else ''}.json").write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
