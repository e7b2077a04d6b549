"""GPU benchmark of the engine: bf16 accuracy, the five workloads, speed of light, transformers.

One run does everything, on one device, so every ratio compares numbers of the
same machine and minute:
  1. the dense bf16 matmul rate (8192^3), the denominator of speed of light;
  2. bf16 margins vs the same engine in float32 (plain-torch ops) on >= 200
     prompts, filter, shared-context and join prompts among them;
  3. FILTER, CHAIN, JOIN, FILTER+JOIN, PREFIX (bench_workloads.py) through the
     engine, then the same prompts through transformers (bench_hf.py).

    PYTHONPATH=. python benchmarks/gpu_bench.py --out /tmp/bench          # H200, full sizes
    PYTHONPATH=. python benchmarks/gpu_bench.py --smoke --out /tmp/smoke  # CPU, tiny model

--tokenizer DIR reads the SmolLM2 tokenizer files from DIR (machines without
the converted GGUF cache); the random-weight model needs nothing else.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_hf  # noqa: E402
import bench_profile  # noqa: E402
import bench_workloads as wl  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402

log = logging.getLogger("gpu_bench")
TARGETS = {"FILTER": "fresh >= 75% of SoL and >= 1.5x transformers", "CHAIN": ">= 2.5x transformers",
           "JOIN": ">= 16.7M requested tokens/s", "FILTER+JOIN": "(no target)",
           "PREFIX": "fresh <= 1.1x distinct-prefix minimum and >= (requested/fresh)/2 x transformers"}


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def matmul_rate(dev, n=8192, reps=20) -> float:
    """Dense bf16 (float32 on CPU) matmul TFLOP/s: median of `reps` after 3 warm-ups."""
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    n = n if dev.type == "cuda" else 1024
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    times = []
    for i in range(reps + 3):
        sync(dev)
        t0 = time.perf_counter()
        a @ b
        sync(dev)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    del a, b
    return 2 * n**3 / float(np.median(times)) / 1e12


def count_pairs(eng):
    """Instrument an engine (no change of behaviour): attended pairs and host preparation time.

    attended_pairs: a fresh token at position p attends p + 1 keys. host_prep_s:
    time from entering `Passes.run` to its first forward pass (prefix-tree inserts
    and scheduler set-up, when the GPU has nothing to do).
    """
    build, run = eng.runner.build, eng.passes.run
    eng.attended_pairs, eng.host_prep_s, started = 0, 0.0, [None]

    def counting_build(jobs):
        if started[0] is not None:
            eng.host_prep_s += time.perf_counter() - started[0]
            started[0] = None
        for j in jobs:
            n, s = j.num_tokens, j.start
            eng.attended_pairs += n * (2 * s + n + 1) // 2
        return build(jobs)

    def timed_run(reqs, *a, **kw):
        started[0] = time.perf_counter()
        return run(reqs, *a, **kw)

    eng.runner.build = counting_build
    eng.passes.run = timed_run


def make_engine(args, dtype, **kw):
    cfg = EngineConfig(model=args.model, device=args.device, dtype=dtype, token_budget=args.token_budget,
                       tokenizer=args.tokenizer, **kw)
    eng = Engine(cfg)
    count_pairs(eng)
    return eng


def check_set(eng, vocab, smoke):
    """Filter prompts, the same documents under a second question (cached context) and join prompts."""
    n_docs, doc_len, a_len, n_part = (8, 30, 60, 8) if smoke else (128, 300, 1000, 32)
    docs = vocab.docs(n_docs, doc_len)
    reqs = []
    for q in (wl.QUESTION, wl.CHAIN_QUESTIONS[1]):
        head, tail = eng.renderer.filter_parts(q)
        reqs += [(head + d, tail) for d in docs]
    head, mid, post = eng.renderer.join_parts(wl.JOIN_QUESTION)
    for a in vocab.docs(2, a_len):
        reqs += [(head + a + mid, p + post) for p in vocab.docs(n_part, 6, 10)]
    return reqs


def accuracy(args, dev):
    """bf16 engine (CudaOps) margins vs the float32 engine (plain-torch ops) on the same weights."""
    ref = make_engine(args, "float32", use_triton=False, kv_pool_tokens=args.ref_kv_tokens)
    reqs = check_set(ref, wl.Vocab(ref.tokenizer, 7), args.smoke)
    want = ref.margins(reqs)
    del ref
    gc.collect()
    torch.cuda.empty_cache() if dev.type == "cuda" else None
    return reqs, want


def sign_report(want, got, thr=0.1):
    big = np.abs(want) > thr
    agree = float((np.sign(want[big]) == np.sign(got[big])).mean()) if big.any() else float("nan")
    return {"prompts": len(want), "compared": int(big.sum()), "sign_agreement": agree,
            "max_abs_diff": float(np.abs(want - got).max()), "median_abs_diff": float(np.median(np.abs(want - got))),
            "ref_margin_std": float(want.std())}


def run_workload(eng, name, vocab, sizes, dev):
    eng.clear_cache()
    eng.reset_stats()
    eng.attended_pairs, eng.host_prep_s = 0, 0.0
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    run = wl.WORKLOADS[name](eng, vocab, sizes)
    sync(dev)
    st = dict(eng.stats)
    st.pop("stages", None)
    st["host_prep_s"] = eng.host_prep_s
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else float("nan")
    return run, st, eng.attended_pairs, peak


def sol_seconds(mcfg, fresh, pairs, n_prompts, n_head, rate_tflops, attn_tflops=None):
    """Seconds and FLOPs of the tokens at ``rate_tflops``; the attention's FLOPs at ``attn_tflops`` where given
    (the planner's formula, AiCost.java, at the engine's measured rates)."""
    linear = 2 * mcfg.linear_params * fresh + 2 * mcfg.hidden_size * n_head * n_prompts
    attention = 4 * mcfg.num_layers * mcfg.num_heads * mcfg.head_dim * pairs
    seconds = linear / (rate_tflops * 1e12) + attention / ((attn_tflops or rate_tflops) * 1e12)
    return seconds, linear + attention


def summarize(name, prompts, run, st, pairs, peak, eng, rate, hf, sizes_note):
    mcfg = eng.model_config
    n_head = len(eng.renderer.answers.head_ids)
    sol_s, flops = sol_seconds(mcfg, st["fresh_tokens"], pairs, len(prompts), n_head, rate)
    min_tok, min_pairs = wl.distinct_prefix_tokens(prompts)
    wall = run.wall_s
    r = {"workload": name, "sizes": sizes_note, "prompts": len(prompts), "wall_s": wall,
         "requested_tokens": st["requested_tokens"], "fresh_tokens": st["fresh_tokens"],
         "min_fresh_tokens_engine": st["min_fresh_tokens"], "distinct_prefix_tokens": min_tok,
         "fresh_over_min": st["fresh_tokens"] / max(1, min_tok), "kv_regret_tokens": st["kv_regret_tokens"],
         "forward_passes": st["forward_passes"], "attended_pairs": pairs, "host_prep_s": st["host_prep_s"],
         "requested_tok_s": st["requested_tokens"] / wall, "fresh_tok_s": st["fresh_tokens"] / wall,
         "sol_s": sol_s, "pct_sol": 100 * sol_s / wall, "achieved_tflops": flops / wall / 1e12,
         "peak_gib": peak, "notes": run.notes}
    if hf is not None:
        r["hf"] = hf
        r["speedup_vs_hf"] = hf["est_s"] / wall
    r["target"] = TARGETS[name.removesuffix(" fp8")]
    r["met"] = target_met(r)
    return r


def target_met(r):
    name, x = r["workload"].removesuffix(" fp8"), r.get("speedup_vs_hf", float("nan"))
    if name == "FILTER":
        return r["pct_sol"] >= 75 and x >= 1.5
    if name == "CHAIN":
        return x >= 2.5
    if name == "JOIN":
        return r["requested_tok_s"] >= 16.7e6
    if name == "PREFIX":
        saved = r["requested_tokens"] / r["fresh_tokens"]
        return r["fresh_over_min"] <= 1.1 and x >= saved / 2
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU, tiny sizes")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--scale", type=float, default=1.0, help="workload sizes x this")
    ap.add_argument("--workloads", default=",".join(wl.WORKLOADS), help="comma-separated; empty: none")
    ap.add_argument("--token-budget", type=int, default=None)
    ap.add_argument("--kv-tokens", type=int, default=400_000)
    ap.add_argument("--ref-kv-tokens", type=int, default=65536)
    ap.add_argument("--hf-sample", type=int, default=256, help="most prompts per workload through transformers")
    ap.add_argument("--hf-tokens", type=int, default=200_000, help="most tokens per workload through transformers")
    ap.add_argument("--variants", action="store_true", help="also time attention backends and budgets")
    ap.add_argument("--profile", action="store_true", help="torch.profiler of a FILTER and a JOIN pass set")
    ap.add_argument("--timeline", action="store_true", help="per-pass GPU time and idle gaps of a JOIN")
    ap.add_argument("--budgets", action="store_true", help="FILTER and JOIN slices at token budgets 4k-64k")
    ap.add_argument("--ctx-attn", default=None, help="attention over shared contexts: fused, flash or triton")
    ap.add_argument("--fp8", default="", help="comma-separated workloads to run again with quantize='fp8' "
                    "(FP8 projections), after an FP8 accuracy check; transformers' bf16 time is reused")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--repeat-kv", action="store_true", help="flash attention on repeated K/V heads")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    if args.smoke:
        args.model, args.device = args.model or "tiny-qwen3-random", args.device or "cpu"
        args.kv_tokens, args.ref_kv_tokens, args.hf_sample = 16384, 4096, 16
    args.model, args.device = args.model or "qwen3-4b-random", args.device or "cuda"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                        handlers=[logging.StreamHandler(sys.stdout), logging.FileHandler(out / "gpu_bench.log")])
    dev = torch.device(args.device)
    sizes = wl.Sizes.smoke() if args.smoke else (wl.Sizes() if args.scale == 1.0 else wl.Sizes.scaled(args.scale))
    res = {"command": " ".join(sys.argv), "torch": torch.__version__, "python": platform.python_version(),
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor(),
           "model": args.model, "sizes": sizes.__dict__, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t_start = time.time()
    res["matmul_tflops_start"] = matmul_rate(dev)
    log.info("matmul rate %.1f TFLOP/s", res["matmul_tflops_start"])

    if not args.skip_accuracy:
        reqs, want = accuracy(args, dev)
    eng = make_engine(args, "bfloat16", kv_pool_tokens=args.kv_tokens)
    res["ops"] = eng.rt.ops.name
    res["token_budget"] = eng.rt.token_budget
    res["kv_slots"] = eng.rt.kv_slots
    res["static_gib"] = torch.cuda.memory_allocated(dev) / 2**30 if dev.type == "cuda" else float("nan")
    vocab = wl.Vocab(eng.tokenizer, 1)
    bench_profile.warm_up(eng, vocab)
    hf = bench_hf.hf_model(eng) if args.workloads else None
    head_rows = eng.model.head_rows
    if args.ctx_attn:
        eng.runner.ops.ctx_attn = args.ctx_attn
    for flag, key, fn in ((args.variants, "variants", bench_profile.variants),
                          (args.profile, "profile", lambda *a: bench_profile.profile(*a, trace_dir=out)),
                          (args.timeline, "timeline", bench_profile.timeline),
                          (args.budgets, "budgets", bench_profile.budget_curve)):
        if flag:
            try:
                res[key] = fn(eng, vocab, dev, args.smoke)
            except Exception:  # a failed side measurement must not cost the workloads
                log.exception("%s failed", key)
                eng.clear_cache()

    if args.repeat_kv:
        eng.runner.ops.repeat_kv = True
    res["attention_config"] = {f: getattr(eng.runner.ops, f, None) for f in bench_profile.FIELDS}
    log.info("attention configuration: %s", res["attention_config"])
    if not args.skip_accuracy:  # with the configuration the workloads run
        eng.clear_cache()
        got = eng.margins(reqs)
        res["accuracy"] = sign_report(want, got)
        log.info("bf16 vs float32: %s", res["accuracy"])
    res["workloads"] = []
    for i, name in enumerate(n for n in args.workloads.split(",") if n):
        run, st, pairs, peak = run_workload(eng, name, wl.Vocab(eng.tokenizer, 100 + i), sizes, dev)
        prompts = run.prompts
        log.info("%s engine: %.2f s, %d prompts, fresh %d of %d tokens", name, run.wall_s, len(prompts),
                 st["fresh_tokens"], st["requested_tokens"])
        hf_t = bench_hf.time_baseline(hf, head_rows, prompts, dev, args.hf_sample, args.hf_tokens)
        log.info("%s transformers: %s", name, hf_t)
        if name == "FILTER":  # cross-implementation check of the margins on the sampled prompts
            idx = list(range(min(len(prompts), args.hf_sample)))
            logits, keys = bench_hf.run_batches(hf, head_rows, prompts, [idx], dev)
            res["hf_vs_engine_bf16"] = sign_report(eng.answer_margins(logits), np.asarray(run.margins)[keys])
        r = summarize(name, prompts, run, st, pairs, peak, eng, res["matmul_tflops_start"], hf_t, sizes.__dict__)
        del prompts
        res["workloads"].append(r)
        log.info("%s: %s", name, {k: v for k, v in r.items() if k not in ("sizes", "hf")})
        gc.collect()
    fp8 = [n for n in args.fp8.split(",") if n]
    if fp8:
        before = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0
        eng.model.quantize_fp8(keep=True)
        if dev.type == "cuda":
            res["fp8_weights_gib"] = (torch.cuda.memory_allocated(dev) - before) / 2**30
            log.info("fp8 weights: +%.2f GiB (bf16 weights kept beside them)", res["fp8_weights_gib"])
        if not args.skip_accuracy:
            eng.clear_cache()
            res["accuracy_fp8"] = sign_report(want, eng.margins(reqs))
            log.info("fp8 vs float32: %s", res["accuracy_fp8"])
        hf_by_name = {r["workload"]: r.get("hf") for r in res["workloads"]}
        for i, name in enumerate(fp8):
            run, st, pairs, peak = run_workload(eng, name, wl.Vocab(eng.tokenizer, 200 + i), sizes, dev)
            prompts = run.prompts
            r = summarize(name, prompts, run, st, pairs, peak, eng, res["matmul_tflops_start"],
                          hf_by_name.get(name), sizes.__dict__)
            r["workload"], r["quantize"] = name + " fp8", "fp8"
            del prompts
            res["workloads"].append(r)
            log.info("%s fp8: %s", name, {k: v for k, v in r.items() if k not in ("sizes", "hf")})
            gc.collect()
        eng.model.fp8 = False
    res["matmul_tflops_end"] = matmul_rate(dev)
    res["total_s"] = time.time() - t_start
    (out / "gpu_h200.json").write_text(json.dumps(res, indent=1, default=str))
    print_table(res)


def print_table(res):
    rate = res["matmul_tflops_start"]
    print(f"\nmatmul {rate:.0f} TFLOP/s (end {res['matmul_tflops_end']:.0f}); ops {res['ops']}; "
          f"budget {res['token_budget']}; total {res['total_s']:.0f} s")
    if "accuracy" in res:
        print("bf16 vs float32:", json.dumps(res["accuracy"]))
    if "accuracy_fp8" in res:
        print("fp8 vs float32:", json.dumps(res["accuracy_fp8"]))
    if "hf_vs_engine_bf16" in res:
        print("transformers bf16 vs engine bf16:", json.dumps(res["hf_vs_engine_bf16"]))
    hdr = (f"{'workload':12} {'prompts':>7} {'wall s':>7} {'prep s':>6} {'req tok/s':>11} {'fresh tok/s':>11} {'%SoL':>5} "
           f"{'fresh/min':>9} {'HF s':>8} {'x HF':>6} {'peak GiB':>8}  met")
    print(hdr)
    for r in res["workloads"]:
        print(f"{r['workload']:12} {r['prompts']:7d} {r['wall_s']:7.2f} {r['host_prep_s']:6.2f} {r['requested_tok_s']:11.4g} "
              f"{r['fresh_tok_s']:11.4g} {r['pct_sol']:5.1f} {r['fresh_over_min']:9.3f} "
              f"{r.get('hf', {}).get('est_s', float('nan')):8.2f} {r.get('speedup_vs_hf', float('nan')):6.2f} "
              f"{r['peak_gib']:8.1f}  {r['met']}")


if __name__ == "__main__":
    main()
