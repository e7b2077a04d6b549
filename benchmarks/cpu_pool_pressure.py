"""CPU: a join whose working set is 5x the KV pool, against the same join in a pool that holds everything.

tiny-llama-random (float32, 2 threads), text through Engine.join: anchors of ~1,500 tokens x partners of
2-5 words whose first words repeat. The anchors' KV alone is 5x the small pool, so the small engine must
evict as it goes; the target is its time within 1.5x of the big pool's and the same margins (1e-4).

    PYTHONPATH=. python benchmarks/cpu_pool_pressure.py --out benchmarks/results/cpu_pool_pressure.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time

import numpy as np
import torch

from gpu_worker import Engine, EngineConfig

WORDS = ("rash fever cough nausea headache swelling pain itching dizziness fatigue vomiting chills aspirin "
         "ibuprofen vaccine antibiotic insulin steroid patient reported mild severe after taking skin").split()
QUESTION = "Does DOCUMENT 1 report the adverse reaction named in DOCUMENT 2?"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--anchors", type=int, default=20)
    ap.add_argument("--anchor-words", type=int, default=1500)
    ap.add_argument("--partners", type=int, default=300)
    ap.add_argument("--out", default="benchmarks/results/cpu_pool_pressure.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    anchors = [" ".join(rng.choice(WORDS, args.anchor_words)) for _ in range(args.anchors)]
    partners = [" ".join(rng.choice(WORDS[:12], int(k))) for k in rng.integers(2, 6, args.partners)]
    big = Engine(EngineConfig(model="tiny-llama-random"))
    work = sum(len(big.render_join(a, "", QUESTION)) for a in anchors)
    small = Engine(EngineConfig(model="tiny-llama-random", kv_pool_tokens=work // 5 // 16 * 16))
    assert big.rt.kv_slots >= work + args.partners * 16, "the big pool must hold everything"
    res = {"commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
           "anchors": args.anchors, "partners": args.partners, "anchor_kv_tokens": work,
           "small_pool_slots": small.rt.kv_slots, "big_pool_slots": big.rt.kv_slots,
           "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    big.join(anchors[:1], partners[:10], QUESTION)  # warm-up, both engines
    small.join(anchors[:1], partners[:10], QUESTION)
    out = {}
    for name, eng in (("big", big), ("small", small)):
        eng.tree.trim(keep_free=1.0)
        eng.reset_stats()
        t0 = time.perf_counter()
        out[name] = eng.join(anchors, partners, QUESTION)
        res[name] = {k: v for k, v in eng.stats.items() if k != "stages"}
        res[name]["wall_s"] = time.perf_counter() - t0
    res["small_over_big_time"] = res["small"]["wall_s"] / res["big"]["wall_s"]
    res["max_abs_margin_diff"] = float(np.abs(out["small"] - out["big"]).max())
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
