"""Warm-up, attention-backend / budget variants, and a kernel-time profile of the engine."""
from __future__ import annotations

import logging
import time

import torch

import bench_workloads as wl

log = logging.getLogger("gpu_bench")


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def warm_up(eng, vocab):
    """Compile every kernel variant once (causal and context attention, both tile sizes)."""
    head, tail = eng.renderer.filter_parts(wl.QUESTION)
    _, tail2 = eng.renderer.filter_parts(wl.PARTNER_QUESTION)
    docs = vocab.docs(8, 64)
    jh, jm, jp = eng.renderer.join_parts(wl.JOIN_QUESTION)
    anchor = vocab.doc(200)
    reqs = [(head + d, tail) for d in docs] + [(head + d, tail2) for d in docs]
    reqs += [(jh + anchor + jm, p + jp) for p in vocab.docs(32, 6, 10)]
    reqs += [(head + p, tail2) for p in vocab.docs(32, 6, 10)]  # short prompts, short shared context
    reqs += [(head + d, tail) for d in vocab.docs(2, 700)]  # long sequences (causal segment kernel)
    ops = eng.runner.ops
    configs = CONFIGS if hasattr(ops, "self_attn") else (None,)
    saved = _get(ops) if configs[0] else None
    for cfg in configs:
        if cfg:
            _set(ops, cfg)
        for part in (reqs[:8], reqs):  # without, then with contexts
            eng.clear_cache()
            eng.answer_logits(part)
            eng.answer_logits(part[-40:])  # the same prompts again: only their last token is fresh
    if saved is not None:
        _set(ops, saved)
    eng.clear_cache()
    eng.reset_stats()


def _timed(eng, fn, dev):
    eng.clear_cache()
    eng.reset_stats()
    _sync(dev)
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 4), "fresh_tok_s": round(eng.stats["fresh_tokens"] / wall),
            "requested_tok_s": round(eng.stats["requested_tokens"] / wall),
            "passes": eng.stats["forward_passes"]}


FIELDS = ("self_attn", "ctx_attn", "fold", "repeat_kv", "short_max")
CONFIGS = (("auto", "fused", True, False, 512), ("auto", "flash", True, False, 512),
           ("auto", "fused", True, False, 64), ("auto", "fused", True, False, 0), ("auto", "fused", True, False, 128))


def _get(ops):
    return tuple(getattr(ops, f) for f in FIELDS)


def _set(ops, cfg):
    for f, x in zip(FIELDS, cfg):
        setattr(ops, f, x)


def variants(eng, vocab, dev, smoke):
    """Time attention configurations (self_attn, ctx_attn, fold) on FILTER, CHAIN-stage and JOIN slices."""
    sz = wl.Sizes.smoke() if smoke else wl.Sizes(filter_docs=512, join_anchors=4, join_partners=500)
    head, tail = eng.renderer.filter_parts(wl.QUESTION)
    _, tail2 = eng.renderer.filter_parts(wl.CHAIN_QUESTIONS[1])
    docs = vocab.docs(sz.filter_docs, sz.doc_len)
    f_reqs = [(head + d, tail) for d in docs]
    c_reqs = [(head + d, tail2) for d in docs]  # after f_reqs: each document's KV is cached
    jh, jm, jp = eng.renderer.join_parts(wl.JOIN_QUESTION)
    anchors, partners = vocab.docs(sz.join_anchors, sz.anchor_len), vocab.docs(sz.join_partners, *sz.partner_len)
    j_reqs = [(jh + a + jm, p + jp) for a in anchors for p in partners]
    ops, out = eng.runner.ops, {}
    if not hasattr(ops, "self_attn"):
        return out
    saved = _get(ops)

    def chain_stage():
        eng.answer_logits(f_reqs)
        _sync(dev)
        eng.reset_stats()
        t0 = time.perf_counter()
        eng.answer_logits(c_reqs)
        _sync(dev)
        return time.perf_counter() - t0

    for cfg in CONFIGS:
        _set(ops, cfg)
        key = "self={},ctx={},fold={},repeat_kv={},short_max={}".format(*cfg)
        out["FILTER " + key] = _timed(eng, lambda: eng.answer_logits(f_reqs), dev)
        out["JOIN " + key] = _timed(eng, lambda: eng.answer_logits(j_reqs), dev)
        eng.clear_cache()
        t = chain_stage()
        out["CHAIN-stage2 " + key] = {"wall_s": round(t, 4), "fresh_tok_s": round(eng.stats["fresh_tokens"] / t)}
        log.info("variant %s: %s", key, {k.split()[0]: v for k, v in out.items() if key in k})
    _set(ops, saved)
    budget = eng.rt.token_budget
    eng.rt.token_budget = 2 * budget
    out[f"FILTER default, budget={2 * budget}"] = _timed(eng, lambda: eng.answer_logits(f_reqs), dev)
    out[f"JOIN default, budget={2 * budget}"] = _timed(eng, lambda: eng.answer_logits(j_reqs), dev)
    eng.rt.token_budget = budget
    log.info("budget %d: %s", 2 * budget, {k: v for k, v in out.items() if "budget" in k})
    eng.clear_cache()
    return out


