"""The CPU projections (ops.linear): oneDNN's linear where torch has it, equal to x @ w.t().

float32 products summed in another order: differences of a few ulps of the largest output,
bounded here by 1e-5 relative (the engine's margins against transformers are checked in
test_exactness.py)."""
from __future__ import annotations

import pytest
import torch

from gpu_worker import ops


@pytest.mark.parametrize("rows", [0, 1, 6, 42, 431])
@pytest.mark.parametrize("n, k", [(960, 576), (123, 64), (2, 1536)])
def test_linear_equals_matmul(rows, n, k):
    g = torch.Generator().manual_seed(rows * 7 + n)
    x, w = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g)
    y = ops.linear(x, w)
    assert y.shape == (rows, n) and y.dtype == torch.float32
    ref = x.double() @ w.double().t()
    if rows:
        assert float((y.double() - ref).abs().max() / ref.abs().max()) < 1e-5


def test_linear_takes_a_strided_input():
    x, w = torch.randn(9, 1200)[:, 100:676], torch.randn(31, 576)
    assert not x.is_contiguous()
    torch.testing.assert_close(ops.linear(x, w), x @ w.t(), rtol=1e-5, atol=1e-4)


def test_cpu_builds_take_onednn():
    # torch's x86 and arm64 wheels carry oneDNN; the engine's CPU path must use it, not fall back
    assert torch.backends.mkldnn.is_available() and ops._onednn_ok()


@pytest.mark.parametrize("rows", [0, 1, 5, 300])
def test_swiglu_equals_linear_then_silu_and_mul(rows):
    """The MLP's gate and up projections with SiLU and the product fused into oneDNN's epilogues."""
    g = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 576, generator=g), torch.randn(2 * 1536, 576, generator=g) * 0.05
    y = ops.swiglu(x, w)
    ref = ops.TorchOps.silu_and_mul(x.double() @ w.double().t())
    assert y.shape == (rows, 1536) and y.dtype == torch.float32
    if rows:
        assert float((y.double() - ref).abs().max() / ref.abs().max()) < 1e-5


def test_rotate_and_rmsnorm_follow_the_reference_formulas():
    """RoPE written into one output and RMSNorm's weight applied in place: Hugging Face's formulas."""
    g = torch.Generator().manual_seed(3)
    x, cos, sin = torch.randn(7, 3, 64, generator=g), torch.randn(7, 32, generator=g), torch.randn(7, 32, generator=g)
    x1, x2, c, s = x[..., :32], x[..., 32:], cos[:, None], sin[:, None]
    torch.testing.assert_close(ops.rotate(x, cos, sin), torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1))
    h, w = torch.randn(5, 576, generator=g), torch.randn(576, generator=g)
    before = h.clone()
    want = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5))
    torch.testing.assert_close(ops.rmsnorm(h, w, 1e-5), want, rtol=0, atol=0)
    assert torch.equal(h, before)  # the input is not written
