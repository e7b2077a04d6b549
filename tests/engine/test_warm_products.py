"""DecoderBody.warm_products (run at engine start on CUDA): every projection form once per row count of the
grid, on the weights as the engine holds them (bf16 layouts and FP8), and nothing the engine answers changes."""
import numpy as np
import pytest
import torch

from gpu_worker import Engine, EngineConfig
from gpu_worker.cuda_ops import CudaOps

MODEL = "tiny-qwen3-random"


def _answers(eng):
    head, tail = eng.renderer.filter_parts("Is it about fruit?")
    rng = np.random.default_rng(5)
    reqs = [(head + rng.integers(20, 49000, int(n)).tolist(), tail) for n in (9, 30, 17)]
    eng.tree.op += 1
    return eng._margins(eng._run(reqs))


@pytest.mark.parametrize("quantize,ops,want", [
    (None, CudaOps(use_triton=False), 2 * 6),  # qkv, [gate; up], o and down alone and with the residual added
    (None, None, 2 * 4),  # the engine's own ops: no residual added in the products
    ("fp8", None, 2 * 4),  # qkv, o, [gate; up], down on quantized rows
])
def test_warm_products_runs_each_form_and_changes_nothing(quantize, ops, want):
    eng = Engine(EngineConfig(model=MODEL, dtype="float32", quantize=quantize, prefix_cache=False))
    before = _answers(eng)
    weights = {k: v.clone() for k, v in eng.model.state_dict().items()}
    calls = []
    ops = ops or eng.rt.ops
    for name in ("linear", "linear_add", "quant_rows"):
        if hasattr(ops, name):
            fn = getattr(ops, name)
            setattr(ops, name, lambda *a, _fn=fn, _n=name: calls.append((_n, a[0].shape[0])) or _fn(*a))
    n = eng.model.warm_products(ops, max_rows=64, step=32)
    assert n == want
    assert sorted({m for _, m in calls}) == [32, 64]
    assert all(torch.equal(v, weights[k]) for k, v in eng.model.state_dict().items())
    np.testing.assert_array_equal(_answers(eng), before)
