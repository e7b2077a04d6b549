"""FILTER on the GPU: the cuBLAS floor of a 32,768-token pass's projections, full FILTER calls under
attention variants, and a torch.profiler kernel table of 512 documents.

    PYTHONPATH=. python3 benchmarks/probes/filter_kernels_probe.py $OUT   # H200, tokenizer in .cache/tok
"""
import json
import logging
import sys
import time
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, "benchmarks")
import bench_workloads as wl  # noqa: E402
import public_bench as pb  # noqa: E402
from gpu_bench import count_pairs, matmul_rate  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from gpu_worker.cuda_ops import CudaOps  # noqa: E402

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
log = logging.getLogger("probe")
out_dir = Path(sys.argv[1])
dev = torch.device("cuda")
res = {"rate": matmul_rate(dev)}
log.info("rate %.1f", res["rate"])
# GEMM floor of one 32768-token pass (36 layers of qkv, o, gate_up, down)
M = 32768
shapes = [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)]
x = {k: torch.randn(M, k, device=dev, dtype=torch.bfloat16) for k in (2560, 4096, 9728)}
ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for n, k in shapes]
g = {}
for (n, k), w in zip(shapes, ws):
    ms = triton.testing.do_bench(lambda: torch.nn.functional.linear(x[k], w), warmup=50, rep=300, return_mode="median")
    g[f"{n}x{k}"] = {"ms": ms, "tflops": 2 * M * n * k / ms / 1e9}
res["gemm"] = g
res["gemm_pass_ms"] = 36 * sum(v["ms"] for v in g.values())
log.info("GEMMs %s; pass floor %.1f ms", {k: round(v["tflops"]) for k, v in g.items()}, res["gemm_pass_ms"])
del x, ws

eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda", tokenizer=".cache/tok"))
count_pairs(eng)
w = pb.Words(eng.tokenizer, 1)
eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)
eng.filter(w.texts(160, 300), [wl.QUESTION])
base_ops = eng.runner.ops


def filt(seed, label):
    docs = pb.Words(eng.tokenizer, seed).texts(2048, 300)
    _, st = pb.timed(eng, dev, lambda: eng.filter(docs, [wl.QUESTION]))
    st = pb.with_sol(eng, st, res["rate"], len(docs))
    row = {"wall_s": st["wall_s"], "pct_sol": st["pct_sol"]}
    log.info("%s: %s", label, row)
    return row


variants = {"default": {}, "fold off": {"fold": False}, "all in seg kernel": {"_short_max": 0},
            "self flash": {"self_attn": "flash"}, "triton max 256": {"_short_max": 256}}
res["variants"] = {}
seed = 100
for name, kw in variants.items():
    kw = dict(kw)
    sm = kw.pop("_short_max", None)
    ops = CudaOps(**kw)
    if sm is not None:
        ops.short_max = sm
    eng.runner.ops = ops
    eng.filter(w.texts(160, 300), [wl.QUESTION])  # warm: compile
    res["variants"][name] = [filt(seed, name), filt(seed + 1, name)]
    seed += 2
eng.runner.ops = base_ops
(out_dir / "filter_kernels_probe.json").write_text(json.dumps(res, indent=1))

docs = pb.Words(eng.tokenizer, 7).texts(512, 300)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    eng.filter(docs, [wl.QUESTION])
    torch.cuda.synchronize()
tab = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90)
print(tab)
(out_dir / "filter_profile.txt").write_text(tab)
(out_dir / "filter_kernels_probe.json").write_text(json.dumps(res, indent=1))
