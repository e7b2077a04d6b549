"""Operations over many chunks: a chunk's last pass still runs while the next chunk is prepared
(a join's chunks share one scheduler, so their passes stay full).

Margins are those of one document (one anchor) at a time, an error in a later
chunk leaves nothing running, and the engine answers right afterwards.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig
from gpu_worker.prompts import PromptTooLong

MODEL = "tiny-llama-random"
WORDS = "refund late broken parcel apple pear market rain quiet park stock fell waiter cold rude".split()
Q = "Is the document a complaint?"
JQ = "Does DOCUMENT 1 mention DOCUMENT 2?"


def _texts(n, lo, hi, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(lo, hi)))) for _ in range(n)]


@pytest.fixture(scope="module")
def eng():
    return Engine(EngineConfig(model=MODEL, token_budget=32))


def test_filter_over_many_chunks_matches_one_document_at_a_time(eng):
    docs = _texts(40, 8, 30, 1)
    docs[5] = None
    extra = sum(len(t) for _, t in [eng.renderer.filter_parts(Q)])
    assert len(list(eng.chunks(docs, extra))) >= 3  # the work spans several chunks
    got = eng.filter(docs, [Q])
    assert not eng.passes.in_flight
    want = np.vstack([eng.filter([d], [Q]) for d in docs])
    assert np.allclose(got, want, atol=1e-5, equal_nan=True)
    fresh = Engine(EngineConfig(model=MODEL, token_budget=4096))  # the whole call in one chunk and pass
    assert len(list(fresh.chunks(docs, extra))) == 1
    assert np.allclose(got, fresh.filter(docs, [Q]), atol=1e-5, equal_nan=True)


def test_chain_over_many_chunks_matches_one_document_at_a_time(eng):
    """Chunks of documents tokenized ahead; the last predicate of a block runs on into the next block."""
    docs = _texts(40, 8, 30, 5)
    docs[7] = None
    qs = [Q, "Is it about food?"]
    assert len(list(eng.chunks(docs, len(eng.renderer.filter_parts(Q)[1])))) >= 3
    eng.reset_stats()
    got = eng.chain(docs, qs)
    assert not eng.passes.in_flight
    first, second = eng.stats["stages"]
    want = np.vstack([eng.chain([d], qs) for d in docs])
    assert np.allclose(got, want, atol=1e-5, equal_nan=True)
    passed = np.nan_to_num(got[:, 0], nan=-1) > 0
    assert np.isnan(got[~passed, 1]).all() and not np.isnan(got[passed, 1]).any()  # short circuit
    assert (first["evaluated"], first["passed"]) == (39, int(passed.sum()))
    assert (second["evaluated"], second["passed"]) == (int(passed.sum()), int((got[passed, 1] > 0).sum()))
    one = eng.chain(docs, [Q])[:, 0]
    assert np.allclose(one, got[:, 0], atol=1e-5, equal_nan=True)


def test_join_over_many_chunks_matches_one_anchor_at_a_time(eng):
    anchors = _texts(24, 30, 50, 2)
    partners = ["refund", "cold waiter", "apple pear", None]
    assert len(list(eng.chunks(anchors))) >= 3
    got = eng.join(anchors, partners, JQ)
    assert not eng.passes.in_flight
    want = np.vstack([eng.join([a], partners, JQ) for a in anchors])
    assert np.allclose(got, want, atol=1e-5, equal_nan=True)
    assert np.isnan(got[:, 3]).all() and not np.isnan(got[:, :3]).any()


def test_an_error_in_a_later_chunk_leaves_nothing_running(eng):
    docs = _texts(40, 8, 30, 3)
    docs[-1] = " ".join(["refund"] * (eng.rt.max_position + 10))  # too long: raised in the last chunk
    extra = len(eng.renderer.filter_parts(Q)[1])
    assert len(list(eng.chunks(docs, extra))) >= 3
    for op in (lambda: eng.filter(docs, [Q]), lambda: eng.chain(docs, [Q, Q])):
        with pytest.raises(PromptTooLong) as e:
            op()
        assert e.value.row == len(docs) - 1
        assert not eng.passes.in_flight
    again = eng.filter(docs[:-1], [Q])
    fresh = Engine(EngineConfig(model=MODEL, token_budget=4096))
    assert np.allclose(again, fresh.filter(docs[:-1], [Q]), atol=1e-5)


def test_pairs_of_a_cross_product_match_the_join(eng):
    """Each anchor and each partner of a cross product repeats on many rows; each is checked and tokenized once."""
    anchors = _texts(3, 20, 30, 4)
    partners = ["refund", "cold waiter", None, "apple pear"]
    grid = eng.join(anchors, partners, JQ)
    rows_a = [(a + " ")[:-1] for a in anchors for _ in partners]  # equal texts, distinct objects (as from Arrow)
    rows_p = [p for _ in anchors for p in partners]
    got = eng.pairs(rows_a, rows_p, JQ)
    assert np.allclose(got, grid.ravel(), atol=1e-5, equal_nan=True)
    with pytest.raises(ValueError, match=r"anchors\[5\] \(row 5\)"):
        eng.pairs(rows_a[:5] + ["bad \ud800"] + rows_a[6:], rows_p, JQ)


@pytest.fixture(scope="module")
def eng256():
    return Engine(EngineConfig(model=MODEL, token_budget=256))


def test_a_join_over_many_chunks_fills_its_passes(eng256):
    """One scheduler over the chunks: a chunk's last requests share the next chunk's first pass, so only
    the first pass (a small first chunk) and the last one run below the token budget."""
    e, budget = eng256, 256
    e.reset_stats()
    anchors = _texts(60, 30, 50, 6)
    rng = np.random.default_rng(7)
    partners = [" ".join(rng.choice(WORDS, int(rng.integers(1, 4)))) for _ in range(20)]
    head, mid, post = e.renderer.join_parts(JQ)
    extra = len(head) + len(mid) + sum(len(p) + len(post) for p in e.encode(partners))
    assert len(list(e.chunks(anchors, extra, len(partners)))) >= 4
    got = e.join(anchors, partners, JQ)
    st = e.stats
    assert st["forward_passes"] <= -(-st["fresh_tokens"] // budget) + 2  # (a pass per chunk more before)
    assert st["kv_regret_tokens"] == 0 and not e.passes.in_flight
    whole = Engine(EngineConfig(model=MODEL, token_budget=16384))  # one chunk
    assert len(list(whole.chunks(anchors, extra, len(partners)))) == 1
    assert np.allclose(got, whole.join(anchors, partners, JQ), atol=1e-5)


def test_an_error_in_a_later_chunk_of_a_join_leaves_nothing_running(eng256):
    eng = eng256
    anchors = _texts(60, 30, 50, 8)
    anchors[-1] = " ".join(["refund"] * (eng.rt.max_position + 10))  # too long: raised in the last chunk
    rng = np.random.default_rng(9)
    partners = [" ".join(rng.choice(WORDS, int(rng.integers(1, 4)))) for _ in range(20)]
    assert len(list(eng.chunks(anchors, 300, len(partners)))) >= 3
    with pytest.raises(PromptTooLong) as e:
        eng.join(anchors, partners, JQ)
    assert e.value.row == len(anchors) - 1
    assert not eng.passes.in_flight
    nodes = list(eng.tree.roots.values())
    for n in nodes:  # nothing is left waiting for the failed call's passes
        assert n.pending == 0 and not n.ends
        nodes.extend(n.children.values())
    # the same pairs in another order: requests the failed call left unserved must not answer for them
    again = eng.join(anchors[-2::-1], partners[::-1], JQ)
    fresh = Engine(EngineConfig(model=MODEL, token_budget=4096))
    assert np.allclose(again, fresh.join(anchors[-2::-1], partners[::-1], JQ), atol=1e-5)


def _rayon_env_after_engine(env_extra: dict) -> str:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS")}
    env.update(env_extra)
    code = ("import os; from gpu_worker import Engine, EngineConfig; "
            "Engine(EngineConfig(model='tiny-llama-random', device='cpu', dtype='float32')); "
            "print(os.environ.get('RAYON_NUM_THREADS'))")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def test_the_tokenizer_leaves_a_core_to_the_launching_thread():
    """An engine caps the Rust tokenizer's threads at the cores but one (unless the user chose a number),
    so tokenizing the next chunk does not preempt the thread launching the device's work."""
    import os

    cores = len(os.sched_getaffinity(0))
    assert _rayon_env_after_engine({}) == (str(cores - 1) if cores > 1 else "None")
    assert _rayon_env_after_engine({"RAYON_NUM_THREADS": "7"}) == "7"


