"""quantize="fp8": float8 projections (per-row scales) on the plain-torch path.

Not exact by design: margins move by the quantization noise. Checked here:
close to the unquantized engine on the same weights, the same under every
packing (prefix cache on/off, budgets), and bad values refused.
"""
import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig

MODEL = "tiny-qwen3-random"


@pytest.fixture(scope="module")
def requests():
    ref = Engine(EngineConfig(model=MODEL, dtype="float32"))
    rng = np.random.default_rng(3)
    docs = [rng.integers(20, 49000, int(n)).tolist() for n in rng.integers(8, 60, 12)]
    head, tail = ref.renderer.filter_parts("Is it about fruit?")
    jh, jm, jp = ref.renderer.join_parts("Does 1 mention 2?")
    reqs = [(head + d, tail) for d in docs]
    reqs += [(jh + docs[0] + jm, p + jp) for p in ([5, 6, 7], [8, 9], [300, 301, 302, 303])]
    return reqs, ref.margins(reqs)


def test_fp8_margins_close_to_unquantized(requests):
    reqs, want = requests
    eng = Engine(EngineConfig(model=MODEL, dtype="float32", quantize="fp8"))
    assert eng.model.fp8 and eng.model.model.layers[0].self_attn.qkv_weight is None  # weights replaced
    got = eng.margins(reqs)
    assert np.abs(got - want).max() < 1.0  # e4m3: ~3 significant bits per operand
    assert np.corrcoef(got, want)[0, 1] > 0.95
    assert not np.allclose(got, want, atol=1e-3)  # the quantized path really ran


def test_fp8_same_under_any_packing(requests):
    reqs, _ = requests
    a = Engine(EngineConfig(model=MODEL, dtype="float32", quantize="fp8", token_budget=48))
    b = Engine(EngineConfig(model=MODEL, dtype="float32", quantize="fp8", prefix_cache=False))
    ma, mb = a.margins(reqs), b.margins(reqs)
    np.testing.assert_allclose(ma, mb, atol=1e-4)  # per-row scales: a row's numbers do not depend on its batch


def test_quantize_bad_value():
    with pytest.raises(ValueError, match="quantize must be None or 'fp8'"):
        EngineConfig(model=MODEL, quantize="int4")


def test_fp8_needs_fp8_tensor_cores():
    from gpu_worker.runtime import check_fp8_gpu

    check_fp8_gpu((9, 0), "NVIDIA H200")
    check_fp8_gpu((8, 9), "NVIDIA L4")
    with pytest.raises(ValueError, match=r"A100.* has 8\.0: leave quantize unset"):
        check_fp8_gpu((8, 0), "NVIDIA A100")


WORDS = "refund late broken parcel apple pear market rain quiet park stock fell waiter cold rude".split()


def _texts(n, lo, hi, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(lo, hi)))) for _ in range(n)]


def test_fp8_through_every_public_operation():
    """filter, score, chain, join, pairs and classify on the FP8 engine: close to the unquantized engine's."""
    ref = Engine(EngineConfig(model=MODEL, dtype="float32", kv_pool_tokens=8192))  # small pools: two engines
    eng = Engine(EngineConfig(model=MODEL, dtype="float32", quantize="fp8", kv_pool_tokens=8192))
    docs, partners = _texts(10, 5, 25, 1), _texts(4, 1, 4, 2)
    docs[3] = None
    qs = ["Is it a complaint?", "Is it about food?"]
    calls = {"filter": lambda e: e.filter(docs, qs),
             "score": lambda e: e.score(docs, qs[0]),
             "chain": lambda e: e.chain(docs, qs, short_circuit=False),
             "join": lambda e: e.join(docs[:4], partners, "Does DOCUMENT 1 mention DOCUMENT 2?"),
             "pairs": lambda e: e.pairs(docs[:4], partners, "Does DOCUMENT 1 mention DOCUMENT 2?"),
             "classify": lambda e: e.classify(docs, ["bug", "praise", "other"])[1]}
    for name, call in calls.items():
        want, got = call(ref), call(eng)
        assert np.array_equal(np.isnan(want), np.isnan(got)), name  # the same NULL rows
        ok = ~np.isnan(want)
        assert np.abs(got[ok] - want[ok]).max() < 1.0, name
        assert not np.allclose(got[ok], want[ok], atol=1e-4), name  # the quantized path really ran
    idx_ref, idx = ref.classify(docs, ["bug", "praise", "other"])[0], eng.classify(docs, ["bug", "praise", "other"])[0]
    assert idx[3] == idx_ref[3] == -1
