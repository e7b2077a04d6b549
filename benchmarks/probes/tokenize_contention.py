"""Does tokenizing the next chunk stall the thread that launches the device's work?

The engine tokenizes chunk i+1 on a helper thread (gpu_worker/chunks.py) while the main thread builds and
launches chunk i's passes. The Rust tokenizer releases the GIL but runs one thread per core (rayon): with
every core busy, the main thread is preempted for milliseconds at a time, and a GPU idles while its next
kernels are not launched. Here the main thread runs small torch ops in a loop (as a launching thread does)
while a helper tokenizes 1,165 documents of 300 words (a FILTER chunk of 16 passes), each setting in its
own process (rayon reads RAYON_NUM_THREADS once): the Rust tokenizer on every core, and on all but one
(what an Engine sets when RAYON_NUM_THREADS is unset, gpu_worker/chunks.py leave_a_core). Reported: the main thread's iterations over
1 ms and their total, and the tokenization's time.

    PYTHONPATH=. python benchmarks/probes/tokenize_contention.py --tokenizer .cache/tok --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def child(tokenizer: str) -> dict:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from public_bench import Words

    from gpu_worker.prompts import PromptRenderer

    r = PromptRenderer(AutoTokenizer.from_pretrained(tokenizer))
    docs = Words(r.tok, 7).texts(1165, 300)
    r.encode_docs(docs[:8])  # the document tokenizer built
    x = torch.zeros(16)
    out = {}
    for mode in ("main thread alone", "while the helper tokenizes"):
        done = {}

        def work():
            t = time.perf_counter()
            if mode == "main thread alone":
                time.sleep(0.5)
            else:
                r.encode_docs(docs)
            done["s"] = time.perf_counter() - t

        th = threading.Thread(target=work)
        lat = []
        th.start()
        while th.is_alive():
            t = time.perf_counter()
            for _ in range(20):
                x.add_(1.0)
            lat.append(time.perf_counter() - t)
        th.join()
        a = np.array(lat) * 1e3
        out[mode] = {"helper_s": round(done["s"], 3), "iterations": len(a), "median_ms": round(float(np.median(a)), 4),
                     "over_1ms": int((a > 1).sum()), "over_1ms_total_ms": round(float(a[a > 1].sum()), 1),
                     "max_ms": round(float(a.max()), 2)}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", default="/tmp")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.tokenizer)))
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    res = {"cores": cores, "runs": {}}
    for n in (cores, max(1, cores - 1)):
        env = dict(os.environ, RAYON_NUM_THREADS=str(n))
        p = subprocess.run([sys.executable, __file__, "--child", "--tokenizer", args.tokenizer], env=env,
                           capture_output=True, text=True, check=True)
        res["runs"][f"rayon threads {n}"] = json.loads(p.stdout.strip().splitlines()[-1])
        print(n, res["runs"][f"rayon threads {n}"], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "tokenize_contention.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
