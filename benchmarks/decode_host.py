"""Host time of a decode step per sequence, on the CPU with a tiny model (the device's share is small).

    python benchmarks/decode_host.py [--prompts 512] [--words 200] [--max-tokens 32] [--profile]

Generates one greedy answer per prompt (`ignore_eos`, so every answer has max_tokens tokens) and times
each decode step (`Decoder._step`) and, inside it, the model's forward (`runner.model(...)`). The rest of
the step is host work: scheduling, slot bookkeeping, index tensors, argmax, the tree. Reports seconds per
step per sequence (total and without the forward); --profile adds cProfile's top functions of the decode
steps (a separate run: the profiler slows Python code down, not the forward).
Results: benchmarks/results/decode_host_<commit>.json (--out to change).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_worker.decode import Decoder  # noqa: E402
from gpu_worker.engine import Engine, EngineConfig  # noqa: E402

WORDS = ("river market engine letter window garden coffee signal winter planet doctor silver travel budget "
         "museum forest lesson camera bridge harbor pencil ticket orange castle rocket violin saddle marble "
         "lantern meadow canyon feather thunder compass velvet").split()


def prompts(n: int, words: int) -> list[str]:
    """n distinct documents of `words` words (about one token each), differing from their first word."""
    return [f"{i} " + " ".join(WORDS[(i * 7 + j * 13 + j * j) % len(WORDS)] for j in range(words)) for i in range(n)]


class Timed:
    """Wraps Decoder._step and the runner's model: seconds, steps and sequences of the decode steps."""

    def __init__(self, eng):
        self.step_s = self.fwd_s = 0.0
        self.steps = self.seq_steps = 0
        self.in_step = False
        dec, runner = eng.decoder, eng.passes.runner
        step, model = dec._step, runner.model

        def timed_step(running, waiting):
            before = dec.stats["requested_tokens"]
            t = time.perf_counter()
            self.in_step = True
            try:
                return step(running, waiting)
            finally:
                self.in_step = False
                self.step_s += time.perf_counter() - t
                self.steps += 1
                self.seq_steps += dec.stats["requested_tokens"] - before

        def timed_model(*a, **kw):
            t = time.perf_counter()
            try:
                return model(*a, **kw)
            finally:
                if self.in_step:
                    self.fwd_s += time.perf_counter() - t

        dec._step, runner.model = timed_step, timed_model

    def figures(self) -> dict:
        host = self.step_s - self.fwd_s
        return {"decode_steps": self.steps, "sequence_steps": self.seq_steps,
                "mean_live_sequences": round(self.seq_steps / max(1, self.steps), 1),
                "step_s": round(self.step_s, 3), "forward_s": round(self.fwd_s, 3), "host_s": round(host, 3),
                "host_us_per_seq_step": round(1e6 * host / max(1, self.seq_steps), 2),
                "step_us_per_seq_step": round(1e6 * self.step_s / max(1, self.seq_steps), 2)}


def top_functions(prof: cProfile.Profile, n: int = 25) -> str:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(n)
    return out.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--words", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", default="tiny-qwen3-random")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    eng = Engine(EngineConfig(model=args.model, device="cpu"))
    docs = prompts(args.prompts, args.words)
    eng.generate(docs[:4], "Summarize.", max_tokens=4, ignore_eos=True)  # warm-up
    eng.reset_stats()
    timed = Timed(eng)
    t = time.perf_counter()
    outs = eng.generate_ids(docs, "Summarize.", max_tokens=args.max_tokens, ignore_eos=True)
    res = {"model": args.model, "prompts": args.prompts, "words": args.words, "max_tokens": args.max_tokens,
           "wall_s": round(time.perf_counter() - t, 3), **timed.figures(),
           "output_checksum": hash(tuple(tuple(o) for o in outs)) & 0xFFFFFFFF}
    if args.profile:
        eng.reset_stats()
        prof = cProfile.Profile()
        dec, step = eng.decoder, eng.decoder._step

        def profiled(running, waiting):
            prof.enable()
            try:
                return step(running, waiting)
            finally:
                prof.disable()
        dec._step = profiled
        eng.generate_ids(prompts(args.prompts, args.words + 1), "Summarize.", max_tokens=args.max_tokens,
                         ignore_eos=True)
        res["profile_top"] = top_functions(prof)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    res["commit"] = commit
    print(json.dumps({k: v for k, v in res.items() if k != "profile_top"}, indent=1))
    if args.profile:
        print(res["profile_top"])
    if args.out != "-":
        path = Path(args.out or REPO / "benchmarks" / "results" / f"decode_host_{commit}.json")
        path.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
