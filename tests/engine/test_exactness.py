"""Engine margins equal transformers' own forward pass on the same token ids.

Float32 on CPU: the only differences are summation order (packing, split
attention, fused projections), far below the 1e-3 bound.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig
from gpu_worker.reference import hf_margin, hf_margins, hf_model, last_logits

DOCS = [
    "The refund never arrived and support ignored me.", "A quiet walk in the park.",
    "Stocks fell 3% after the earnings call.", "Fine.", "My cat sleeps on the keyboard.",
    "The pasta was cold and overpriced.", "Rain is expected tomorrow.", "I love this phone!",
    "The train was late again.", "Aspirin caused a mild rash.", "Python 3.13 was released.",
    "The hotel room smelled of smoke.", "Great service, fast delivery.", "Goal in the last minute!",
    "The bill doubled without notice.", "Fresh apples at the market.", "He fixed the bug quickly.",
    "Terrible noise from upstairs.", "A new vaccine trial began.", "The movie was boring.",
]
QUESTIONS = ["Is the document a complaint?", "Is the document about money?",
             "Is the document positive?", "Does the document mention an animal?"]
CHAIN = ["Is the document written in English?", "Is the document a complaint?", "Is the document short?"]
ANCHORS = ["Patient report: rash and itching after taking aspirin for a headache.",
           "Patient report: nausea after the new antibiotic.", "Patient report: no side effects.",
           "Patient report: dizziness and a headache.", "Patient report: swelling of the face.",
           "Patient report: fever after vaccination."]
PARTNERS = ["rash", "headache", "nausea", "fever", "dizziness", "swelling", "aspirin", "cough", "itching", "pain"]
JOIN_Q = "Does DOCUMENT 1 mention DOCUMENT 2?"

MODELS = ["smollm2-135m", "tiny-llama-random", "tiny-qwen3-random"]


@pytest.fixture(scope="module", params=MODELS)
def pair(request, smol_engine):
    eng = smol_engine if request.param == "smollm2-135m" else Engine(EngineConfig(model=request.param, token_budget=256))
    return eng, hf_model(eng)


def test_margins_match_transformers_on_mixed_prompts(pair):
    eng, hf = pair
    # the random models on 200 prompts; SmolLM2 (30x the compute a token) on half of them
    docs, anchors = (DOCS[:10], ANCHORS[:3]) if eng.model_config.num_layers > 8 else (DOCS, ANCHORS)
    f = eng.filter(docs, QUESTIONS)  # 80 prompts (40)
    c = eng.chain(docs, CHAIN, short_circuit=False)  # 60 prompts (30)
    jn = eng.join(anchors, PARTNERS, JOIN_Q)  # 60 prompts (30)
    got = np.concatenate([f.ravel(), c.ravel(), jn.ravel()])
    prompts = ([eng.render_filter(d, q) for d in docs for q in QUESTIONS]
               + [eng.render_filter(d, q) for d in docs for q in CHAIN]
               + [eng.render_join(a, p, JOIN_Q) for a in anchors for p in PARTNERS])
    want = np.array(hf_margins(hf, eng, prompts))  # transformers, one prompt per row of a padded batch
    assert len(got) >= 100 and not np.isnan(got).any()
    assert np.abs(got - want).max() <= 1e-3, np.abs(got - want).max()
    # the check is not vacuous: margins differ between prompts
    assert want.std() > 0.05


def test_classify_matches_transformers(pair):
    eng, hf = pair
    labels = ["complaint", "praise", "news"]
    idx, probs = eng.classify(DOCS[:6], labels, "What kind of text is the document?")
    import torch

    a = eng.renderer.answers
    for i, d in enumerate(DOCS[:6]):
        lg = last_logits(hf, eng.render_classify(d, labels, "What kind of text is the document?"))
        per = torch.stack([torch.logsumexp(lg[a.letter_ids[k]], 0) for k in range(3)])
        ref = torch.softmax(per, 0).numpy()
        assert np.abs(probs[i] - ref).max() < 1e-4
        assert idx[i] == ref.argmax()


def test_answer_ids_are_single_yes_no_tokens(smol_engine):
    t, f = smol_engine.answer_token_ids
    tok = smol_engine.tokenizer
    assert {tok.decode([i]).strip().lower() for i in t} <= {"yes", "true"}
    assert {tok.decode([i]).strip().lower() for i in f} <= {"no", "false"}
    assert not set(t) & set(f)


@pytest.mark.parametrize("model", MODELS)
def test_long_documents_after_a_cached_frame_match_transformers(model, smol_engine):
    """Documents of 400-800 tokens after the chat frame already in the cache: their rows attend to
    the frame and themselves in one call (gpu_worker.attention.attend_prefixed, square causal from
    PREFIXED_CAUSAL_FROM rows), packed two to a pass."""
    eng = smol_engine if model == "smollm2-135m" else Engine(EngineConfig(model=model))
    hf = hf_model(eng)
    eng.filter(["A warm-up document."], ["Is the document short?"])  # the frame is cached from here on
    words = " ".join(DOCS).split()
    docs = [" ".join(words[: 2 * n] * 4)[: 6 * n] for n in (330, 520)]
    lens = [len(eng.render_filter(d, QUESTIONS[0])) for d in docs]
    assert min(lens) > 450 and max(lens) < 2048, lens
    f = eng.filter(docs, QUESTIONS[:2])
    want = np.array([[hf_margin(hf, eng, eng.render_filter(d, q)) for q in QUESTIONS[:2]] for d in docs])
    assert np.abs(f - want).max() <= 1e-3, np.abs(f - want).max()
