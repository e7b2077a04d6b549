"""The FP8 engine's context attention (float8 keys and queries) in a small engine against a torch emulation.

tiny-qwen3-random (head size 32), a join of 2 anchors x 10 partners: margins with the context in 16 bits,
with float8 keys through quail_kernels.seg_attention (the engine's path), and with the same quantization done in
torch (quail_kernels.kv_fp8.dequant, the query rounded to float8 per row with the keys' channel scales folded in,
then kernels.seg_attention_ref). Prints sign agreement and RMS differences; where the kernel departs from
its emulation and the emulation does not, the kernel is at fault.

    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/probes/fp8_ctx_engine_check.py --device cpu
    PYTHONPATH=. python3 benchmarks/probes/fp8_ctx_engine_check.py --device cuda
"""
from __future__ import annotations

import argparse
import sys
import types

import numpy as np
import torch

import quail_kernels as kernels
from gpu_worker import Engine, EngineConfig
from gpu_worker.cuda_ops import CudaOps
from quail_kernels.kv_fp8 import dequant
from quail_kernels.seg_attention import seg_attention_ref


def emulated(q, k, v, seg, items, bt, *, causal=False, out=None, lse=None, merge=False, amax=None, **kw):
    if amax is None:
        return kernels.seg_attention(q, k, v, seg, items, bt, causal=causal, out=out, lse=lse, merge=merge, **kw)
    rep = q.shape[1] // k.shape[1]
    ks = (amax.cpu().clamp_min(1e-12) / 448).repeat_interleave(rep, 0)[None]
    qf = q.cpu().float() * ks
    sq = qf.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 448
    q8 = (qf / sq).clamp(-448, 448).to(torch.float8_e4m3fn).float() * sq / ks
    o, l_ = seg_attention_ref(q8, dequant(k.cpu(), amax.cpu()), v.cpu(), seg.cpu().numpy(), out=out.cpu(), lse=lse.cpu(), merge=merge)
    out.copy_(o.to(out.dtype))
    lse.copy_(l_)
    return out, lse


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    rng = np.random.default_rng(3)
    anchors = [rng.integers(20, 49000, n).tolist() for n in (150, 90)]
    dtype = "bfloat16" if a.device != "cpu" else "float32"
    margins = {}
    reqs = None
    for mode in ("bf16_context", "fp8_kernel", "fp8_emulated"):
        eng = Engine(EngineConfig(model="tiny-qwen3-random", device=a.device, dtype=dtype, quantize="fp8"))
        ops = eng.runner.ops if a.device != "cpu" else CudaOps(use_triton=True, self_attn="triton", ctx_attn="fused")
        eng.runner.ops = eng.rt.ops = ops
        ops.ctx_fp8 = mode != "bf16_context"
        if mode == "fp8_emulated":
            ops.kernels = types.SimpleNamespace(**{n: getattr(kernels, n) for n in kernels.__all__})
            ops.kernels.seg_attention = emulated
        if reqs is None:
            jh, jm, jp = eng.renderer.join_parts("Does 1 mention 2?")
            reqs = [(jh + x + jm, rng.integers(20, 49000, int(n)).tolist() + jp)
                    for x in anchors for n in rng.integers(2, 12, 10)]
        margins[mode] = eng._margins(eng._run(reqs))
    want = margins["bf16_context"]
    big = np.abs(want) > 0.1
    for mode in ("fp8_kernel", "fp8_emulated"):
        got = margins[mode]
        print(mode, "sign agreement", round(float((np.sign(want[big]) == np.sign(got[big])).mean()), 3),
              "rms diff", round(float(np.sqrt(((got - want) ** 2).mean())), 4))
    print("kernel vs emulation rms diff",
          round(float(np.sqrt(((margins["fp8_kernel"] - margins["fp8_emulated"]) ** 2).mean())), 4),
          "rms margin", round(float(np.sqrt((want ** 2).mean())), 4))
    for k, m in margins.items():
        print(k, np.round(m, 2).tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
