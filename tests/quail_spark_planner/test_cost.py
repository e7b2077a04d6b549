"""Speed-of-light cost model against hand-computed numbers."""

import pytest

from quail_spark import cost as C

TOY = C.ModelShape("toy", n_layers=2, hidden=8, n_q_heads=2, n_kv_heads=1, head_dim=4, ffn=16, vocab=100)
TOY_MODEL = C.CostModel(TOY, rate=1e6, prompt=C.PromptShape(header=3, separator=1, doc2_label=2, cue=2,
                                                             answer_ids=2))


def test_linear_parameters_from_the_shape():
    # per layer: q,o 2*576*576; k,v 2*576*192; MLP 3*576*1536
    assert C.MODELS["smollm2-135m"].n_lin == 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536)
    assert C.MODELS["smollm2-135m"].n_lin == 106_168_320
    assert C.MODELS["qwen3-4b"].n_lin == 3_633_315_840  # docs/architecture.md: 3.633e9
    assert TOY.n_lin == 2 * (2 * 8 * 8 + 2 * 8 * 4 + 3 * 8 * 16) == 1152


def test_qwen3_4b_h200_300_token_prompts_run_at_107k_tokens_per_second():
    m = C.cost_model("qwen3-4b", "h200")
    c = C.prompts_cost(m, 1000, 0, 300)
    assert c.tokens == c.fresh == 300_000
    assert c.tokens / c.seconds == pytest.approx(107e3, rel=0.02)
    # the same through the filter layout: a 300-token prompt of header, doc, question, cue
    p = m.prompt
    f = C.filter_cost(m, 1000, 300 - p.header - p.separator - p.cue - 10, 10)
    assert f.tokens == 300_000 and f.seconds == pytest.approx(c.seconds)


def test_prompts_cost_by_hand():
    # 3 prompts, 10 cached + 4 fresh tokens each, 2 answer rows
    # attended pairs per prompt: 4*10 + 4*5/2 = 50
    # FLOPs per prompt: 2*1152*4 + 4*2*2*4*50 + 2*8*2 = 9216 + 3200 + 32 = 12448
    c = C.prompts_cost(TOY_MODEL, 3, 10, 4)
    assert (c.tokens, c.fresh, c.flops) == (42, 12, 3 * 12448)
    assert c.seconds == pytest.approx(3 * 12448 / 1e6)


def test_filter_with_cached_document_computes_only_the_question():
    # layout: header 3 + doc 20 | separator 1 + question 5 + cue 2
    full = C.filter_cost(TOY_MODEL, 10, 20, 5)
    cached = C.filter_cost(TOY_MODEL, 10, 20, 5, doc_cached=True)
    assert full.tokens == cached.tokens == 10 * 31
    assert full.fresh == 310 and cached.fresh == 10 * 8
    assert cached.flops == C.prompts_cost(TOY_MODEL, 10, 23, 8).flops


def test_filter_with_repeated_documents_computes_each_once():
    c = C.filter_cost(TOY_MODEL, 10, 20, 5, distinct=2)
    docs = C.prompts_cost(TOY_MODEL, 2, 0, 23, head=0)
    asks = C.prompts_cost(TOY_MODEL, 10, 23, 8)
    assert c.fresh == docs.fresh + asks.fresh == 46 + 80
    assert c.flops == docs.flops + asks.flops


def test_join_cost_by_hand():
    # anchor prefix: header 3 + anchor 50 + separator 1 + question 6 = 60 tokens, once per anchor
    # per pair: label 2 + partner 4 + cue 2 = 8 fresh tokens after the 60 cached
    c = C.join_cost(TOY_MODEL, anchors=5, anchor_tokens=50, pairs=100, partner_tokens=4, question_tokens=6)
    once = C.prompts_cost(TOY_MODEL, 5, 0, 60, head=0)
    pairs = C.prompts_cost(TOY_MODEL, 100, 60, 8)
    assert c.tokens == 100 * 68
    assert c.fresh == 5 * 60 + 100 * 8
    assert c.flops == once.flops + pairs.flops
    # the long side as anchor is far cheaper than the short one
    flipped = C.join_cost(TOY_MODEL, anchors=20, anchor_tokens=4, pairs=100, partner_tokens=50,
                          question_tokens=6)
    assert c.seconds < flipped.seconds / 3


def test_rank_orders_a_chain_by_cost_over_one_minus_selectivity():
    m = C.cost_model("qwen3-4b", "h200")
    # equal questions: the more selective (lower kept fraction) first; ties keep written order
    assert [i for _, i in C.order_chain(m, [("Is it x?", 0.9), ("Is it y?", 0.5), ("Is it z?", 0.1)], 300)] == [2, 1, 0]
    assert [i for _, i in C.order_chain(m, [("Is it x?", None), ("Is it y?", None)], 300)] == [0, 1]
    # a long question with the same selectivity runs after a short one
    long_q = "Does the document describe, in any way at all and with any wording, a defect?"
    assert [i for _, i in C.order_chain(m, [(long_q, 0.5), ("Is it rude?", 0.5)], 300)] == [1, 0]
    r = C.rank(m, 300, 5, 0.75)
    assert r == pytest.approx(C.filter_cost(m, 1, 300, 5).seconds / 0.25)


def test_chain_cost_short_circuits_and_keeps_the_document():
    cost, evaluated = C.chain_cost(TOY_MODEL, 100, 20, [("q one", 0.1), ("q two", 0.5)])
    assert evaluated == [100, 10]
    first = C.filter_cost(TOY_MODEL, 100, 20, TOY_MODEL.text_tokens("q one"))
    second = C.filter_cost(TOY_MODEL, 10, 20, TOY_MODEL.text_tokens("q two"), doc_cached=True)
    assert cost.seconds == pytest.approx(first.seconds + second.seconds)


def test_anchor_costs_prefer_the_long_side():
    costs = C.anchor_costs(TOY_MODEL, left_rows=5, right_rows=20, left_tokens=50, right_tokens=4,
                           question_tokens=6)
    assert costs["left"].seconds < costs["right"].seconds / 3


def test_cost_model_for_engine_models():
    assert C.cost_model_for("smollm2-135m", "cpu").rate == C.RATES["cpu"]
    assert C.cost_model_for("qwen3-4b-random", "cuda").rate == C.RATES["h200"]
    assert C.cost_model_for("tiny-llama-random", "cpu").shape.name == "tiny-llama-random"


def test_cost_model_presets():
    assert C.cost_model("qwen3-4b-random", "cuda").rate == 789e12
    assert C.cost_model().shape.name == "smollm2-135m" and C.cost_model().rate == 1e11
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        C.cost_model("gpt")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        C.cost_model("qwen3-4b", "tpu")
