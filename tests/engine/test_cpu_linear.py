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
