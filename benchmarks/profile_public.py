"""Where a pass's time goes: FILTER 2,048 x 300 words, JOIN 8 x 1,000 and BIO-2 (scaled: --bio2-anchors of its 500 anchors) through the
public API (Engine.join on text) under torch.profiler, at default settings (but --quantize).

Per workload: wall seconds, GPU busy seconds (the union of kernel intervals), host gaps (wall minus busy:
the device idle while the host tokenizes, plans or waits), and each kernel family's share of the GPU time
(GEMMs, context attention, causal attention, norms, rope + KV store, silu*mul, FP8 row quantization,
gathers and copies, other), with the top kernels by time. One JSON and a log; the table in BENCHMARKS.md.

    PYTHONPATH=. python3 benchmarks/profile_public.py --tokenizer .cache/tok --commit $(git rev-parse HEAD) --out $OUT
    PYTHONPATH=. python benchmarks/profile_public.py --smoke --out /tmp/prof   # CPU: runs, times nothing
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_workloads as wl  # noqa: E402
from gpu_bench import sync  # noqa: E402
from public_bench import Words  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402

log = logging.getLogger("profile_public")
OP_MARK = "profile_public.operation"  # the profiled call's span on the host
# kernel family by name (first match wins); names as CUDA reports them (cuBLAS/CUTLASS GEMMs, Triton kernels)
FAMILIES = (("gemm", ("gemm", "sm90_xmma", "cutlass", "cublas", "_scaled_mm", "nvjet", "sm80_xmma")),
            ("context attention", ("_seg_attn_kernel",)),
            ("causal attention", ("_varlen_attn_kernel", "flash")),
            ("norms", ("rmsnorm",)),
            ("rope + kv store", ("rope",)),
            ("silu*mul", ("silu",)),
            ("fp8 quantize", ("quant",)),
            ("lse merge", ("merge",)),
            ("gather / copy / index", ("index", "gather", "copy", "memcpy", "cat", "scatter", "elementwise")))


def family(name: str) -> str:
    low = name.lower()
    return next((f for f, keys in FAMILIES if any(k in low for k in keys)), "other")


def busy_seconds(intervals) -> float:
    """Length of the union of [start, end) intervals (microseconds in, seconds out)."""
    total, end = 0.0, -1.0
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total / 1e6


def idle_stretches(intervals) -> list:
    """(start, length) in microseconds of each idle stretch between kernels."""
    out, end = [], None
    for a, b in sorted(intervals):
        if end is not None and a > end:
            out.append((end, a - end))
        end = b if end is None else max(end, b)
    return out


def gaps(idle, t0: float, min_us: float = 1000.0) -> list:
    """(offset from the first kernel, length) in ms of each idle stretch over `min_us`."""
    return [(round((s - t0) / 1e3, 1), round(g / 1e3, 1)) for s, g in idle if g > min_us]


def gap_buckets(idle) -> dict:
    """Idle seconds by the length of each idle stretch (launch-bound stretches are the short ones)."""
    out = {"under_20us": 0.0, "20us_to_200us": 0.0, "200us_to_1ms": 0.0, "over_1ms": 0.0}
    for _, g in idle:
        k = "under_20us" if g < 20 else "20us_to_200us" if g < 200 else "200us_to_1ms" if g < 1000 else "over_1ms"
        out[k] += g / 1e6
    return out


def breakdown(prof, wall: float) -> dict:
    kernels, intervals, op, first_cpu = {}, [], None, None
    for e in prof.events():
        if e.name == OP_MARK:  # the host's span (its GPU-side annotation is not a kernel)
            if e.device_type != torch.autograd.DeviceType.CUDA:
                op = e.time_range
            continue
        if e.device_type != torch.autograd.DeviceType.CUDA:
            if e.name.startswith("aten::") or e.name.startswith("cuda"):
                first_cpu = e.time_range.start if first_cpu is None else min(first_cpu, e.time_range.start)
            continue
        t = e.time_range
        intervals.append((t.start, t.end))
        kernels[e.name] = kernels.get(e.name, 0.0) + (t.end - t.start) / 1e6
    gpu = sum(kernels.values())
    fams: dict[str, float] = {}
    for name, s in kernels.items():
        fams[family(name)] = fams.get(family(name), 0.0) + s
    busy = busy_seconds(intervals)
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:15]
    stretches = idle_stretches(intervals)
    first = min(a for a, _ in intervals) if intervals else None
    idle = gaps(stretches, first) if intervals else []
    edges = {}
    if op is not None and intervals:  # the operation's own span against its first and last kernel
        edges = {"lead_in_ms": (first - op.start) / 1e3,
                 "first_host_op_ms": None if first_cpu is None else (first_cpu - op.start) / 1e3,
                 "tail_ms": (op.end - max(b for _, b in intervals)) / 1e3}
    return {"wall_s": wall, "gpu_busy_s": busy, "host_gap_s": wall - busy, "host_gap_share": (wall - busy) / wall,
            **edges, "idle_by_stretch_s": gap_buckets(stretches),
            "kernel_s": gpu, "family_share": {f: s / gpu for f, s in sorted(fams.items(), key=lambda kv: -kv[1])}
            if gpu else {}, "top_kernels": [{"name": n[:120], "s": s, "share": s / gpu} for n, s in top],
            "idle_over_1ms": {"count": len(idle), "s": sum(g for _, g in idle) / 1e3, "at_ms_len_ms": idle[:60]}}


def _alloc(dev) -> dict:
    """The caching allocator's retries (a failed cudaMalloc that frees the cache and syncs) and device mallocs."""
    if dev.type != "cuda":
        return {}
    st = torch.cuda.memory_stats(dev)
    return {k: int(st.get(k, 0)) for k in ("num_alloc_retries", "num_device_alloc", "num_sync_all_streams")}


