"""Decoding equals transformers: generate token for token against `generate(do_sample=False)`, extract
against transformers driven by the same grammar's masks; the same answers for every batch composition
and pool size (a pool smaller than the work preempts); a document shared by a row's calls computed once."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from gpu_worker import Engine, EngineConfig
from gpu_worker.grammar import answer, describe
from gpu_worker.reference import hf_model, last_logits

WORDS = ("apple river stock refund train cat rash vaccine hotel pasta goal phone bill rain market bug noise "
         "movie patient fever doctor invoice storm bridge garden").split()
PROMPTS = ["Summarize the document.", "What is the main topic?", "Write a title."]
FIELDS = {"name": "string", "age": "integer", "score": "double", "ok": "boolean", "when": "date",
          "tags": {"type": "array", "elementType": "string", "containsNull": True},
          "who": {"type": "struct", "fields": [{"name": "first", "type": "string", "nullable": True, "metadata": {}},
                                               {"name": "n", "type": "short", "nullable": False, "metadata": {}}]}}


MAX = 8  # tokens per answer in the 60-prompt test


def _docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([2, 5, 12, 30, 60]))) for _ in range(n)]


@pytest.fixture(scope="module")
def qwen():
    """A tiny random Qwen3 (untied head: varied greedy tokens) with a pool far smaller than the work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small ops: one thread is faster on a shared machine
    eng = Engine(EngineConfig(model="tiny-qwen3-random", token_budget=256, kv_pool_tokens=192))
    yield eng, hf_model(eng)
    torch.set_num_threads(threads)


