"""Where the device waits in a BIO-2-shaped join: per pass, the host's launch times and the device's idle
time before the pass (CUDA events), Triton compilations and Python garbage collections on the host.

    PYTHONPATH=. python3 benchmarks/probes/chunk_gaps.py --tokenizer .cache/tok --anchors 60 --out $OUT

Wraps ModelRunner.run, Passes._insert and the scheduler's construction of one engine (a probe, not the
product); the join goes through Engine.join on text, as public_bench's BIO2 section does.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import gc
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
from gpu_worker import engine as engine_mod  # noqa: E402
from gpu_worker import passes as passes_mod  # noqa: E402
from gpu_worker import runner as runner_mod  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--anchors", type=int, default=60)
    ap.add_argument("--quantize", default=None)
    ap.add_argument("--in-flight", type=int, default=None, help="passes.IN_FLIGHT for this run")
    ap.add_argument("--cprofile", type=int, default=0, help="profile the host side of this many passes (from the 6th)")
    ap.add_argument("--gc-in-op", action="store_true", help="the collector on between an operation's chunks "
                    "(as before collector_paused covered whole operations)")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default="/tmp")
    ap.add_argument("--name", default="chunk_gaps.json")
    args = ap.parse_args()
    if args.gc_in_op:
        engine_mod.collector_paused = contextlib.nullcontext
    if args.in_flight:
        passes_mod.IN_FLIGHT = args.in_flight
    eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda", tokenizer=args.tokenizer,
                              quantize=args.quantize))
    w = Words(eng.tokenizer, 1)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)  # warm-up, as public_bench
    eng.filter(w.texts(160, 300), [wl.QUESTION])

    log: list[dict] = []
    events: list[str] = []
    t0 = [time.perf_counter()]
    now = lambda: time.perf_counter() - t0[0]  # noqa: E731

    prof = cProfile.Profile()

    def run(self, jobs):
        on = 5 <= len(log) < 5 + args.cprofile
        if on:
            prof.enable()
        start = torch.cuda.Event(enable_timing=True)
        h0 = now()
        ids, pos, meta, requests = self.build(jobs)
        h1 = now()
        start.record()
        self.ops.prepare_meta(meta, self.device)
        logits = self.model(ids, pos, meta, self.kv, self.ops)
        host = torch.empty(logits.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(logits, non_blocking=True)
        done = torch.cuda.Event(enable_timing=True)
        done.record()
        if on:
            prof.disable()
        log.append({"host_start": h0, "host_built": h1, "host_launched": now(), "jobs": len(jobs),
                    "tokens": int(ids.numel()), "start": start, "done": done})
        return runner_mod.Launched(host, done, requests)

    runner_mod.ModelRunner.run = run
    orig_insert = passes_mod.Passes._insert

    def insert(self, reqs):
        h = now()
        out = orig_insert(self, reqs)
        events.append(f"{h:.3f} insert {len(reqs)} reqs: {now() - h:.3f} s")
        return out

    passes_mod.Passes._insert = insert
    orig_sched = passes_mod.Scheduler

    def sched(*a, **k):
        h = now()
        s = orig_sched(*a, **k)
        events.append(f"{h:.3f} scheduler init: {now() - h:.3f} s")
        return s

    passes_mod.Scheduler = sched
    compiles = []
    try:
        from triton.runtime.jit import JITFunction
        orig_compile = JITFunction._do_compile

        def do_compile(self, *a, **k):
            h = now()
            out = orig_compile(self, *a, **k)
            compiles.append((round(h, 3), self.fn.__name__, round(now() - h, 3)))
            return out

        JITFunction._do_compile = do_compile
        compiles.append("hooked")
    except (ImportError, AttributeError):
        pass
    gcs, gc_t = [], {}

    def gc_cb(phase, info):
        if phase == "start":
            gc_t[0] = now()
        elif now() - gc_t[0] > 0.005:
            gcs.append((round(gc_t[0], 3), info["generation"], round(now() - gc_t[0], 3)))

    gc.callbacks.append(gc_cb)

    wa = Words(eng.tokenizer, 41)
    anchors = wa.texts(args.anchors, lambda: int(wa.rng.integers(4500, 5501)))
    partners = wa.partners(1127)
    torch.cuda.synchronize()
    t0[0] = time.perf_counter()
    eng.join(anchors, partners, wl.JOIN_QUESTION)
    torch.cuda.synchronize()
    wall = now()
    gc.callbacks.remove(gc_cb)
    rows = []
    for i, r in enumerate(log):
        busy = r["start"].elapsed_time(r["done"]) / 1e3
        idle = log[i - 1]["done"].elapsed_time(r["start"]) / 1e3 if i else None
        rows.append({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                     if k not in ("start", "done")} | {"gpu_s": round(busy, 4),
                                                       "idle_before_s": None if idle is None else round(idle, 4)})
    idle = [r["idle_before_s"] for r in rows[1:]]
    res = {"commit": args.commit, "gc_in_op": args.gc_in_op, "anchors": args.anchors, "partners": 1127, "quantize": args.quantize,
           "in_flight": passes_mod.IN_FLIGHT, "wall_s": wall, "passes": len(rows),
           "gpu_busy_s": sum(r["gpu_s"] for r in rows), "idle_s": float(np.sum(idle)),
           "idle_over_10ms": [(i + 1, x) for i, x in enumerate(idle) if x > 0.01],
           "triton_compiles": compiles, "gc_over_5ms": gcs, "events": events, "passes_log": rows}
    res["alloc"] = {k: v for k, v in torch.cuda.memory_stats().items() if k in
                    ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")}
    if args.cprofile:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(45)
        res["cprofile_tottime"] = buf.getvalue().splitlines()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
        res["cprofile_cumulative"] = buf.getvalue().splitlines()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / args.name).write_text(json.dumps(res, indent=1))
    print(f"wall {wall:.2f} s, {len(rows)} passes, gpu busy {res['gpu_busy_s']:.2f} s, idle {res['idle_s']:.2f} s; "
          f"idle > 10 ms before passes {res['idle_over_10ms']}; compiles {compiles}; gc {gcs}")


if __name__ == "__main__":
    main()
