"""FILTER from text with the last pass of a chunk deferred or not (GPU gaps per pass from events), and the
engine calls of the Spark SQL functions' bodies per Arrow batch of 1,024 and 8,192 rows.

    PYTHONPATH=. python3 benchmarks/probes/filter_probe.py $OUT          # H200, tokenizer in .cache/tok
    PYTHONPATH=. python benchmarks/probes/filter_probe.py /tmp/x smoke   # CPU, tiny model
"""
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, "benchmarks")
import bench_workloads as wl  # noqa: E402
import public_bench as pb  # noqa: E402
from gpu_bench import count_pairs, matmul_rate  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
log = logging.getLogger("probe")
out_dir = Path(sys.argv[1])
smoke = len(sys.argv) > 2
dev = torch.device("cpu" if smoke else "cuda")
model = "tiny-qwen3-random" if smoke else "qwen3-4b-random"
N, W = (24, 40) if smoke else (2048, 300)
res = {}
rate = matmul_rate(dev)
res["rate"] = rate
eng = Engine(EngineConfig(model=model, device=str(dev), tokenizer=None if smoke else ".cache/tok"))
count_pairs(eng)
w = pb.Words(eng.tokenizer, 1)
eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)
eng.filter(w.texts(64, W), [wl.QUESTION])
eng.filter(w.texts(160 if not smoke else 8, W), [wl.QUESTION])  # a full-budget pass too

# per-pass GPU timeline (events around each launch)
run0 = eng.runner.run
passes = []


def ev_run(jobs):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    r = run0(jobs)
    b.record()
    passes.append((a, b, sum(j.num_tokens for j in jobs)))
    return r


run_inner = eng._run  # count_pairs' wrapper


def filt(seed, defer=True, timeline=False):
    ww = pb.Words(eng.tokenizer, seed)
    docs = ww.texts(N, W)
    if not defer:
        eng._run = lambda reqs, *a, **kw: run_inner(reqs)
    if timeline and dev.type == "cuda":
        eng.runner.run = ev_run
        passes.clear()
    try:
        _, st = pb.timed(eng, dev, lambda: eng.filter(docs, [wl.QUESTION]))
    finally:
        eng._run = run_inner
        eng.runner.run = run0
    st = pb.with_sol(eng, st, rate, len(docs))
    row = {k: st[k] for k in ("wall_s", "pct_sol", "requested_tok_s", "forward_passes", "sol_s")}
    if timeline and passes:
        torch.cuda.synchronize()
        gpu = [a.elapsed_time(b) for a, b, _ in passes]
        gaps = [p[1].elapsed_time(q[0]) for p, q in zip(passes, passes[1:])]
        row.update(gpu_ms=sum(gpu), gap_ms=sum(gaps), gaps=[round(g, 1) for g in gaps],
                   toks=[t for _, _, t in passes], per_pass_ms=[round(g, 1) for g in gpu])
    log.info("FILTER seed %d defer %s: %s", seed, defer, {k: v for k, v in row.items() if not isinstance(v, list)})
    return row


res["filter"] = [filt(11), filt(12), filt(13, timeline=True), filt(14, defer=False),
                 filt(15, defer=False, timeline=True), filt(16)]
(out_dir / "filter_probe.json").write_text(json.dumps(res, indent=1))

# Spark UDF-body shapes: quail_chain -> Engine.chain per Arrow batch; quail_join -> Engine.pairs per batch
B = 1024
ww = pb.Words(eng.tokenizer, 21)
docs = ww.texts(N, W)
_, st = pb.timed(eng, dev, lambda: [eng.chain(docs[i:i + B], [wl.QUESTION]) for i in range(0, len(docs), B)])
docs2 = ww.texts(N, W)
_, api = pb.timed(eng, dev, lambda: eng.filter(docs2, [wl.QUESTION]))
res["udf_filter"] = {"udf_tok_s": st["requested_tok_s"], "api_tok_s": api["requested_tok_s"],
                     "ratio": st["requested_tok_s"] / api["requested_tok_s"]}
log.info("UDF FILTER: %s", res["udf_filter"])
na, npart = (2, 20) if smoke else (8, 1000)
for b in (B, 8192):
    anchors, partners = ww.texts(na, 5000 if not smoke else 300), ww.partners(npart)
    pa_, pp_ = [a for a in anchors for _ in partners], [p for _ in anchors for p in partners]
    _, st = pb.timed(eng, dev, lambda: [eng.pairs(pa_[i:i + b], pp_[i:i + b], wl.JOIN_QUESTION)
                                        for i in range(0, len(pa_), b)])
    anchors2 = ww.texts(na, 5000 if not smoke else 300)
    _, api = pb.timed(eng, dev, lambda: eng.join(anchors2, partners, wl.JOIN_QUESTION))
    res[f"udf_join_{b}"] = {"udf_tok_s": st["requested_tok_s"], "api_tok_s": api["requested_tok_s"],
                            "ratio": st["requested_tok_s"] / api["requested_tok_s"], "wall": st["wall_s"]}
    log.info("UDF JOIN batch %d: %s", b, res[f"udf_join_{b}"])
(out_dir / "filter_probe.json").write_text(json.dumps(res, indent=1))