def _hf_generate(hf, eng, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """transformers' greedy answers of prompts given as ids (one left-padded batch), end token left out."""
    stops = eng.renderer.stop_ids()
    width = max(map(len, prompts))
    ids = torch.tensor([[stops[0]] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=max_tokens,
                          eos_token_id=stops, pad_token_id=stops[0])[:, width:].tolist()
    return [o[:next((i for i, t in enumerate(o) if t in stops), len(o))] for o in out]


def test_generate_equals_transformers_in_every_batch_composition(qwen):
    eng, hf = qwen
    docs = _docs(20)
    rows = [(d, p) for d in docs for p in PROMPTS]  # 60 prompts of 20-90 tokens
    want = _hf_generate(hf, eng, [eng.render_generate(d, p) for d, p in rows], MAX)
    eng.reset_stats()
    got = eng.generate_ids([d for d, _ in rows], [p for _, p in rows], max_tokens=MAX)
    assert got == want
    assert eng.stats["preemptions"] > 0  # 192 slots (prompts up to 105 tokens) hold a few of the 60 sequences at once
    assert eng.stats["output_tokens"] == sum(map(len, want))
    order = list(range(len(rows)))
    random.Random(1).shuffle(order)
    shuffled = eng.generate_ids([rows[i][0] for i in order], [rows[i][1] for i in order], max_tokens=MAX)
    assert [shuffled[order.index(i)] for i in range(len(rows))] == want
    for i in order[:8]:  # one by one, the cache warm from the calls before
        assert eng.generate_ids([rows[i][0]], rows[i][1], max_tokens=MAX) == [want[i]]
    others = _docs(7, seed=5)  # among other rows, NULL ones included
    mixed = eng.generate_ids(others[:3] + [None, rows[4][0], ""] + others[3:] + [rows[49][0]], PROMPTS[1],
                             max_tokens=MAX)
    assert mixed[3] is None and mixed[5] is None
    assert mixed[4] == want[4] and mixed[-1] == want[49]


def test_generate_text_stops_at_stop_strings_and_max_tokens(qwen):
    eng, hf = qwen
    doc = _docs(1, seed=9)[0]
    nodes = eng.tree.nodes()
    ids = eng.generate_ids([doc], PROMPTS[0], max_tokens=12)[0]
    assert len(ids) == 12  # the random model never picks an end token here: cut by max_tokens
    assert eng.tree.nodes() <= max(nodes, 1) + 3  # (the root) document, prompt, answer: the answer grows in one node
    full = eng.generate([doc], PROMPTS[0], max_tokens=12)[0]
    assert full == eng.tokenizer.decode(ids, skip_special_tokens=True)
    stop = full[len(full) // 2: len(full) // 2 + 2]
    assert stop and stop in full
    cut = eng.generate([doc], PROMPTS[0], max_tokens=12, stop=[stop])[0]
    assert cut == full[:full.find(stop)]
    short = eng.generate_ids([doc], PROMPTS[0], max_tokens=12, stop=[stop])[0]
    assert short == ids[:len(short)] and len(short) < 12  # decoding stopped once the stop string appeared


def test_generate_over_partners_and_without_prefix_caching(qwen):
    eng, hf = qwen
    docs, partners = _docs(4, seed=7), _docs(4, seed=8)
    rows = [(docs[i % 2], partners[i]) for i in range(4)]  # each document under two partners
    want = _hf_generate(hf, eng, [eng.render_generate(d, PROMPTS[2], p) for d, p in rows], MAX)
    got = eng.generate_ids([d for d, _ in rows], PROMPTS[2], partners=[p for _, p in rows], max_tokens=MAX)
    assert got == want
    assert eng.generate_ids([docs[0], docs[0]], PROMPTS[2], partners=[None, partners[0]], max_tokens=MAX) == [None, want[0]]
    solo = Engine(EngineConfig(model="tiny-qwen3-random", token_budget=256, kv_pool_tokens=160, prefix_cache=False))
    assert solo.generate_ids([d for d, _ in rows], PROMPTS[2], partners=[p for _, p in rows], max_tokens=MAX) == want
    assert solo.pool.num_free == solo.pool.num_pages  # nothing kept


def test_generate_stops_at_the_end_of_turn_like_transformers(smol_engine):
    hf = hf_model(smol_engine)
    docs = ["The sky is blue.", "Paris is the capital of France.", "Two plus two is four."]
    prompt = "Answer in one word: what is this about?"
    got = smol_engine.generate_ids(docs, prompt, max_tokens=16)
    want = _hf_generate(hf, smol_engine, [smol_engine.render_generate(d, prompt) for d in docs], 16)
    assert got == want
    assert any(len(g) < 16 for g in got)  # ended by the end-of-turn token, which is left out
    longer = smol_engine.generate_ids(docs[:1], prompt, max_tokens=len(got[0]) + 3, ignore_eos=True)[0]
    assert longer[:len(got[0])] == got[0] and len(longer) == len(got[0]) + 3


def _hf_extract(hf, eng, doc: str, name: str, t, max_tokens: int):
    """transformers' forward, the grammar's mask, argmax: the reference loop of one field."""
    head, tail = eng.renderer.extract_parts(name, describe(t))
    ids = head + eng.doc_ids(doc) + tail
    m, out = eng.grammars.matcher(t), []
    for _ in range(max_tokens):
        lg = last_logits(hf, ids + out).numpy()
        lg[~eng.grammars.allowed(m)] = -np.inf
        tok = int(np.argmax(lg))
        if tok == eng.grammars.eos and m.is_accepting():
            return out, False
        assert m.consume_token(tok)
        out.append(tok)
        if m.is_stopped():
            return out, False
    return out, True


def test_extract_equals_transformers_under_the_same_grammar(qwen):
    eng, hf = qwen
    docs = _docs(3, seed=3) + [None]
    got = eng.extract(docs, FIELDS, max_tokens=14)
    assert got[3] is None
    finished = 0
    for d, ext in zip(docs[:3], got):
        assert list(ext.values) == list(FIELDS)
        for name, t in FIELDS.items():
            out, cut = _hf_extract(hf, eng, d, name, t, 14)
            assert (name in ext.cut) == cut, (name, out)
            if not cut:
                assert ext.values[name] == answer(t, eng.grammars.text(out))
                finished += 1
        json.loads(ext.to_json())
    assert finished >= 6  # most answers finish within 14 tokens and parse


def test_a_document_shared_by_a_rows_calls_is_computed_once():
    eng = Engine(EngineConfig(model="tiny-llama-random", token_budget=256))
    doc = " ".join(_docs(4, seed=11))
    n_doc = len(eng.renderer.generate_parts("x")[0]) + len(eng.doc_ids(doc))
    eng.reset_stats()
    ext = eng.extract([doc], dict(list(FIELDS.items())[:4]), max_tokens=6)[0]
    gen = eng.generate_ids([doc], PROMPTS[0], max_tokens=6)[0]
    eng.filter([doc], ["Is it about money?", "Is it long?"])
    st = eng.stats
    tails = sum(len(eng.renderer.extract_parts(n, describe(t))[1]) for n, t in list(FIELDS.items())[:4])
    tails += len(eng.renderer.generate_parts(PROMPTS[0])[1])
    tails += sum(len(eng.renderer.filter_parts(q)[1]) for q in ["Is it about money?", "Is it long?"])
    outputs = st["output_tokens"]
    assert n_doc > 120 and outputs >= len(gen)
    print("sharing:", n_doc, tails, outputs, {k: st[k] for k in ("fresh_tokens", "requested_tokens", "reused_tokens")})
    assert st["fresh_tokens"] <= n_doc + tails + outputs + 7  # + a last token computed again per call's request
    assert st["requested_tokens"] >= 7 * n_doc
    assert st["kv_regret_tokens"] == 0
    assert ext is not None


def test_check_fields_needs_no_torch_and_names_the_field():
    code = ("import sys; from gpu_worker.grammar import check_fields; check_fields({'a': 'string', 'b': "
            "{'type': 'array', 'elementType': 'date', 'containsNull': True}});"
            "assert 'torch' not in sys.modules and 'llguidance' not in sys.modules\n"
            "try:\n  check_fields({'a': 'string', 'm': {'type': 'map', 'keyType': 'string', 'valueType': 'long'}})\n"
            "except ValueError as e:\n  assert \"field 'm'\" in str(e), e\nelse:\n  raise SystemExit('no error')")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_sequences_flat_context_follows_its_kv_through_growth_and_preemption(qwen):
    """Each decode step reads a running sequence's context from the slots it keeps (one appended a step):
    they equal the slots of the tree's path down to its node before every step, preempted or not."""
    eng, _ = qwen
    dec, step = eng.decoder, eng.decoder._step
    checked = []

    def checking(running, waiting):
        for s in running:
            want = [x for n in s.node.path() for x in n.slots]
            assert s.ctx[:s.n_ctx].tolist() == want, f"{s.label}: flat context differs from the tree's path"
            checked.append(s.n_ctx)
        return step(running, waiting)
    dec._step = checking
    try:
        eng.reset_stats()
        rows = [(d, p) for d in _docs(20) for p in PROMPTS]  # as above: the pool preempts
        eng.generate_ids([d for d, _ in rows], [p for _, p in rows], max_tokens=MAX, ignore_eos=True)
    finally:
        del dec._step
    assert eng.stats["preemptions"] > 0 and len(checked) > 60 * 4


def test_packed_masks_computed_together_equal_one_at_a_time(qwen):
    """The step's grammar masks: llguidance fills many at once on its threads; each row equals the mask of
    its matcher alone, unpacks the same on the host and in torch, and `only_end` holds where the end is
    the one token allowed."""
    from gpu_worker.decode import Decoder

    eng, _ = qwen
    g = eng.grammars
    ms = [g.matcher(t) for t in FIELDS.values()]
    tok = eng.tokenizer.encode("12", add_special_tokens=False)
    for t in tok:  # an integer part way: more than one token allowed, the end among them
        assert ms[1].consume_token(t)
    together = g.packed(ms)
    assert together.shape == (len(ms), g.words)
    for m, row in zip(ms, together):
        np.testing.assert_array_equal(g.packed([m])[0], row)
    host = g.unpack(together)
    np.testing.assert_array_equal(Decoder._unpack(torch.from_numpy(together), g.vocab_size).numpy(), host)
    for row, allowed in zip(together, host):
        assert g.only_end(row) == (bool(allowed[g.eos]) and int(allowed.sum()) == 1)
    assert host[1, g.eos] and host[1].sum() > 1 and not g.only_end(together[1])
    done = g.matcher("boolean")
    for t in eng.tokenizer.encode("true", add_special_tokens=False):
        assert done.consume_token(t)
    assert g.only_end(g.packed([done])[0])