def test_the_first_pass_after_an_idle_device_holds_at_most_first_jobs(eng256):
    """With `first_jobs` (on a GPU by default) the pass launched while nothing is in flight stops after that
    many jobs, so the device starts after a short plan; later passes fill the budget; the margins are
    those of uncapped passes."""
    e = eng256
    anchors = _texts(6, 30, 50, 11)
    rng = np.random.default_rng(12)
    partners = [" ".join(rng.choice(WORDS, int(rng.integers(1, 4)))) for _ in range(30)]
    docs = _texts(20, 3, 6, 13)
    assert e.passes.first_jobs == 0  # none on a CPU: the host computes the passes itself
    want_j, want_f = e.join(anchors, partners, JQ), e.filter(docs, [Q])
    sizes: list[int] = []
    run = e.runner.run
    e.runner.run = lambda jobs, *a, **kw: sizes.append(len(jobs)) or run(jobs, *a, **kw)
    try:
        e.passes.first_jobs = 5
        e.clear_cache()  # nothing resident: every job computed again
        got_j = e.join(anchors, partners, JQ)
        join_sizes = list(sizes)
        sizes.clear()
        got_f = e.filter(docs, [Q])
    finally:
        e.runner.run = run
        e.passes.first_jobs = 0
    assert join_sizes[0] == 5 and max(join_sizes[1:]) > 5  # the first pass capped, the next ones not
    assert sizes[0] == 5 and len(sizes) >= 2
    assert np.allclose(got_j, want_j, atol=1e-5) and np.allclose(got_f, want_f, atol=1e-5)
    assert not e.passes.in_flight
