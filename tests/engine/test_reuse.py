"""Reuse, counted by eng.stats: chains, joins, small pools and agent-trace rows."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig

DOCS = ["The refund never arrived and support ignored my emails for weeks.",
        "We walked along the river and watched the boats go by.",
        "The delivery was late, the box was crushed and the charger missing.",
        "Our team shipped the release on time with every test green."]
CHAIN = ["Is the document a complaint?", "Does the document mention a delivery?", "Is the document about money?"]


def distinct_prefix_tokens(prompts: list[list[int]]) -> int:
    """Tokens of the trie of all prompts: the least a perfect cache computes."""
    seen = set()
    for p in prompts:
        for k in range(1, len(p) + 1):
            seen.add(tuple(p[:k]))
    return len(seen)


@pytest.fixture()
def eng(smol_engine):
    smol_engine.tree.trim(keep_free=1.0)  # start cold: nothing resident
    smol_engine.reset_stats()
    return smol_engine


def test_chain_computes_each_document_once(eng):
    m = eng.chain(DOCS, CHAIN, short_circuit=False)
    prompts = [eng.render_filter(d, q) for d in DOCS for q in CHAIN]
    st = eng.stats
    assert st["kv_regret_tokens"] == 0
    assert st["fresh_tokens"] == distinct_prefix_tokens(prompts)
    doc_tokens = sum(len(eng.render_filter(d, CHAIN[0])) for d in DOCS)
    assert st["fresh_tokens"] < 0.6 * st["requested_tokens"]
    assert st["fresh_tokens"] < doc_tokens + sum(len(eng.renderer.filter_parts(q)[1]) for q in CHAIN) * len(DOCS)
    assert not np.isnan(m).any()


def test_chain_short_circuits_false_documents(eng):
    m = eng.chain(DOCS, CHAIN)
    for row in m:
        first_false = next((k for k, v in enumerate(row) if v <= 0), None)
        if first_false is not None:
            assert np.isnan(row[first_false + 1:]).all()
            assert not np.isnan(row[: first_false + 1]).any()
    stages = eng.stats["stages"]
    assert [s["evaluated"] for s in stages][0] == len(DOCS)
    for a, b in zip(stages, stages[1:]):
        assert b["evaluated"] == a["passed"]


def test_join_computes_each_anchor_once(eng):
    anchors = ["Report: the patient developed a rash and itching two days after starting aspirin.",
               "Report: nausea and dizziness followed the first dose of the new antibiotic."]
    partners = ["rash", "nausea", "fever", "itching", "dizziness", "cough"]
    q = "Does DOCUMENT 1 mention DOCUMENT 2?"
    eng.join(anchors, partners, q)
    st = eng.stats
    head, mid, post = eng.renderer.join_parts(q)
    a_tok = sum(len(head) + len(t) for t in eng.renderer.encode_batch(anchors))
    p_tok = [len(t) for t in eng.renderer.encode_batch(partners)]
    pairs = len(anchors) * len(partners)
    # the bound: anchors once, then partner + question tokens per pair
    assert st["fresh_tokens"] <= a_tok + pairs * (max(p_tok) + len(mid) + len(post))
    # question before partner: per pair only partner + chat tail are fresh
    assert st["fresh_tokens"] <= a_tok + len(anchors) * len(mid) + len(anchors) * sum(p_tok) + pairs * len(post)
    assert st["kv_regret_tokens"] == 0
    assert st["fresh_tokens"] * 3 < st["requested_tokens"]


def test_small_pool_gives_same_results_and_reports_regret(smol_engine):
    big = smol_engine.chain(DOCS, CHAIN, short_circuit=False)
    small = Engine(EngineConfig(model="smollm2-135m", kv_pool_tokens=32, token_budget=64))
    got = small.chain(DOCS, CHAIN, short_circuit=False)
    assert np.allclose(got, big, atol=1e-4)
    assert small.stats["kv_regret_tokens"] > 0


def test_agent_trace_rows_reuse_earlier_rows(eng):
    steps = ["User asked for the weather.", " Tool call: weather(city='Oslo').", " Result: 4C, rain.",
             " Assistant: It is 4C and raining in Oslo.", " User asked for tomorrow.",
             " Tool call: forecast(city='Oslo', days=1).", " Result: 6C, cloudy.", " Assistant: Tomorrow 6C."]
    rows = ["".join(steps[: k + 1]) for k in range(len(steps))]
    q = "Did the assistant answer the user's last question?"
    eng.filter(rows, [q])
    prompts = [eng.render_filter(r, q) for r in rows]
    assert eng.stats["fresh_tokens"] <= 1.1 * distinct_prefix_tokens(prompts)
    assert eng.stats["fresh_tokens"] < 0.5 * eng.stats["requested_tokens"]


def test_agent_trace_rows_reuse_across_calls(eng):
    rows = ["Step one: open the file.", "Step one: open the file. Step two: read the header.",
            "Step one: open the file. Step two: read the header. Step three: parse every line."]
    q = "Is the document about files?"
    eng.filter(rows[:2], [q])
    first = eng.stats["fresh_tokens"]
    eng.filter(rows[2:], [q])
    second = eng.stats["fresh_tokens"] - first
    assert second < len(eng.render_filter(rows[2], q)) // 2


SKIN = ["skin rash", "skin pain", "skin itching and swelling", "joint pain", "joint swelling", "headache"]


@pytest.mark.parametrize("budget", [4096, 96])
def test_a_join_shares_passes_with_the_contexts_it_reads(budget):
    """An anchor and its partners, and partners under their shared first word, run in the same pass
    (every layer stores the pass's K/V before attention reads a context): with a budget that holds
    the whole join, one pass; margins equal those of the same prompts computed one by one."""
    anchors = ["Report: the patient developed a skin rash and joint pain after the second dose.",
               "Report: a headache and joint swelling followed the first injection."]
    q = "Does DOCUMENT 1 mention DOCUMENT 2?"
    eng = Engine(EngineConfig(model="tiny-qwen3-random", token_budget=budget, seed=3))
    got = eng.join(anchors, SKIN, q)
    alone = Engine(EngineConfig(model="tiny-qwen3-random", prefix_cache=False, token_budget=4096, seed=3))
    want = np.array([[alone.pairs([a], [p], q)[0] for p in SKIN] for a in anchors])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    assert eng.stats["kv_regret_tokens"] == 0
    head, mid, post = eng.renderer.join_parts(q)
    fresh = eng.stats["fresh_tokens"]
    if budget == 4096:
        assert eng.stats["forward_passes"] == 1  # before: anchors, then first words, then the rest
    else:  # every pass but the last is full: nothing waits for a context computed in the same pass
        assert eng.stats["forward_passes"] == -(-fresh // budget)
