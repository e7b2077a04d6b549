"""Three engine changes measured against each other in one lease, through the public API (fresh texts each run):

  first   the first pass launched while nothing is in flight holds at most passes.FIRST_PASS_JOBS jobs
          (Passes.first_jobs; 0 turns it off)
  pieces  a long document tokenized as pieces in one batched call (PromptRenderer.piece_chars; 0: whole)
  resid   the output and down projections add into the residual in cuBLAS's epilogue, then RMSNorm alone
          (CudaOps.residual_gemm; False: a plain product, then the add + RMSNorm kernel)

JOIN 8 x 1,000 under each variant (runs interleaved round-robin), FILTER 2,048 x 300 and BIO-2 at
--bio2-anchors under `none` and `all`, the same texts under `none` and `all` for the margins (max |diff|,
sign agreement where |m| > 0.1), and the tokenization of 8 anchors of ~5,000 words whole and in pieces.

    PYTHONPATH=.:benchmarks python3 benchmarks/probes/host_and_norm_ab.py --tokenizer .cache/tok --commit $C --out $OUT
    ... --join-only --runs 10 --join-variants all_but_first,all      # the first-pass cap alone, JOIN only
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_workloads as wl  # noqa: E402
from gpu_bench import count_pairs, matmul_rate, sign_report  # noqa: E402
from public_bench import Words, timed, with_sol  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from gpu_worker.passes import FIRST_PASS_JOBS  # noqa: E402
from gpu_worker.prompts import PIECE_CHARS  # noqa: E402

VARIANTS = {"none": (0, 0, False), "first": (FIRST_PASS_JOBS, 0, False), "pieces": (0, PIECE_CHARS, False),
            "resid": (0, 0, True), "all": (FIRST_PASS_JOBS, PIECE_CHARS, True),
            "all_but_first": (0, PIECE_CHARS, True)}


def set_variant(eng, name):
    first, pieces, resid = VARIANTS[name]
    eng.passes.first_jobs = first
    eng.renderer.piece_chars = pieces
    if hasattr(eng.rt.ops, "linear_add"):
        eng.rt.ops.residual_gemm = resid


def run(eng, fn, rate, n_prompts):
    """public_bench's timing and speed-of-light share of one call."""
    m, st = timed(eng, eng.rt.device, fn)
    st = with_sol(eng, st, rate, n_prompts)
    return m, {k: st[k] for k in ("wall_s", "requested_tok_s", "pct_sol", "forward_passes", "fresh_tokens")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bio2-anchors", type=int, default=40)
    ap.add_argument("--join-variants", default="none,first,pieces,resid,all",
                    help="JOIN's variants; --join-only: JOIN alone (no FILTER, BIO-2, margins)")
    ap.add_argument("--join-only", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a tiny model on the CPU, small sizes (checks the script)")
    args = ap.parse_args()
    n = dict(words=5000, filter_docs=2048, doc_words=300, bio2_lo=4500, bio2_hi=5501, partners=1000, bio2_partners=1127)
    if args.smoke:
        n = dict(words=300, filter_docs=40, doc_words=30, bio2_lo=200, bio2_hi=300, partners=20, bio2_partners=30)
    out = Path(args.out)
    dev = torch.device("cpu" if args.smoke else "cuda")
    res = {"commit": args.commit, "device": "cpu" if args.smoke else torch.cuda.get_device_name(dev),
           "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "variants": VARIANTS}
    res["matmul_tflops"] = rate = matmul_rate(dev)
    eng = Engine(EngineConfig(model="tiny-qwen3-random" if args.smoke else "qwen3-4b-random", device=dev.type,
                              tokenizer=args.tokenizer, token_budget=256 if args.smoke else None))
    count_pairs(eng)
    w = Words(eng.tokenizer, 5)
    for v in ("none", "all"):  # warm-up: kernels compile under both layer forms
        set_variant(eng, v)
        eng.join(w.texts(2, n["words"] // 10), w.partners(50), wl.JOIN_QUESTION)
        eng.filter(w.texts(160, n["doc_words"]), [wl.QUESTION])

    def save():
        (out / "host_and_norm_ab.json").write_text(json.dumps(res, indent=1, default=float))

    # tokenization of 8 anchors, whole and in pieces (the host's cores but one, as an engine leaves them)
    anchors = w.texts(8, n["words"])
    tok = {}
    for v in ("none", "pieces", "none", "pieces"):
        set_variant(eng, v)
        t0 = time.perf_counter()
        ids = eng.renderer.encode_docs(anchors)
        tok.setdefault(v, []).append(round((time.perf_counter() - t0) * 1e3, 2))
        tok.setdefault(v + "_tokens", sum(map(len, ids)))
    res["tokenize_8_anchors_ms"] = tok
    print("tokenize", tok, flush=True)

    partners = w.partners(n["partners"])
    join = res.setdefault("JOIN 8x1000", {})
    for r in range(args.runs):
        for v in args.join_variants.split(","):
            set_variant(eng, v)
            anchors = w.texts(8, n["words"])
            _, st = run(eng, lambda: eng.join(anchors, partners, wl.JOIN_QUESTION), rate, 8 * len(partners))
            join.setdefault(v, []).append(st)
            print("JOIN", v, st, flush=True)
        save()
    for v, runs in join.items():
        res.setdefault("JOIN median requested tok/s", {})[v] = float(np.median([s["requested_tok_s"] for s in runs]))
    print("JOIN medians", res["JOIN median requested tok/s"], flush=True)
    save()
    if args.join_only:
        return

    docs_f = w.texts(n["filter_docs"], n["doc_words"])
    filt = res.setdefault("FILTER 2048x300", {})
    for r in range(2):
        for v in ("none", "resid", "all"):
            set_variant(eng, v)
            docs = w.texts(n["filter_docs"], n["doc_words"])
            _, st = run(eng, lambda: eng.filter(docs, [wl.QUESTION]), rate, len(docs))
            filt.setdefault(v, []).append(st)
            print("FILTER", v, st, flush=True)
        save()

    bio = res.setdefault(f"BIO-2 {args.bio2_anchors} anchors", {})
    bp = w.partners(n["bio2_partners"])
    for r in range(2):
        for v in ("none", "all"):
            set_variant(eng, v)
            anchors = w.texts(args.bio2_anchors, lambda: int(w.rng.integers(n["bio2_lo"], n["bio2_hi"])))
            _, st = run(eng, lambda: eng.join(anchors, bp, wl.JOIN_QUESTION), rate, len(anchors) * len(bp))
            bio.setdefault(v, []).append(st)
            print("BIO-2", v, st, flush=True)
        save()

    # the same texts both ways, nothing resident: the margins agree
    ja = w.texts(2, n["words"])
    ms = {}
    for v in ("none", "all"):
        set_variant(eng, v)
        eng._new_tree()
        ms[v] = (eng.join(ja, partners, wl.JOIN_QUESTION), eng.filter(docs_f[:256], [wl.QUESTION]))
    res["margins all vs none"] = {"JOIN 2x1000": sign_report(ms["none"][0].ravel(), ms["all"][0].ravel()),
                                  "FILTER 256": sign_report(ms["none"][1].ravel(), ms["all"][1].ravel())}
    print(res["margins all vs none"], flush=True)
    save()


if __name__ == "__main__":
    main()
