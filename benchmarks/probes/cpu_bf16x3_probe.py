"""Can bfloat16 matrix units (AMX on Intel Xeon) run SmolLM2's float32 projections faster at float32's
accuracy? One thread (as a Spark Python worker runs), the projection shapes of SmolLM2-135M at a
pass's token counts, three ways through torch's public CPU path (oneDNN):

- float32 (``torch.backends.mkldnn.matmul.fp32_precision = "ieee"``, the engine's default);
- one bfloat16 product: float32 tensors, oneDNN's bf16 math mode (inputs rounded to bfloat16,
  float32 accumulation and output);
- three bfloat16 products ("bf16x3"): x = xh + xl and W = Wh + Wl split into bfloat16 parts,
  x W^T ~ xh Wh^T + xl Wh^T + xh Wl^T as one product over a tripled inner dimension in the bf16
  math mode (float32's accuracy to ~1e-5; the weight split made once, the activation split per call).

Error: max abs difference from float64, over the output's max abs. Time: median of 20 calls.

    PYTHONPATH=. python benchmarks/probes/cpu_bf16x3_probe.py --out benchmarks/probes/results/cpu_bf16x3_<commit>.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

# (tokens, in, out): q/o, k+v, gate+up, down at 512 tokens; gate+up at 128 and 2,048
SHAPES = [(512, 576, 576), (512, 576, 384), (512, 576, 3072), (512, 1536, 576), (128, 576, 3072), (2048, 576, 3072)]


def median_s(fn, n: int = 20) -> float:
    fn(), fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def math_mode(mode: str):
    torch.backends.mkldnn.matmul.fp32_precision = mode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    for m, k, n in SHAPES:
        x, w = torch.randn(m, k), torch.randn(n, k) * 0.05
        ref = F.linear(x.double(), w.double())
        err = lambda y: ((y.double() - ref).abs().max() / ref.abs().max()).item()  # noqa: E731
        wh = w.bfloat16().float()
        w3 = torch.cat([wh, wh, (w - wh).bfloat16().float()], 1).contiguous()

        def bf16x3():
            xh = x.bfloat16().float()
            return F.linear(torch.cat([xh, x - xh, xh], 1), w3)

        math_mode("ieee")
        t32, e32 = median_s(lambda: F.linear(x, w)), err(F.linear(x, w))
        math_mode("bf16")
        t1, e1 = median_s(lambda: F.linear(x, w)), err(F.linear(x, w))
        t3, e3 = median_s(bf16x3), err(bf16x3())
        math_mode("ieee")
        row = {"shape": [m, k, n], "f32_gflops": round(2 * m * k * n / t32 / 1e9, 1), "f32_err": e32,
               "bf16_speedup": round(t32 / t1, 2), "bf16_err": e1, "bf16x3_speedup": round(t32 / t3, 2), "bf16x3_err": e3}
        rows.append(row)
        print(row, flush=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open(a.out, "w") as f:
        json.dump({"commit": commit, "cpu": cpu, "torch": torch.__version__, "threads": 1, "shapes": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
