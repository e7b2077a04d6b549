"""FILTER and JOIN 8 x 1,000 with the MLP through the fused SwiGLU GEMM (quail_kernels/gemm_swiglu.py) and
through cuBLAS + the SiLU-and-mul kernel, alternating in one process on fresh texts each run; Triton
compilations during each timed call are counted (a kernel specialized anew inside a timed call costs
its compile time there).

    PYTHONPATH=. python3 benchmarks/probes/swiglu_ab.py --tokenizer .cache/tok --out $OUT
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
from public_bench import Words  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default="/tmp")
    args = ap.parse_args()
    compiles: list = []
    from triton.runtime.jit import JITFunction
    orig = JITFunction._do_compile

    def do_compile(self, *a, **k):
        t = time.perf_counter()
        out = orig(self, *a, **k)
        compiles.append((self.fn.__name__, round(time.perf_counter() - t, 3)))
        return out

    JITFunction._do_compile = do_compile
    eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda", tokenizer=args.tokenizer))
    mlps = [layer.mlp for layer in eng.model.model.layers]
    block = mlps[0].gate_up_block
    def layout(fused: bool):
        for m in mlps:
            stacked = m.gate_up_stacked()
            m.gate_up_weight, m.gate_up_block = stacked, 0
            if fused:
                m.pack(eng.rt.ops)
        torch.cuda.synchronize()

    def timed(fn):
        n = len(compiles)
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return round(time.perf_counter() - t, 3), compiles[n:]

    for fused in (False, True):  # warm-up as public_bench, in both layouts
        layout(fused)
        w = Words(eng.tokenizer, 1 + fused)
        eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)
        eng.filter(w.texts(64, 300), [wl.QUESTION])
        eng.filter(w.texts(160, 300), [wl.QUESTION])
    rows = []
    partners = Words(eng.tokenizer, 5).partners(1000)
    for rep in range(args.reps):
        for mode in ("fused", "plain"):
            layout(mode == "fused")
            wr = Words(eng.tokenizer, 100 + 2 * rep + (mode == "plain"))
            docs = wr.texts(2048, 300)
            f, fc = timed(lambda: eng.filter(docs, [wl.QUESTION]))
            anchors = wr.texts(8, 5000)
            j, jc = timed(lambda: eng.join(anchors, partners, wl.JOIN_QUESTION))
            rows.append({"rep": rep, "mode": mode, "filter_s": f, "filter_compiles": fc, "join_s": j,
                         "join_compiles": jc})
            print(rows[-1], flush=True)
    res = {"commit": args.commit, "block": block, "warmup_compiles": len(compiles), "runs": rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "swiglu_ab.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
