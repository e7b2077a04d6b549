"""Where a decode step's time goes, and the decode attention kernel's launch settings (H200).

1. quail_kernels.decode_attention on synthetic steps shaped like GENERATE (416 sequences of 330 keys each)
   and EXTRACT (52 documents of 1,000 keys under 8 sequences each, 30 own keys a sequence), pages of 16
   contiguous slots in random order, Qwen3-4B's heads (32 query, 8 KV, d 128): the bytes of keys and
   values read per second for each setting (keys per inner step, warps, stages, keys per item, query rows
   per item).
2. A profile (torch.profiler, CUDA time per kernel) of the engine's decode steps alone, launched kernel by kernel
   (a run to 33 tokens less a run to 1 token).

    PYTHONPATH=.:benchmarks python benchmarks/probes/decode_attn_probe.py --tokenizer .cache/tok --out DIR
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch

import importlib

da = importlib.import_module("quail_kernels.decode_attention")  # (the package exports a function of that name)


def layout(groups, rng):
    """groups: (base keys, [own keys]) -> flat slots, segments, per-sequence key count; slots on random pages."""
    total = sum(b + sum(o) for b, o in groups)
    pages = rng.permutation(-(-total // 16) + len(groups) * 20)
    flat, seg, used = [], [], 0
    slot_of = lambda i: pages[i // 16] * 16 + i % 16  # noqa: E731
    s = 0
    for base, own in groups:
        k0 = len(flat)
        flat.extend(slot_of(used + i) for i in range(base))
        used += -(-base // 16) * 16
        if base:
            seg.append((s, len(own), k0, base))
        for o in own:
            k0 = len(flat)
            flat.extend(slot_of(used + i) for i in range(o))
            used += -(-o // 16) * 16
            seg.append((s, 1, k0, o))
            s += 1
    return np.array(flat, dtype=np.int64), np.array(seg, dtype=np.int64).T, s, int(pages.max() + 1) * 16


def sweep(dev, out):
    rng = np.random.default_rng(0)
    shapes = {"GENERATE": [(0, [330])] * 416, "EXTRACT": [(1000, [30] * 8)] * 52}
    n_kv, rep, d = 8, 4, 128
    res = []
    for name, groups in shapes.items():
        flat, seg, n_seq, n_slots = layout(groups, rng)
        k = torch.randn(n_slots, n_kv, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        q = torch.randn(n_seq, n_kv * rep, d, device=dev, dtype=torch.bfloat16)
        slots = torch.from_numpy(flat).to(dev)
        nbytes = len(flat) * n_kv * d * 2 * 2
        for _ in range(2):  # the yardstick: torch gathering the same keys and values (read + write)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(20):
                k.index_select(0, slots), v.index_select(0, slots)
            b.record()
            b.synchronize()
        ms = a.elapsed_time(b) / 20
        res.append({"shape": name, "torch_gather_ms": ms, "gather_read_gb_s": nbytes / ms / 1e6})
        print(json.dumps(res[-1]), flush=True)
        for qb_rows, chunk in itertools.product((16, 32, 64), (128, 256, 512, 1024)):
            da.QB_ROWS = qb_rows
            plan = da.plan_decode(*seg, n_seq, da.seqs_per_item(rep), chunk)
            items = torch.from_numpy(plan.items).to(dev).contiguous()
            n_items = torch.tensor([plan.items.shape[1]], device=dev)
            ptr, ents = torch.from_numpy(plan.ptr).to(dev), torch.from_numpy(plan.ents).to(dev)
            po = torch.empty(plan.n_partials, n_kv, rep, d, device=dev)
            pl = torch.empty(plan.n_partials, n_kv, rep, device=dev)
            cap = plan.items.shape[1]
            grids = [0] if (qb_rows, chunk) != (32, 256) else [0, cap, 132, 264, 528, 2048]
            for (bn, nw, ns), progs in itertools.product(itertools.product((32, 64, 128), (2, 4, 8), (1, 2, 3)), grids):
                if (qb_rows, chunk) != (32, 256) and (bn, nw, ns) != (64, 2, 2):
                    continue
                if progs and (bn, nw, ns) != (64, 2, 2):
                    continue
                try:
                    f = lambda: da.decode_attention(q, k, v, slots, items, n_items, ptr, ents, po, pl,  # noqa: E731
                                                    programs=progs, block_n=bn, num_warps=nw, num_stages=ns)
                    f()
                    torch.cuda.synchronize()
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    for _ in range(20):
                        f()
                    b.record()
                    b.synchronize()
                    ms = a.elapsed_time(b) / 20
                    r = {"shape": name, "qb_rows": qb_rows, "chunk": chunk, "block_n": bn, "warps": nw, "stages": ns,
                         "programs": progs or min(cap, da.PERSISTENT), "ms": ms, "gb_s": nbytes / ms / 1e6, "items": int(plan.items.shape[1])}
                except Exception as e:  # a setting that does not compile (shared memory) is recorded
                    r = {"shape": name, "qb_rows": qb_rows, "chunk": chunk, "block_n": bn, "warps": nw, "stages": ns,
                         "error": str(e)[:200]}
                res.append(r)
                print(json.dumps(r), flush=True)
    da.QB_ROWS = 32
    (out / "decode_attn_sweep.json").write_text(json.dumps(res, indent=1))
    for name in shapes:
        ok = [r for r in res if r["shape"] == name and "ms" in r and "error" not in r]
        best = min(ok, key=lambda r: r["ms"])
        print("BEST", name, json.dumps(best))


def profile(args, out):
    """CUDA time per kernel of decode steps alone: 416 prompts of ~200 tokens run to 1 token and to 33
    tokens under the profiler, kernel by kernel (no CUDA graphs); the difference is 32 steps' kernels."""
    from gpu_worker import Engine, EngineConfig
    from public_bench import Words

    eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda", tokenizer=args.tokenizer, cuda_graphs=False))
    words = Words(eng.tokenizer, 3)
    docs = words.texts(32 + 2 * 416, 200)  # each run its own prompts: the same prefill work, none cached
    eng.generate_ids(docs[:32], "Continue the text.", max_tokens=4, ignore_eos=True)  # compile
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile as prof

    runs = {}
    for k, n in enumerate((1, 33)):
        part = docs[32 + 416 * k:32 + 416 * (k + 1)]
        before = dict(eng.stats)
        t0 = time.perf_counter()
        with prof(activities=[ProfilerActivity.CUDA]) as p:
            eng.generate_ids(part, "Continue the text.", max_tokens=n, ignore_eos=True)
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        ka = {e.key: (e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total, e.count)
              for e in p.key_averages()}
        steps = eng.stats.get("decode_steps", 0) - before.get("decode_steps", 0)
        runs[n] = (wall, steps, ka)
    (w1, s1, a), (w2, s2, b) = runs[1], runs[33]
    steps = s2 - s1
    rows = sorted(((k, (b[k][0] - a.get(k, (0, 0))[0]) / 1e3 / steps, (b[k][1] - a.get(k, (0, 0))[1]) / steps)
                   for k in b), key=lambda r: -r[1])
    total = sum(ms for _, ms, _ in rows if ms > 0)
    lines = [f"decode steps alone: {steps} steps, wall {w2 - w1:.3f} s more, {1e3 * (w2 - w1) / steps:.2f} ms a step "
             f"(launched kernel by kernel, under the profiler); kernels {total:.2f} ms a step", "",
             f"{'kernel':90s} {'ms/step':>8s} {'calls/step':>10s}"]
    lines += [f"{k[:90]:90s} {ms:8.3f} {c:10.1f}" for k, ms, c in rows[:40] if abs(ms) > 0.001]
    text = "\n".join(lines)
    (out / "decode_profile.txt").write_text(text + "\n")
    print(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="sweep,profile")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    if "sweep" in args.parts:
        sweep(dev, out)
    if "profile" in args.parts:
        profile(args, out)


if __name__ == "__main__":
    main()
