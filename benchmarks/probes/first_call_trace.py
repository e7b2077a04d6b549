"""Where an operation's first full-size call in a process loses its time (probes/first_run_compiles.py: JOIN 8 x
1,000 2.57 then 1.96 s, BIO-2 16 anchors 4.70 then 4.25 s at 815fdb9, with no compile, no device allocation, and
every CUDA module loaded at start or not): after the public benchmark's warm-up, JOIN twice then BIO-2 (16
anchors) twice, each call under torch.profiler (profile_public.breakdown: GPU busy, kernel seconds by family,
device idle stretches), the Triton kernels compiled in it (jit_post_compile_hook) and the host's page faults, CPU
seconds and garbage collections, fresh anchors every call. --trace 2: each call's host under cProfile instead.

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/first_call_trace.py --tokenizer .cache/tok --commit $C --out $OUT
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from profile_public import host_profile, run  # noqa: E402
from public_bench import Words  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--trace", type=int, default=1, help="0: untraced walls only; 2: the host under cProfile")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    compiles = []  # every Triton compile from here on: (kernel with its argument specialization)
    try:
        from triton import knobs

        knobs.runtime.jit_post_compile_hook = lambda *a, **kw: compiles.append(str(kw.get("repr"))[:600])
    except (ImportError, AttributeError):
        compiles.append("no jit_post_compile_hook in this Triton")
    eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda", tokenizer=args.tokenizer))
    w = Words(eng.tokenizer, 1)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)  # public_bench's warm-up
    partners, bp = w.partners(1000), w.partners(1127)
    res = {"commit": args.commit, "calls": [], "compiled_before_calls": len(compiles)}
    gc_s = [0.0, 0.0]  # seconds in the garbage collector, start of the current collection

    def on_gc(phase, info):
        if phase == "start":
            gc_s[1] = time.perf_counter()
        else:
            gc_s[0] += time.perf_counter() - gc_s[1]
    gc.callbacks.append(on_gc)
    for name, n, ps in (("JOIN 8x1000", 8, partners), ("JOIN 8x1000", 8, partners),
                        ("BIO-2 16 anchors", 16, bp), ("BIO-2 16 anchors", 16, bp)):
        anchors = w.texts(n, 5000)
        seen = len(compiles)
        ru, cpu, gc0, g0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), gc_s[0], gc.get_stats()
        if args.trace == 2:
            hp = host_profile(dev, lambda: eng.join(anchors, ps, wl.JOIN_QUESTION), top=30)
            res["calls"].append({"call": name, **hp, "compiles": compiles[seen:]})
            print(name, round(hp["wall_s"], 3), hp["by_self_s"][:12], flush=True)
            (Path(args.out) / "first_call_trace.json").write_text(json.dumps(res, indent=1, default=float))
            continue
        st = run(eng, dev, lambda: eng.join(anchors, ps, wl.JOIN_QUESTION), trace=bool(args.trace))
        p = st.get("profile", {})
        ru2 = resource.getrusage(resource.RUSAGE_SELF)
        host = {"minor_faults": ru2.ru_minflt - ru.ru_minflt, "major_faults": ru2.ru_majflt - ru.ru_majflt,
                "process_cpu_s": round(time.process_time() - cpu, 3), "gc_s": round(gc_s[0] - gc0, 4),
                "gc_collections": [b["collections"] - a["collections"] for a, b in zip(g0, gc.get_stats())],
                "max_rss_mib": ru2.ru_maxrss // 1024}
        row = {"call": name, **{k: st[k] for k in ("wall_s", "passes", "fresh_tokens")}, "host": host,
               **{k: p.get(k) for k in ("gpu_busy_s", "kernel_s", "host_gap_s", "lead_in_ms", "tail_ms",
                                        "idle_by_stretch_s", "idle_over_1ms")},
               "family_s": {f: round(s * p["kernel_s"], 4) for f, s in p.get("family_share", {}).items()},
               "top_kernels": p.get("top_kernels", [])[:8], "compiles": compiles[seen:]}
        res["calls"].append(row)
        print({k: row[k] for k in ("call", "wall_s", "gpu_busy_s", "kernel_s", "host_gap_s", "lead_in_ms",
                                   "family_s", "compiles", "host")}, flush=True)
        (Path(args.out) / "first_call_trace.json").write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
