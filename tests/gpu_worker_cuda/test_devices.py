"""An engine bound to one GPU of a host (as a Spark task handed GPU address "N" binds it) sizes its pool
from that GPU's memory, allocates and launches only there, and gives the margins of an engine on cuda:0.

With one GPU: "cuda:0" given explicitly and the default "cuda" agree, and the engine's work never changes
torch's current device outside its own calls. With two or more: the engine on cuda:1 against cuda:0.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from gpu_worker import Engine, EngineConfig

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (compiled Triton)")
MODEL = "tiny-qwen3-random"
WORDS = "refund late broken parcel apple pear market rain quiet park stock fell waiter cold rude".split()
Q, JQ = "Is the document a complaint?", "Does DOCUMENT 1 mention DOCUMENT 2?"


def _texts(n, lo, hi, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(lo, hi)))) for _ in range(n)]


def _work(eng):
    docs, partners = _texts(40, 20, 200, 1), _texts(30, 1, 5, 2)
    return (eng.filter(docs, [Q]), eng.chain(docs, [Q, "Is it about food?"]), eng.join(docs[:6], partners, JQ),
            eng.pairs(docs[:6], partners[:6], JQ), eng.classify(docs, ["bug", "praise"])[1])


def _on(eng, index: int):
    """Every weight and KV tensor of the engine is on cuda:index."""
    dev = torch.device("cuda", index)
    assert eng.rt.device == dev
    assert all(p.device == dev for p in eng.model.parameters())
    assert eng.runner.kv.k.device == dev and eng.runner.kv.v.device == dev


def test_explicit_cuda0_and_default_agree_and_keep_the_current_device():
    before = torch.cuda.current_device()
    a = Engine(EngineConfig(model=MODEL, device="cuda", kv_pool_tokens=65536))
    b = Engine(EngineConfig(model=MODEL, device="cuda:0", kv_pool_tokens=65536))
    _on(a, 0)
    _on(b, 0)
    for x, y in zip(_work(a), _work(b)):
        np.testing.assert_array_equal(x, y)
    assert torch.cuda.current_device() == before  # the engines make their device current only inside calls


def test_a_device_past_the_last_gpu_is_refused():
    n = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"torch sees {n} CUDA GPU"):
        Engine(EngineConfig(model=MODEL, device=f"cuda:{n}"))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_engine_on_cuda1_gives_cuda0s_margins_and_touches_only_its_gpu():
    ref = Engine(EngineConfig(model=MODEL, device="cuda:0", kv_pool_tokens=65536))
    want = _work(ref)
    torch.cuda.synchronize(0)
    used0 = torch.cuda.memory_allocated(0)
    torch.cuda.reset_peak_memory_stats(0)
    free1 = torch.cuda.mem_get_info(1)[0]
    eng = Engine(EngineConfig(model=MODEL, device="cuda:1"))  # pool sized from cuda:1's free memory
    _on(eng, 1)
    assert eng.rt.kv_slots * 2 * eng.runner.kv.k[0, 0].numel() * 2 <= free1
    got = _work(eng)
    for x, y in zip(want, got):
        np.testing.assert_allclose(x, y, atol=1e-3, equal_nan=True)
    torch.cuda.synchronize(0)
    assert torch.cuda.memory_allocated(0) == used0 and torch.cuda.max_memory_allocated(0) == used0
    assert torch.cuda.current_device() == 0
