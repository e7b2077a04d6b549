"""The engine on a CUDA GPU at default settings (pool sized from free memory): no out-of-memory on
the shapes users bring, margins as the float32 engine's. Skipped without a GPU.

The random-weight presets need the SmolLM2 tokenizer: on a machine without its GGUF package, name a
folder holding its tokenizer.json in QUAIL_TOKENIZER (BENCHMARKS.md shows how it is made).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from gpu_worker import Engine, EngineConfig

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (compiled Triton)")

WORDS = ("rash fever cough nausea headache swelling pain itching dizziness fatigue vomiting chills aspirin "
         "ibuprofen vaccine antibiotic insulin steroid patient reported mild severe after taking skin").split()


def _texts(n, words, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, words)) for _ in range(n)]


def _partners(n, seed=0):
    """Reaction terms of 2-5 words whose first words repeat ("skin rash", "skin pain", ...)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS[:12], int(k))) for k in rng.integers(2, 6, n)]


def test_default_engine_join_of_long_anchors_fits_in_memory():
    """The shape that ran out of memory at 6098c10: 32 anchors of ~3,400 tokens x 1,127 partners."""
    eng = Engine(EngineConfig(model="qwen3-4b-random", device="cuda"))
    total = torch.cuda.get_device_properties(0).total_memory
    anchors, partners = _texts(32, 3400, 1), _partners(1127)
    m = eng.join(anchors, partners, "Does DOCUMENT 1 report the reaction in DOCUMENT 2?")
    assert m.shape == (32, 1127) and not np.isnan(m).any()
    f = eng.filter(_texts(600, 300, 2), ["Is it severe?"])
    c = eng.chain(_texts(300, 300, 3), ["Is it severe?", "Is it mild?"])
    assert not np.isnan(f).any() and not np.isnan(c[:, 0]).any()
    assert torch.cuda.max_memory_allocated() < total
    assert eng.stats["kv_regret_tokens"] == 0


def test_bf16_join_with_shared_partner_words_agrees_with_float32():
    """Partners split below each anchor by shared words: the anchor read once per pass, the shared
    words as a second context segment (cuda_ops._shared_base_segments); margins as float32's, within
    the rounding of torch's own bf16 path (flash attention, no Triton) on the same weights."""
    ref = Engine(EngineConfig(model="tiny-qwen3-random", device="cuda", dtype="float32", use_triton=False))
    eng = Engine(EngineConfig(model="tiny-qwen3-random", device="cuda", token_budget=512))
    plain = Engine(EngineConfig(model="tiny-qwen3-random", device="cuda", token_budget=512, use_triton=False,
                                kv_pool_tokens=1 << 16))
    anchors, partners = _texts(6, 300, 4), _partners(60, 5)
    want = ref.join(anchors, partners, "Does 1 mention 2?")
    got = eng.join(anchors, partners, "Does 1 mention 2?")
    err, err_plain = np.abs(got - want).max(), np.abs(plain.join(anchors, partners, "Does 1 mention 2?") - want).max()
    assert err < max(0.1, 1.5 * err_plain), (err, err_plain)
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.99


@pytest.mark.parametrize("quantize", [None, "fp8"])
def test_a_pass_without_an_answer_row_runs(quantize):
    """A token budget below a prompt's length: the prompt's first chunks fill passes of their own, whose last
    layer has no answer row (its MLP once got zero rows and failed on the GPU's fused SwiGLU path); the
    margins are those of a budget that fits each prompt whole (FP8: within e4m3's rounding, the activations'
    scales taken over other chunks)."""
    docs = _texts(4, 200, 7)
    small = Engine(EngineConfig(model="tiny-qwen3-random", device="cuda", token_budget=64, quantize=quantize,
                                measure_rate=False))
    whole = Engine(EngineConfig(model="tiny-qwen3-random", device="cuda", quantize=quantize, measure_rate=False))
    got, want = small.filter(docs, ["Is it?"]), whole.filter(docs, ["Is it?"])
    assert np.abs(np.asarray(got) - np.asarray(want)).max() < (0.5 if quantize else 0.1)


def test_passes_of_odd_and_even_token_counts_compile_no_kernel_after_the_first():
    """A pass's index views are 16-byte aligned whatever its token count (runner.to_device_aligned), so
    Triton compiles nothing new when a pass of the other parity comes (each compile idles the device)."""
    from triton import knobs

    eng = Engine(EngineConfig(model="tiny-qwen3-random", device="cuda"))
    eng.filter(["a b c d"], ["Is it?"])  # compiles the kernels for its shapes
    compiled = []
    knobs.runtime.jit_post_compile_hook = lambda *a, **kw: compiled.append(kw.get("repr"))
    try:
        for n in range(5, 9):  # documents of n words: passes of both parities
            eng.filter([" ".join(["rash"] * n)], ["Is it?"])
    finally:
        knobs.runtime.jit_post_compile_hook = None
    assert compiled == []