def budget_curve(eng, vocab, dev, smoke, budgets=(4096, 8192, 16384, 32768, 65536)):
    """FILTER (512 documents) and JOIN (4 anchors x 500 partners) slices at several token budgets per pass."""
    sz = wl.Sizes.smoke() if smoke else wl.Sizes(filter_docs=512, join_anchors=4, join_partners=500)
    head, tail = eng.renderer.filter_parts(wl.QUESTION)
    f_reqs = [(head + d, tail) for d in vocab.docs(sz.filter_docs, sz.doc_len)]
    jh, jm, jp = eng.renderer.join_parts(wl.JOIN_QUESTION)
    partners = vocab.docs(sz.join_partners, *sz.partner_len)
    j_reqs = [(jh + a + jm, p + jp) for a in vocab.docs(sz.join_anchors, sz.anchor_len) for p in partners]
    saved, out = eng.rt.token_budget, {}
    try:
        for b in budgets:
            eng.rt.token_budget = b
            eng.clear_cache()
            _timed(eng, lambda: eng.answer_logits(f_reqs), dev)  # first run at a new size: allocator and kernel warm-up
            out[f"FILTER budget={b}"] = _timed(eng, lambda: eng.answer_logits(f_reqs), dev)
            out[f"JOIN budget={b}"] = _timed(eng, lambda: eng.answer_logits(j_reqs), dev)
            log.info("budget %d: FILTER %s, JOIN %s", b, out[f"FILTER budget={b}"], out[f"JOIN budget={b}"])
    finally:
        eng.rt.token_budget = saved
        eng.clear_cache()
    return out


CATEGORIES = (("attention", ("flash", "varlen_attn", "fmha", "seg_attn", "cudnn")), ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "sm90")),
              ("merge", ("merge_attn",)), ("rmsnorm", ("rmsnorm",)), ("rope+kv store", ("rope",)),
              ("silu_mul", ("silu",)), ("gather/index", ("index", "gather")), ("copy/cast", ("copy", "cast", "to_copy")))


