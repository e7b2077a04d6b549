"""The engine with its KV pool far smaller than the work, against a pool that holds everything and
against transformers; pairs; two threads on one engine."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig
from gpu_worker.reference import hf_margin, hf_model

MODEL = "tiny-llama-random"
WORDS = ("rash fever cough nausea headache swelling pain itching dizziness fatigue vomiting chills "
         "aspirin ibuprofen vaccine antibiotic insulin steroid patient reported mild severe after taking").split()
JOIN_Q = "Does DOCUMENT 1 mention DOCUMENT 2?"


def _anchors(n, words, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, words)) for _ in range(n)]


# partners share first words ("skin rash", "skin itch"): their tree nodes split below each anchor
PARTNERS = [f"{a} {b}" for a in ("skin", "severe", "mild") for b in ("rash", "pain", "itch", "fever")] + ["cough"]


@pytest.fixture(scope="module")
def engines():
    full = Engine(EngineConfig(model=MODEL, token_budget=256))  # the default CPU pool holds everything here
    small = Engine(EngineConfig(model=MODEL, token_budget=256, kv_pool_tokens=256))
    return full, small


def test_join_in_a_pool_five_times_too_small_matches_full_pool_and_transformers(engines):
    full, small = engines
    anchors = _anchors(8, 140)
    work = sum(len(full.render_join(a, "", JOIN_Q)) for a in anchors)
    assert work >= 5 * small.rt.kv_slots  # the anchors' KV alone is 5x the small pool
    got = small.join(anchors, PARTNERS, JOIN_Q)
    want = full.join(anchors, PARTNERS, JOIN_Q)
    assert np.abs(got - want).max() < 1e-4
    assert small.stats["evicted_nodes"] > 0
    assert small.stats["kv_regret_tokens"] == 0  # each anchor computed once all the same (DFS order)
    hf = hf_model(full)
    for i in (0, 5):
        for j in (0, 4, len(PARTNERS) - 1):
            assert abs(got[i, j] - hf_margin(hf, full, full.render_join(anchors[i], PARTNERS[j], JOIN_Q))) < 1e-4
    # filter and chain under the same pressure: same margins
    docs = _anchors(12, 60, seed=1)
    qs = ["Is it about a drug?", "Is it severe?"]
    assert np.abs(small.filter(docs, qs) - full.filter(docs, qs)).max() < 1e-4
    c_small, c_full = small.chain(docs, qs, short_circuit=False), full.chain(docs, qs, short_circuit=False)
    assert np.abs(c_small - c_full).max() < 1e-4


def test_pairs_match_join_and_compute_each_anchor_once(engines):
    full, _ = engines
    anchors = _anchors(3, 40, seed=2)
    grid = full.join(anchors, PARTNERS, JOIN_Q)
    a_idx = [0, 2, 0, 1, 2, 0, 1, 1]
    p_idx = [0, 3, 5, 12, 0, 12, 1, 1]
    full.tree.trim(keep_free=1.0)
    full.reset_stats()
    got = full.pairs([anchors[i] for i in a_idx], [PARTNERS[j] for j in p_idx], JOIN_Q)
    assert np.abs(got - grid[a_idx, p_idx]).max() < 1e-5
    assert full.stats["kv_regret_tokens"] == 0
    head_anchor = sum(len(full.render_join(a, "", JOIN_Q)) - len(full.renderer.post) for a in anchors)
    assert full.stats["fresh_tokens"] < head_anchor + 8 * 8  # each anchor's prefix once, then ~8 per pair
    with pytest.raises(ValueError, match="as many partners as anchors"):
        full.pairs(anchors, PARTNERS, JOIN_Q)


def test_two_threads_on_one_engine_get_the_margins_of_sequential_calls():
    eng = Engine(EngineConfig(model=MODEL, token_budget=256))
    docs = _anchors(20, 30, seed=3)
    anchors = _anchors(3, 50, seed=4)
    want_f = eng.filter(docs, ["Is it severe?"])
    want_j = eng.join(anchors, PARTNERS, JOIN_Q)
    got, errors = {}, []

    def work(name, fn):
        try:
            for k in range(3):
                got[(name, k)] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=("f", lambda: eng.filter(docs, ["Is it severe?"]))),
               threading.Thread(target=work, args=("j", lambda: eng.join(anchors, PARTNERS, JOIN_Q)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(3):
        assert np.abs(got[("f", k)] - want_f).max() < 1e-5
        assert np.abs(got[("j", k)] - want_j).max() < 1e-5