def run(eng, dev, fn, trace: bool):
    eng.reset_stats()
    sync(dev)
    a0 = _alloc(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) if trace else _null() as prof:
        t0 = time.perf_counter()
        with record_function(OP_MARK) if trace else _null():
            fn()
            sync(dev)
        wall = time.perf_counter() - t0
    st = {"wall_s": wall, "requested_tok_s": eng.stats["requested_tokens"] / wall,
          "passes": eng.stats["forward_passes"], "fresh_tokens": eng.stats["fresh_tokens"],
          "requested_tokens": eng.stats["requested_tokens"],
          "allocator": {k: v - a0[k] for k, v in _alloc(dev).items()}}
    if trace:
        st["profile"] = breakdown(prof, wall)
    return st


def host_profile(dev, fn, top: int = 25) -> dict:
    """The host's own time in one more run under cProfile: the functions of most self time and most
    cumulative time (file:line name, seconds). The device runs meanwhile; this is the host's side only."""
    import cProfile
    import pstats

    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    fn()
    sync(dev)
    pr.disable()
    wall = time.perf_counter() - t0
    st = pstats.Stats(pr)

    def rows(key):
        items = sorted(st.stats.items(), key=lambda kv: -kv[1][key])[:top]
        return [[f"{Path(f).name}:{ln} {name}", round(v[key], 4), v[1]] for (f, ln, name), v in items]
    return {"wall_s": wall, "by_self_s": rows(2), "by_cumulative_s": rows(3)}


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--quantize", default=None, choices=[None, "fp8"])
    ap.add_argument("--bio2-anchors", type=int, default=40, help="BIO-2's anchors profiled (of 500)")
    ap.add_argument("--token-budget", type=int, default=None, help="EngineConfig.token_budget (default: the engine's)")
    ap.add_argument("--workloads", default="FILTER,JOIN,BIO2")
    ap.add_argument("--host-profile", action="store_true", help="one more run of each workload under cProfile")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--name", default="profile.json")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    if args.smoke:
        args.model, args.device = args.model or "tiny-qwen3-random", args.device or "cpu"
    args.model, args.device = args.model or "qwen3-4b-random", args.device or "cuda"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                        handlers=[logging.StreamHandler(sys.stdout),
                                  logging.FileHandler(Path(args.out) / (Path(args.name).stem + ".log"))])
    dev = torch.device(args.device)
    eng = Engine(EngineConfig(model=args.model, device=args.device, tokenizer=args.tokenizer, quantize=args.quantize,
                              token_budget=args.token_budget))
    w = Words(eng.tokenizer, 41)
    words, n_join, n_p = (300, 2, 30) if args.smoke else (5000, 8, 1000)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)  # warm-up: kernels compile
    res = {"commit": args.commit, "command": " ".join(sys.argv), "quantize": args.quantize, "model": args.model,
           "token_budget_arg": args.token_budget,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "bio2_anchors": args.bio2_anchors, "kv_slots": eng.rt.kv_slots, "token_budget": eng.rt.token_budget}
    partners = w.partners(n_p)
    n_f, f_words = (24, 40) if args.smoke else (2048, 300)
    if "FILTER" in args.workloads.split(","):  # FILTER 2,048 x 300 words: the GEMM-bound workload
        for label, trace in (("untraced", False), ("untraced_again", False), ("traced", True)):
            docs = w.texts(n_f, f_words)  # fresh documents each run: nothing cached
            res.setdefault("FILTER 2048x300", {})[label] = run(eng, dev, lambda: eng.filter(docs, [wl.QUESTION]), trace)
        if args.host_profile:
            docs = w.texts(n_f, f_words)
            res["FILTER 2048x300"]["host"] = host_profile(dev, lambda: eng.filter(docs, [wl.QUESTION]))
        p = res["FILTER 2048x300"]["traced"]["profile"]
        log.info("FILTER: untraced %.2f s, again %.2f s; traced %.2f s, GPU busy %.2f s, host gaps %.1f%%; %s",
                 res["FILTER 2048x300"]["untraced"]["wall_s"], res["FILTER 2048x300"]["untraced_again"]["wall_s"],
                 p["wall_s"], p["gpu_busy_s"], 100 * p["host_gap_share"],
                 ", ".join(f"{k} {100 * v:.1f}%" for k, v in p["family_share"].items()))
    for key, name, make in (("JOIN", "JOIN 8x1000", lambda: (w.texts(n_join, words), partners)),
                            ("BIO2", f"BIO-2 {args.bio2_anchors} anchors x 1127", lambda: (
                           w.texts(args.bio2_anchors if not args.smoke else 3,
                                   lambda: int(w.rng.integers(4500, 5501)) if not args.smoke else 300),
                           w.partners(1127 if not args.smoke else 30)))):
        if key not in args.workloads.split(","):
            continue
        plain, again_in = make(), make()
        untraced = run(eng, dev, lambda: eng.join(*plain, wl.JOIN_QUESTION), trace=False)
        again = run(eng, dev, lambda: eng.join(*again_in, wl.JOIN_QUESTION), trace=False)  # fresh anchors again
        traced_in = make()  # fresh anchors: nothing cached
        traced = run(eng, dev, lambda: eng.join(*traced_in, wl.JOIN_QUESTION), trace=True)
        res[name] = {"untraced": untraced, "untraced_again": again, "traced": traced}
        if args.host_profile:
            host_in = make()
            res[name]["host"] = host_profile(dev, lambda: eng.join(*host_in, wl.JOIN_QUESTION))
        p = traced["profile"]
        log.info("%s: untraced %.2f s (%.0f tok/s), again %.2f s (%.0f tok/s), allocator %s / %s; traced %.2f s, "
                 "GPU busy %.2f s, host gaps %.1f%%; %s", name, untraced["wall_s"], untraced["requested_tok_s"],
                 again["wall_s"], again["requested_tok_s"], untraced["allocator"], again["allocator"],
                 p["wall_s"], p["gpu_busy_s"],
                 100 * p["host_gap_share"], ", ".join(f"{k} {100 * v:.1f}%" for k, v in p["family_share"].items()))
        (Path(args.out) / args.name).write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
