"""How a BIO-2-shaped join's requests pack into passes, planned on the host without a model (no device):
each chunk through its own scheduler (`Passes.run`, as before 0e90d4b) or the chunks through one
(`Passes.stream`). Prints each pass's tokens.

    PYTHONPATH=. python benchmarks/probes/stream_packing.py --tokenizer .cache/tok --anchors 40
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from public_bench import Words  # noqa: E402

from gpu_worker.chunks import DocumentChunks  # noqa: E402
from gpu_worker.fitting import RequestFitter  # noqa: E402
from gpu_worker.passes import Passes  # noqa: E402
from gpu_worker.prompts import PromptRenderer  # noqa: E402


class Planned:
    """A pass planned and not run: its requests' logits are zeros."""

    def __init__(self, requests):
        self.requests = requests

    def wait(self):
        return np.zeros((len(self.requests), 2), np.float32)


class PlanOnly:
    """Stands where the model runner would: records each pass's tokens."""

    def __init__(self):
        self.sizes = []

    def run(self, jobs):
        self.sizes.append(sum(j.num_tokens for j in jobs))
        return Planned([r for j in jobs for _, r in j.outputs])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--anchors", type=int, default=40)
    ap.add_argument("--budget", type=int, default=32768)
    ap.add_argument("--kv-slots", type=int, default=746576)
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    w = Words(tok, 41)
    anchors = w.texts(args.anchors, lambda: int(w.rng.integers(4500, 5501)))
    partners = w.partners(1127)
    r = PromptRenderer(tok)
    fit = RequestFitter(r, 40960, False, {"truncated_rows": 0})
    p_toks = r.encode_batch(partners)
    head, mid, post = r.join_parts(wl.JOIN_QUESTION)
    extra = len(head) + len(mid) + sum(len(p) + len(post) for p in p_toks)
    for way in ("a scheduler per chunk", "one stream"):
        runner = PlanOnly()
        stats = dict.fromkeys(["requested_tokens", "fresh_tokens", "reused_tokens", "kv_regret_tokens",
                               "min_fresh_tokens", "forward_passes", "requests", "wall_s", "kv_kept_tokens",
                               "kv_kept_unread_tokens", "evict_visited", "evicted_nodes"], 0)
        p = Passes(runner, args.kv_slots, args.budget, 524288, 2, True, stats)
        stream = p.stream(args.anchors * len(partners)) if way == "one stream" else None
        for lo, a_toks in DocumentChunks(r.encode_batch, args.budget)(anchors, extra, len(partners)):
            reqs, _ = fit.join_requests(a_toks, p_toks, wl.JOIN_QUESTION, row0=lo)
            if stream is None:
                p.run(reqs, defer=True)
            else:
                stream.add(reqs)
        if stream is not None:
            stream.close()
        p.drain()
        print(f"{way}: {len(runner.sizes)} passes for {stats['fresh_tokens']:,} fresh tokens "
              f"(at the least {-(-stats['fresh_tokens'] // args.budget)}); tokens per pass {runner.sizes}")


if __name__ == "__main__":
    main()
