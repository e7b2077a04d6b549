"""Why the first full-size call of an operation in a process runs slower than the next (JOIN 8 x 1,000 2.24 s then
1.83 s, BIO-2 40 anchors 10.19 then 9.90 s, FILTER 7.67 then 7.57 s in profile_public at 31a659d): per call,
after the public benchmark's warm-up, the Triton kernels compiled during it (new specializations), the caching
allocator's device allocations, the prefix tree's evictions, and the wall. Fresh texts every call.

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/first_run_compiles.py --tokenizer .cache/tok --commit $C --out $OUT

At 1b593ae (results/h200_1b593ae) it counted no kernel compiled and no device allocation in any call, yet the
first JOIN and BIO-2 calls ran 0.35-0.4 s slower. At 815fdb9 the same with every CUDA module loaded at start
(CUDA_MODULE_LOADING=EAGER) ran as slow (results/h200_815fdb9). Its compile count is blind: probes/first_call_trace.py,
with Triton's jit_post_compile_hook, saw the first JOIN compile the rope kernel for a position view at an
odd offset (fixed by runner.to_device_aligned).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from public_bench import Words, timed  # noqa: E402

import quail_kernels  # noqa: E402
from gpu_worker import Engine, EngineConfig  # noqa: E402


def jit_functions():
    from triton.runtime.jit import JITFunction

    out = {}
    for mod in list(sys.modules.values()):
        if mod is None or not getattr(mod, "__name__", "").startswith("quail_kernels"):
            continue
        for name, obj in vars(mod).items():
            if isinstance(obj, JITFunction):
                out[f"{mod.__name__}.{name}"] = obj
    return out


def compiled(fns) -> dict[str, int]:
    counts = {}
    for name, f in fns.items():
        try:
            counts[name] = sum(len(c[0]) for c in f.device_caches.values())
        except Exception:  # noqa: BLE001  (another Triton's layout)
            counts[name] = -1
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev = torch.device("cuda")
    eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda", tokenizer=args.tokenizer))
    w = Words(eng.tokenizer, 1)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)  # public_bench's warm-up
    eng.filter(w.texts(64, 300), [wl.QUESTION])
    eng.filter(w.texts(160, 300), [wl.QUESTION])
    quail_kernels.__name__  # (imported: its modules are in sys.modules)
    fns = jit_functions()
    res = {"commit": args.commit, "device": torch.cuda.get_device_name(dev), "kernels": sorted(fns), "calls": []}
    partners = w.partners(1000)
    bp = w.partners(1127)
    calls = [("FILTER 2048x300", lambda: eng.filter(w.texts(2048, 300), [wl.QUESTION])),
             ("FILTER 2048x300", lambda: eng.filter(w.texts(2048, 300), [wl.QUESTION])),
             ("JOIN 8x1000", lambda: eng.join(w.texts(8, 5000), partners, wl.JOIN_QUESTION)),
             ("JOIN 8x1000", lambda: eng.join(w.texts(8, 5000), partners, wl.JOIN_QUESTION)),
             ("JOIN 8x1000", lambda: eng.join(w.texts(8, 5000), partners, wl.JOIN_QUESTION)),
             ("FILTER 2048x300", lambda: eng.filter(w.texts(2048, 300), [wl.QUESTION])),
             ("JOIN 8x1000", lambda: eng.join(w.texts(8, 5000), partners, wl.JOIN_QUESTION)),
             ("BIO-2 16 anchors", lambda: eng.join(w.texts(16, 5000), bp, wl.JOIN_QUESTION)),
             ("BIO-2 16 anchors", lambda: eng.join(w.texts(16, 5000), bp, wl.JOIN_QUESTION))]
    for name, fn in calls:
        before = compiled(fns)
        mem = torch.cuda.memory_stats(dev)
        _, st = timed(eng, dev, fn)
        wall = st["wall_s"]
        after = compiled(fns)
        mem2 = torch.cuda.memory_stats(dev)
        new = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        row = {"call": name, "wall_s": round(wall, 4), "new_compiles": new,
               "device_allocs": mem2.get("num_device_alloc", 0) - mem.get("num_device_alloc", 0),
               "alloc_retries": mem2.get("num_alloc_retries", 0) - mem.get("num_alloc_retries", 0),
               "evicted_nodes": st.get("evicted_nodes"), "evict_visited": st.get("evict_visited"),
               "passes": st["forward_passes"], "requested_tok_s": st["requested_tok_s"]}
        res["calls"].append(row)
        print(row, flush=True)
        (Path(args.out) / "first_run_compiles.json").write_text(json.dumps(res, indent=1))
    res["compiled_total"] = compiled(fns)
    (Path(args.out) / "first_run_compiles.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
