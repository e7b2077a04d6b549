"""Where an operation's host time sits against its passes: lead-in (call to the first pass launched), each
pass's preparation and launch, the waits on the device, and the tail (last pass read to the call's return);
the host steps before the first pass's launch (tokenization on the calling and the helper thread, requests
built, tree inserts, the first pass planned and built).

Host timestamps (ms from the call) of Engine.join on JOIN 8 x 1,000 and BIO-2 scaled to --bio2-anchors, and
of Engine.filter on FILTER 2,048 x 300 words, fresh texts each run, after a warm-up. The engine's own
methods are wrapped for timing only (below the public API). (At 207e3df a --ramp option set the engine's
first-pass fractions, which 3164be8 removed: `results/h200_207e3df/`.)

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/host_timeline.py --tokenizer .cache/tok --out $OUT
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from gpu_bench import sync  # noqa: E402
from public_bench import Words  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from gpu_worker import runner as runner_mod  # noqa: E402
from gpu_worker import scheduler as scheduler_mod  # noqa: E402


def instrument(eng, log: list):
    """Wrap the runner's run and build, the launched passes' waits, the scheduler's planning and the engine's
    steps before and after its passes with timestamps (each call logs (label, start, end))."""
    def stamped(f, label):
        def timed(*a, **kw):
            s = time.perf_counter()
            out = f(*a, **kw)
            log.append((label, s, time.perf_counter()))
            return out
        return timed

    r = eng.passes.runner
    run = r.run

    def t_run(jobs):  # a pass's tokens and jobs too
        a = time.perf_counter()
        out = run(jobs)
        log.append(("run", a, time.perf_counter(), sum(j.num_tokens for j in jobs), len(jobs)))
        return out

    r.run = t_run
    runner_mod.Launched.wait = stamped(runner_mod.Launched.wait, "wait")
    scheduler_mod.Scheduler.next_pass = stamped(scheduler_mod.Scheduler.next_pass, "next_pass")
    # (object, attribute, label): the helper thread's tokenization of a chunk is DocumentChunks.tokenize
    steps = [(r, "build", "build"), (eng, "_collect", "_collect"), (eng, "_margins", "_margins"),
             (eng, "_tokenize", "_tokenize"), (eng.fitter, "join_requests", "join_requests"),
             (eng.fitter, "fit", "fit"), (eng.passes, "_insert", "_insert"), (eng.chunks, "tokenize", "chunk_tokenize")]
    for obj, attr, label in steps:
        setattr(obj, attr, stamped(getattr(obj, attr), label))


def timeline(eng, dev, fn, log) -> dict:
    log.clear()
    sync(dev)
    t0 = time.perf_counter()
    fn()
    sync(dev)
    end = time.perf_counter()
    ms = lambda t: round((t - t0) * 1e3, 1)  # noqa: E731
    runs = [e for e in log if e[0] == "run"]
    waits = [e for e in log if e[0] == "wait"]
    builds = [e for e in log if e[0] == "build"]
    return {"wall_ms": ms(end), "first_run_enter_ms": ms(runs[0][1]), "first_run_exit_ms": ms(runs[0][2]),
            "first_build_ms": round((builds[0][2] - builds[0][1]) * 1e3, 1),
            "passes": [[ms(a), ms(b), tok, jobs] for _, a, b, tok, jobs in runs],
            "waits": [[ms(a), ms(b)] for _, a, b in waits],
            "last_wait_exit_ms": ms(max(b for _, _, b in waits)),
            "after_last_wait_ms": round((end - max(b for _, _, b in waits)) * 1e3, 1),
            "collect": [[e[0], ms(e[1]), ms(e[2])] for e in log if e[0] in ("_collect", "_margins")],
            # every host step that began before the first pass was launched (fit: first and last call only)
            "lead_in_steps": lead_in_steps(log, t0, runs[0][2])}


def lead_in_steps(log, t0: float, until: float) -> list:
    out, fits = [], [e for e in log if e[0] == "fit" and e[1] <= until]
    for e in log:
        if e[1] <= until and e[0] not in ("fit", "wait"):
            out.append([e[0], round((e[1] - t0) * 1e3, 1), round((e[2] - t0) * 1e3, 1)])
    if fits:
        out.append([f"fit x{len(fits)}", round((fits[0][1] - t0) * 1e3, 1), round((fits[-1][2] - t0) * 1e3, 1)])
    return sorted(out, key=lambda x: x[1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--model", default="qwen3-4b-random")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--bio2-anchors", type=int, default=40)
    ap.add_argument("--anchor-words", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--name", default="host_timeline.json")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default="benchmarks/probes/results")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    eng = Engine(EngineConfig(model=args.model, device=args.device, tokenizer=args.tokenizer))
    w = Words(eng.tokenizer, 43)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)
    eng.filter(w.texts(64, 300), [wl.QUESTION])
    log: list = []
    instrument(eng, log)
    res = {"commit": args.commit, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}
    work = {"JOIN 8x1000": lambda: (lambda a, p: lambda: eng.join(a, p, wl.JOIN_QUESTION))(
                w.texts(8, args.anchor_words), w.partners(1000)),
            "FILTER 2048x300": lambda: (lambda d: lambda: eng.filter(d, [wl.QUESTION]))(w.texts(2048, 300)),
            f"BIO-2 {args.bio2_anchors} anchors": lambda: (lambda a, p: lambda: eng.join(a, p, wl.JOIN_QUESTION))(
                w.texts(args.bio2_anchors, args.anchor_words), w.partners(1127))}
    for name, make in work.items():
        res[name] = [timeline(eng, dev, make(), log) for _ in range(args.runs)]
        for r in res[name]:
            print(name, {k: v for k, v in r.items() if k not in ("passes", "waits", "collect", "lead_in_steps")},
                  "lead-in", r["lead_in_steps"],
                  "passes", r["passes"][:3], "collect", r["collect"], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / args.name).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
