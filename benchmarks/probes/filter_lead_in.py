"""FILTER 2,048 x 300 words' first second on one time axis: the host's steps (each thread) and the device's idle.

Engine.filter on fresh texts through the public API (qwen3-4b-random, default settings), after public_bench's
warm-up, under torch.profiler. The engine's steps are wrapped in record_function for this probe only (below
the public API): the helper thread's tokenization of a chunk, Engine._run (a chunk's requests), the prefix
tree's inserts, the scheduler's planning of a pass, the runner's build and launch of a pass, the wait for a
pass's logits. Printed and written: each step's (thread, start ms, end ms) in the first --window ms from the
call, the device's idle stretches over 1 ms on the same axis, and kernel launches by the host per 10 ms.

    PYTHONPATH=. python3 benchmarks/probes/filter_lead_in.py --tokenizer .cache/tok --out $OUT
    PYTHONPATH=. python3 benchmarks/probes/filter_lead_in.py --smoke --out /tmp/lead   # CPU: runs, times nothing
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_workloads as wl  # noqa: E402
from public_bench import Words  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from gpu_worker import runner as runner_mod  # noqa: E402
from gpu_worker import scheduler as scheduler_mod  # noqa: E402

OP = "probe.filter"


def marked(name, fn):
    def inner(*a, **k):
        with record_function(name):
            return fn(*a, **k)
    return inner


def instrument(eng):
    eng.chunks.tokenize = marked("step.tokenize_chunk", eng.chunks.tokenize)
    eng._run = marked("step.engine_run", eng._run)
    p = eng.passes
    p._insert = marked("step.insert", p._insert)
    p.runner.run = marked("step.runner_run", p.runner.run)
    p.runner.build = marked("step.build", p.runner.build)
    scheduler_mod.Scheduler.next_pass = marked("step.next_pass", scheduler_mod.Scheduler.next_pass)
    runner_mod.Launched.wait = marked("step.wait", runner_mod.Launched.wait)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--docs", type=int, default=2048)
    ap.add_argument("--words", type=int, default=300)
    ap.add_argument("--window", type=float, default=1000.0, help="ms from the call")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default=".")
    ap.add_argument("--name", default="filter_lead_in.json")
    a = ap.parse_args()
    dev = "cpu" if a.smoke else "cuda"
    model = a.model or ("tiny-qwen3-random" if a.smoke else "qwen3-4b-random")
    docs, words = (64, 40) if a.smoke else (a.docs, a.words)
    eng = Engine(EngineConfig(model=model, device=dev, tokenizer=a.tokenizer,
                              **({"token_budget": 512} if a.smoke else {})))
    w = Words(eng.tokenizer, 7)
    eng.join(w.texts(2, 500 if not a.smoke else 50), w.partners(50), wl.JOIN_QUESTION)  # as public_bench warms up
    eng.filter(w.texts(64, words), [wl.QUESTION])
    eng.filter(w.texts(160, words), [wl.QUESTION])
    instrument(eng)
    texts = w.texts(docs, words)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    if dev == "cuda":
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        with record_function(OP):
            eng.filter(texts, [wl.QUESTION])
            if dev == "cuda":
                torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    op, steps, kernels, launches = None, [], [], []
    for e in prof.events():
        cuda = e.device_type == torch.autograd.DeviceType.CUDA
        if e.name == OP and not cuda:
            op = e.time_range
        elif e.name.startswith("step.") and not cuda:
            steps.append((e.name[5:], e.thread, e.time_range.start, e.time_range.end))
        elif cuda and not e.name.startswith(("step.", OP)):
            kernels.append((e.time_range.start, e.time_range.end))
        elif "LaunchKernel" in e.name or "cuLaunch" in e.name:
            launches.append(e.time_range.start)
    ms = lambda t: round((t - op.start) / 1e3, 1)  # noqa: E731
    threads = {th: i for i, th in enumerate(sorted({s[1] for s in steps}, key=lambda th: min(
        s[2] for s in steps if s[1] == th)))}
    res = {"commit": a.commit, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "wall_s": wall,
           "docs": docs, "words": words, "passes": eng.stats.get("forward_passes"), "window_ms": a.window}
    res["steps"] = [[name, threads[th], ms(s), ms(e2)] for name, th, s, e2 in sorted(steps, key=lambda x: x[2])
                    if ms(s) < a.window]
    idle, end = [], None
    for s, e2 in sorted(kernels):
        if end is not None and s - end > 1000 and ms(end) < a.window:
            idle.append([ms(end), round((s - end) / 1e3, 1)])
        end = e2 if end is None else max(end, e2)
    res["first_kernel_ms"] = ms(min(s for s, _ in kernels)) if kernels else None
    res["device_idle_over_1ms"] = idle
    buckets = [0] * int(a.window // 10)
    for t in launches:
        i = int(ms(t) // 10)
        if 0 <= i < len(buckets):
            buckets[i] += 1
    res["launches_per_10ms"] = buckets
    for st in res["steps"]:
        print("step", st, flush=True)
    print("first kernel", res["first_kernel_ms"], "idle", idle, flush=True)
    print("launches per 10 ms", buckets, flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, a.name), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
