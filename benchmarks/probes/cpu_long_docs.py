"""CPU filter over long documents with `attend_prefixed`'s square causal call (from
PREFIXED_CAUSAL_FROM rows) against the masked call for every length, on one engine, alternating.

SmolLM2 in float32, one thread (a Spark Python worker's setting), documents of the Spark
benchmarks' paragraphs joined to ~N words, each run on documents no earlier run saw.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/probes/cpu_long_docs.py --out benchmarks/probes/results
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import spark_harness as h  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from gpu_worker import attention  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--words", type=int, default=700)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    torch.set_num_threads(1)
    paras = h.paragraphs(64)
    words = " ".join(paras).split()
    eng = Engine(EngineConfig())
    q = ["Is DOCUMENT about programming?"]
    eng.filter(["A warm-up document."], q)
    shipped = attention.PREFIXED_CAUSAL_FROM
    res = {"commit": h.commit(), "machine": h.machine(), "docs": a.docs, "words": a.words, "runs": []}
    k = 0
    for r in range(a.rounds):
        for name, threshold in (("square causal from %d rows" % shipped, shipped), ("masked always", 1 << 30)):
            attention.PREFIXED_CAUSAL_FROM = threshold
            docs = []
            for _ in range(a.docs):
                lo = (k * 97) % max(1, len(words) - a.words)
                docs.append(f"[{k}] " + " ".join(words[lo:lo + a.words]))
                k += 1
            before = eng.stats.get("fresh_tokens", 0)
            t = time.perf_counter()
            eng.filter(docs, q)
            run = {"variant": name, "round": r, "s": round(time.perf_counter() - t, 3),
                   "fresh_tokens": eng.stats.get("fresh_tokens", 0) - before, "load_average": list(os.getloadavg())}
            res["runs"].append(run)
            print(run, flush=True)
    attention.PREFIXED_CAUSAL_FROM = shipped
    per_token = {}  # ms per fresh token of each variant over its rounds (their documents differ in length)
    for name in dict.fromkeys(run["variant"] for run in res["runs"]):
        runs = [run for run in res["runs"] if run["variant"] == name]
        per_token[name] = 1e3 * sum(run["s"] for run in runs) / sum(run["fresh_tokens"] for run in runs)
    res["ms_per_fresh_token"] = {k: round(v, 3) for k, v in per_token.items()}
    causal, masked = per_token.values()
    res["ratio_masked_over_causal"] = round(masked / causal, 3)
    print("ms per fresh token:", res["ms_per_fresh_token"], "masked / square causal:", res["ratio_masked_over_causal"])
    path = os.path.join(a.out, f"cpu_long_docs_{res['commit']}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
