"""FP8 row quantization kernels (quail_kernels/fp8.py) against the torch path (gpu_worker/quant.py).

Triton's CPU interpreter truncates when it casts to float8 where torch and the
GPU round to nearest, so a quantized value may sit one e4m3 step (2^-3
relative) from torch's; scales are computed the same way and match exactly.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from gpu_worker.quant import fp8_linear, quant_rows as quant_ref, quantize_weight  # noqa: E402
from quail_kernels._util import interpreter_active  # noqa: E402
from quail_kernels.fp8 import fused_add_rmsnorm_fp8, quant_rows, rmsnorm_fp8, silu_and_mul_fp8  # noqa: E402
from quail_kernels.rmsnorm import fused_add_rmsnorm_ref, rmsnorm_ref  # noqa: E402
from quail_kernels.silu_mul import silu_and_mul_ref  # noqa: E402

DEVICE = "cpu" if interpreter_active() else ("cuda" if torch.cuda.is_available() else None)
if DEVICE is None:
    pytest.skip("needs Triton's interpreter or a CUDA device", allow_module_level=True)
SHAPES = [(1, 16), (5, 96), (33, 300), (4, 1000)]


def assert_quant_close(got, want_x, x_rtol=0.0):
    """(q, scale) from a kernel against the row it should represent (quantized by the torch path).

    x_rtol: how far the kernel's row itself may be from want_x before quantizing (the bf16
    rounding of RMSNorm / SiLU, one bf16 step where the interpreter truncates: 2^-7).
    """
    q, s = got
    wq, ws = quant_ref(want_x)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32 and s.shape == (want_x.shape[0], 1)
    torch.testing.assert_close(s.cpu(), ws, rtol=x_rtol + 1e-6, atol=0)
    deq, want = (q.cpu().float() * s.cpu()), want_x.float()
    step = (2.0**-3 + x_rtol) * want.abs() + 2.0**-9 * ws  # one e4m3 step (subnormals: the smallest step)
    assert ((deq - want).abs() <= step * 1.01).all()


@pytest.mark.parametrize("T,K", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quant_rows(T, K, dtype):
    x = (torch.randn(T, K) * 3).to(dtype)
    x[0, 0] = 0.0
    assert_quant_close(quant_rows(x.to(DEVICE)), x)


def test_quant_rows_zero_row_and_strided_input():
    x = torch.randn(6, 64)
    x[2] = 0.0
    big = torch.zeros(6, 100)
    big[:, :64] = x
    q, s = quant_rows(big[:, :64].to(DEVICE))
    assert s[2].item() > 0 and (q[2].float() == 0).all()
    assert_quant_close((q, s), x)


@pytest.mark.parametrize("T,D", SHAPES)
def test_rmsnorm_fp8(T, D):
    x, r, w = torch.randn(T, D).bfloat16(), torch.randn(T, D).bfloat16(), torch.rand(D).bfloat16() + 0.5
    assert_quant_close(rmsnorm_fp8(x.to(DEVICE), w.to(DEVICE), 1e-6), rmsnorm_ref(x, w, 1e-6), 2.0**-6)
    got, new_res = fused_add_rmsnorm_fp8(x.to(DEVICE), r.to(DEVICE), w.to(DEVICE), 1e-6)
    want, want_res = fused_add_rmsnorm_ref(x, r, w, 1e-6)
    torch.testing.assert_close(new_res.cpu(), want_res, rtol=2.0**-7, atol=2.0**-7)  # interpreter: truncation
    assert_quant_close(got, want, 3 * 2.0**-7)  # add, normalize, weight: three bf16 roundings


@pytest.mark.parametrize("T,F", SHAPES)
def test_silu_and_mul_fp8(T, F):
    gu = torch.randn(T, 2 * F).bfloat16()
    assert_quant_close(silu_and_mul_fp8(gu.to(DEVICE)), silu_and_mul_ref(gu), 2.0**-7)


def test_fp8_linear_close_to_float():
    x, w = torch.randn(40, 64), torch.randn(48, 64) / 8
    got = fp8_linear(quant_ref(x), quantize_weight(w), torch.float32)
    want = x @ w.t()
    assert ((got - want).norm() / want.norm()).item() < 0.08  # two e4m3 roundings (~2^-4 each) per product


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"gate_up: expected an even number of columns"):
        silu_and_mul_fp8(torch.randn(3, 7, device=DEVICE))
    with pytest.raises(ValueError, match=r"x: expected 2 dims"):
        quant_rows(torch.randn(3, 4, 5, device=DEVICE))