def _category(name: str) -> str:
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def timeline(eng, vocab, dev, smoke):
    """Per forward pass of a full-size JOIN: GPU time (events around the pass's launches), the GPU's idle
    gap before it, host time to plan + launch it, and the host's wait for results."""
    sz = wl.Sizes.smoke() if smoke else wl.Sizes()
    jh, jm, jp = eng.renderer.join_parts(wl.JOIN_QUESTION)
    partners = vocab.docs(sz.join_partners, *sz.partner_len)
    j_reqs = [(jh + a + jm, p + jp) for a in vocab.docs(sz.join_anchors, sz.anchor_len) for p in partners]
    if dev.type != "cuda":
        return {}
    run, read = eng.runner.run, eng.passes.read
    passes, waits = [], [0.0]

    def timed_run(jobs):
        h0 = time.perf_counter()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        r = run(jobs)
        b.record()
        passes.append({"events": (a, b), "tokens": sum(j.num_tokens for j in jobs),
                       "launch_ms": (time.perf_counter() - h0) * 1e3})
        return r

    def timed_read(launched, out):
        h0 = time.perf_counter()
        read(launched, out)
        waits[0] += time.perf_counter() - h0

    eng.clear_cache()
    _sync(dev)
    eng.runner.run, eng.passes.read = timed_run, timed_read
    try:
        t0 = time.perf_counter()
        eng.answer_logits(j_reqs)
        _sync(dev)
        wall = time.perf_counter() - t0
    finally:
        eng.runner.run, eng.passes.read = run, read
    rows, prev = [], None
    for p in passes:
        a, b = p.pop("events")
        p["gpu_ms"] = a.elapsed_time(b)
        p["gap_ms"] = prev.elapsed_time(a) if prev is not None else 0.0
        prev = b
        rows.append({k: round(v, 2) if isinstance(v, float) else v for k, v in p.items()})
    rep = {"wall_s": round(wall, 4), "passes": len(rows), "gpu_s": round(sum(r["gpu_ms"] for r in rows) / 1e3, 4),
           "gaps_s": round(sum(r["gap_ms"] for r in rows) / 1e3, 4),
           "launch_s": round(sum(r["launch_ms"] for r in rows) / 1e3, 4), "host_wait_s": round(waits[0], 4),
           "per_pass": rows}
    log.info("timeline JOIN: %s", {k: v for k, v in rep.items() if k != "per_pass"})
    for r in rows:
        log.info("   %s", r)
    eng.clear_cache()
    return rep


def profile(eng, vocab, dev, smoke, trace_dir=None):
    """GPU kernel time by category for a FILTER and a JOIN slice; busy fraction of the wall time."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    sz = wl.Sizes.smoke() if smoke else wl.Sizes(filter_docs=256)  # JOIN at its full size
    head, tail = eng.renderer.filter_parts(wl.QUESTION)
    f_reqs = [(head + d, tail) for d in vocab.docs(sz.filter_docs, sz.doc_len)]
    jh, jm, jp = eng.renderer.join_parts(wl.JOIN_QUESTION)
    j_reqs = [(jh + a + jm, p + jp) for a in vocab.docs(sz.join_anchors, sz.anchor_len)
              for p in vocab.docs(sz.join_partners, *sz.partner_len)]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    report = {}
    for name, reqs in (("FILTER", f_reqs), ("JOIN", j_reqs)):
        eng.clear_cache()
        _sync(dev)
        with torch_profile(activities=acts) as prof:
            t0 = time.perf_counter()
            eng.answer_logits(reqs)
            _sync(dev)
            wall = time.perf_counter() - t0
        cats: dict[str, float] = {}
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0)
            if t <= 0 or e.device_type is None or "cuda" not in str(e.device_type).lower():
                continue
            cats[_category(e.key)] = cats.get(_category(e.key), 0.0) + t / 1e6
            rows.append((t / 1e6, e.count, e.key[:200]))
        rows.sort(reverse=True)
        busy = sum(cats.values())
        if trace_dir is not None and name == "JOIN":
            import gzip
            import os
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                prof.export_chrome_trace(os.path.join(tmp, "t.json"))
                with open(os.path.join(tmp, "t.json"), "rb") as f, gzip.open(trace_dir / "join_trace.json.gz", "wb") as g:
                    g.write(f.read())
        report[name] = {"wall_s": wall, "gpu_busy_s": busy, "by_category_s": {k: round(v, 4) for k, v in
                                                                              sorted(cats.items(), key=lambda x: -x[1])},
                        "top_kernels": [(round(t, 4), c, k) for t, c, k in rows[:15]]}
        log.info("profile %s: wall %.3f s, GPU busy %.3f s, %s", name, wall, busy, report[name]["by_category_s"])
        for t, c, k in rows[:15]:
            log.info("   %8.4f s %6d  %s", t, c, k)
    eng.clear_cache()
    return report
