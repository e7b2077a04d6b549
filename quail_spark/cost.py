"""Speed-of-light cost model: FLOPs and seconds of prompts, AI filter ranks, join anchors.

For a dense decoder with N_lin linear (non-embedding) parameters, L layers and
n_q query heads of size d (docs/architecture.md, "Speed of light"):

    FLOPs = 2 * N_lin * fresh_tokens + 4 * L * n_q * d * attended_pairs
            + 2 * d_model * |answer ids| per prompt        (restricted head)
    SoL seconds = FLOPs / dense matmul rate

``attended_pairs`` counts, per fresh token, the keys it attends to: a cached
prefix of P tokens and F fresh tokens give F * P + F * (F + 1) / 2.

Prompt layouts priced here (token counts of the fixed parts are
:class:`PromptShape` estimates for a chat template):

- filter / score / classify: header, document, separator, question, answer cue.
  The document is fresh for the first AI operator on a row; an operator whose
  document is already cached (retained in its chain) computes only separator,
  question and cue.
- join: header, anchor, separator, question, ``DOCUMENT 2:`` label, partner, cue.
  Everything up to the question is computed once per anchor; per pair only the
  label, the partner and the cue are fresh.

:func:`rank` and :func:`order_chain` order the AI conjuncts over one document
(Hellerstein: ascending cost / (1 - selectivity)); :func:`anchor_costs` prices
an AI join with either side as the anchor. ``explain`` uses them with row
counts from Spark's plan statistics.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

DEFAULT_AI_SELECTIVITY = 0.5


@dataclass(frozen=True)
class ModelShape:
    """Shape of a dense decoder with grouped-query attention and a gated MLP."""

    name: str
    n_layers: int
    hidden: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int

    @property
    def n_lin(self) -> int:
        """Linear parameters outside embeddings and LM head: q, k, v, o and gate/up/down."""
        q_o = 2 * self.hidden * self.n_q_heads * self.head_dim
        k_v = 2 * self.hidden * self.n_kv_heads * self.head_dim
        return self.n_layers * (q_o + k_v + 3 * self.hidden * self.ffn)


MODELS = {
    "smollm2-135m": ModelShape("smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152),
    "qwen3-4b": ModelShape("qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936),
}
# Dense matmul rates in FLOP/s. h200: bf16 measured on the lent H200. cpu: an
# estimate for a few cores of a recent x86 in fp32, not a measurement.
RATES = {"h200": 789e12, "cpu": 1e11}


@dataclass(frozen=True)
class PromptShape:
    """Token counts of the fixed parts of a prompt (estimates for a chat template)."""

    header: int = 12        # chat template start + "DOCUMENT:\n"
    separator: int = 2      # "\n\n" after a document
    doc2_label: int = 5     # "DOCUMENT 2:\n" before a join partner
    cue: int = 6            # end of the user turn + assistant header
    answer_ids: int = 2     # LM-head rows of the restricted head (TRUE and FALSE ids)
    chars_per_token: float = 4.0


@dataclass(frozen=True)
class CostModel:
    """A model shape, a matmul rate, and the prompt layout; prices prompts in SoL seconds."""

    shape: ModelShape
    rate: float
    prompt: PromptShape = PromptShape()

    def text_tokens(self, text: str) -> float:
        """Tokens of a text, estimated from its length."""
        return max(1.0, math.ceil(len(text) / self.prompt.chars_per_token))


def cost_model(model: str = "smollm2-135m", device: str = "cpu") -> CostModel:
    """A preset CostModel; ``device`` 'cpu' or 'h200' ('cuda' counts as 'h200').

    >>> round(cost_model('qwen3-4b', 'h200').shape.n_lin / 1e9, 3)
    3.633
    """
    base = model.removesuffix("-random")
    if base not in MODELS:
        raise ValueError(f"unknown model {model!r}; expected one of {sorted(MODELS)}")
    key = "h200" if device in ("gpu", "cuda") or device.startswith("cuda:") else device
    if key not in RATES:
        raise ValueError(f"unknown device {device!r}; expected 'cpu', 'cuda' or 'h200'")
    return CostModel(MODELS[base], RATES[key])


@dataclass(frozen=True)
class Cost:
    """Requested and fresh tokens, FLOPs and SoL seconds of some prompts."""

    tokens: float = 0.0
    fresh: float = 0.0
    flops: float = 0.0
    seconds: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.tokens + other.tokens, self.fresh + other.fresh,
                    self.flops + other.flops, self.seconds + other.seconds)


def prompts_cost(m: CostModel, n: float, cached: float, fresh: float, head: int | None = None) -> Cost:
    """``n`` prompts, each with ``cached`` tokens from cache and ``fresh`` computed.

    ``head`` answer rows per prompt (default ``m.prompt.answer_ids``; 0 for a
    prefix that ends before the answer position).

    >>> m = cost_model('qwen3-4b', 'h200')
    >>> round(300 / prompts_cost(m, 1, 0, 300).seconds / 1e3)  # tokens/s, nothing shared
    107
    """
    s = m.shape
    head = m.prompt.answer_ids if head is None else head
    pairs = fresh * cached + fresh * (fresh + 1) / 2
    flops = n * (2 * s.n_lin * fresh + 4 * s.n_layers * s.n_q_heads * s.head_dim * pairs
                 + 2 * s.hidden * head)
    return Cost(n * (cached + fresh), n * fresh, flops, flops / m.rate)


def filter_cost(m: CostModel, rows: float, doc_tokens: float, question_tokens: float,
                doc_cached: bool = False, answers: int | None = None,
                distinct: float | None = None) -> Cost:
    """Filter, score or classify over ``rows`` documents.

    ``doc_cached``: the documents are already in the KV cache (retained).
    ``distinct``: distinct documents among the rows when fewer than ``rows`` (rows
    after a join repeat a document; sorted by document, each is computed once).
    """
    p = m.prompt
    doc = p.header + doc_tokens
    ask = p.separator + question_tokens + p.cue
    if doc_cached:
        return prompts_cost(m, rows, doc, ask, answers)
    if distinct is not None and distinct < rows:
        docs = prompts_cost(m, distinct, 0, doc, head=0)
        asks = prompts_cost(m, rows, doc, ask, answers)
        return Cost(asks.tokens, docs.fresh + asks.fresh, docs.flops + asks.flops,
                    docs.seconds + asks.seconds)
    return prompts_cost(m, rows, 0, doc + ask, answers)


def join_cost(m: CostModel, anchors: float, anchor_tokens: float, pairs: float,
              partner_tokens: float, question_tokens: float) -> Cost:
    """AI join: anchor and question once per anchor, label + partner + cue per pair."""
    p = m.prompt
    prefix = p.header + anchor_tokens + p.separator + question_tokens
    once = prompts_cost(m, anchors, 0, prefix, head=0)
    per_pair = prompts_cost(m, pairs, prefix, p.doc2_label + partner_tokens + p.cue)
    # requested tokens count each pair's whole prompt; the anchor pass requests nothing new
    return Cost(per_pair.tokens, once.fresh + per_pair.fresh, once.flops + per_pair.flops,
                once.seconds + per_pair.seconds)


def cost_model_for(model: str, device: str) -> CostModel:
    """The cost model of an engine model and device; a model the cost model does not know is
    priced by its engine preset's shape (random shapes), else as SmolLM2.

    >>> cost_model_for('smollm2-135m', 'cpu').shape.name
    'smollm2-135m'
    """
    key = "cpu" if device == "cpu" else "cuda"
    try:
        return cost_model(model, key)
    except ValueError:
        pass
    from gpu_worker.config import RANDOM_SHAPES

    m = RANDOM_SHAPES.get(model)
    if m is None:
        return cost_model("smollm2-135m", key)
    shape = ModelShape(model, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                       m.intermediate_size, m.vocab_size)
    return CostModel(shape, RATES["cpu" if key == "cpu" else "h200"])


def rank(m: CostModel, doc_tokens: float, question_tokens: float, selectivity: float | None,
         doc_cached: bool = False) -> float:
    """Hellerstein rank of an AI filter: SoL seconds per row / (1 - selectivity).

    ``selectivity`` None is the default 0.5; ``doc_cached``: the document's KV is kept for
    the chain, so only the question is computed.
    """
    sel = DEFAULT_AI_SELECTIVITY if selectivity is None else selectivity
    seconds = filter_cost(m, 1, doc_tokens, question_tokens, doc_cached).seconds
    return seconds / max(1.0 - sel, 1e-9)


def order_chain(m: CostModel, filters, doc_tokens: float) -> list:
    """[(rank, index)] of ``filters`` = [(question text, selectivity or None)] over one document,
    in ascending rank; ties keep the written order. With several filters the document is
    computed once and kept, so each is priced at its question.

    >>> m = cost_model('qwen3-4b', 'h200')
    >>> [i for _, i in order_chain(m, [('Is it long?', 0.9), ('Is it rude?', 0.1)], 300)]
    [1, 0]
    """
    shared = len(filters) > 1
    ranks = [rank(m, doc_tokens, m.text_tokens(q), s, shared) for q, s in filters]
    return sorted(zip(ranks, range(len(filters))))


def chain_cost(m: CostModel, rows: float, doc_tokens: float, ordered) -> tuple:
    """(Cost, rows evaluated per filter) of an AND chain ``ordered`` = [(question, selectivity)]
    in evaluation order over ``rows`` rows: a FALSE short-circuits the rest, the document's KV is
    computed by the first filter and kept for the others."""
    total, evaluated, alive = Cost(), [], rows
    for i, (q, s) in enumerate(ordered):
        total += filter_cost(m, alive, doc_tokens, m.text_tokens(q), doc_cached=i > 0)
        evaluated.append(alive)
        alive *= DEFAULT_AI_SELECTIVITY if s is None else s
    return total, evaluated


def anchor_costs(m: CostModel, left_rows: float, right_rows: float, left_tokens: float,
                 right_tokens: float, question_tokens: float) -> dict:
    """{'left': Cost, 'right': Cost} of an AI join over all pairs with that side as the anchor."""
    pairs = left_rows * right_rows
    return {"left": join_cost(m, left_rows, left_tokens, pairs, right_tokens, question_tokens),
            "right": join_cost(m, right_rows, right_tokens, pairs, left_tokens, question_tokens)}
