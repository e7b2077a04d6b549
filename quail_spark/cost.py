"""Speed-of-light cost model, and per-node estimates of rows, tokens and seconds.

For a dense decoder with N_lin linear (non-embedding) parameters, L layers and
n_q query heads of size d (DESIGN.md, "Speed of light"):

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

:func:`annotate` fills ``est`` on every node of a plan bottom-up; rules use
:func:`estimate_node` to price candidate nodes whose children are annotated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from quail_spark import plan as P

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


# ------------------------------------------------------------------ plan estimates


@dataclass(frozen=True)
class Context:
    """What rules need besides the plan: the catalog and the cost model."""

    catalog: object
    model: CostModel


RELATIONAL_SELECTIVITY = {"=": 0.1, "<>": 0.9, "<": 1 / 3, ">": 1 / 3, "<=": 1 / 3, ">=": 1 / 3}


def predicate_selectivity(expr, base_rows=None) -> float:
    """System R style default selectivity of a relational predicate.

    An equality of two columns is a key join: its selectivity is 1 / rows of the
    smaller table (``base_rows(alias)``, the table's rows before any filter), the
    key side; so a filter on the key side carries through the join.
    """
    if expr is None:
        return 1.0
    if isinstance(expr, P.And):
        return math.prod(predicate_selectivity(t, base_rows) for t in expr.terms)
    if isinstance(expr, P.Comparison):
        if expr.op == "=" and all(isinstance(x, P.ColumnRef) for x in (expr.left, expr.right)):
            if base_rows is None:
                return RELATIONAL_SELECTIVITY["="]
            keys = min(base_rows(expr.left.qualifier), base_rows(expr.right.qualifier))
            return 1.0 / max(1.0, keys)
        return RELATIONAL_SELECTIVITY[expr.op]
    neg = getattr(expr, "negated", False)
    if isinstance(expr, P.InList):
        s = min(1.0, 0.1 * len(expr.values))
    elif isinstance(expr, P.Like):
        s = 0.25
    elif isinstance(expr, P.IsNull):
        s = 0.1
    elif isinstance(expr, P.Between):
        s = 0.25
    else:
        s = 0.5
    return 1.0 - s if neg else s


def ai_selectivity(hints: P.Hints) -> float:
    return DEFAULT_AI_SELECTIVITY if hints.selectivity is None else hints.selectivity


def tables_of(plan) -> dict:
    """alias -> table name of every Scan in ``plan``."""
    return {n.alias: n.table for n in P.walk(plan) if isinstance(n, P.Scan)}


def doc_tokens(ctx: Context, tables: dict, columns) -> float:
    """Mean tokens of a document made of ``columns`` ("name: value" lines when several)."""
    cols = tuple(columns)
    total = sum(ctx.catalog.avg_tokens(tables[c.qualifier], c.name) for c in cols)
    if len(cols) > 1:
        total += sum(ctx.model.text_tokens(c.name + ": ") + 1 for c in cols)
    return total


def _rows(node) -> float:
    return node.est.rows if node.est is not None else 0.0


def distinct_docs(node, columns) -> float | None:
    """Distinct documents of ``columns`` among the rows of ``node``, None if unknown.

    Estimated as the rows of the largest subplan below ``node`` that reads only the
    documents' table: joins above it repeat its rows, they add no new documents.
    """
    tables = {c.qualifier for c in columns}
    if len(tables) != 1:
        return None
    (alias,) = tables
    while P.aliases(node) != {alias}:
        node = next(k for k in P.children(node) if alias in P.aliases(k))
    return _rows(node)


def cached_docs(node) -> set:
    """Documents (tuples of columns) already cached for the rows ``node`` outputs.

    A document is cached while retain marks keep it: walking down a chain, each
    AIFilter marked ``retain='document'`` keeps its document.
    """
    out = set()
    while isinstance(node, P.AIFilter):
        if node.retain == "document":
            out.add(P.doc_columns(node.template))
        node = node.child
    return out


def estimate_node(node, ctx: Context, tables: dict | None = None) -> P.Estimate:
    """Estimate of ``node`` alone, its children already annotated.

    ``tables``: alias -> table name of the Scans below (found by walking the
    plan when not given).
    """
    m, tables = ctx.model, tables_of(node) if tables is None else tables
    if isinstance(node, P.Scan):
        return P.Estimate(float(ctx.catalog.row_count(node.table)))
    if isinstance(node, P.Filter):
        return P.Estimate(_rows(node.child) * predicate_selectivity(node.predicate))
    if isinstance(node, (P.Join, P.AIJoin)):
        lr, rr = _rows(node.left), _rows(node.right)
        base = lambda alias: float(ctx.catalog.row_count(tables[alias]))  # noqa: E731
        pairs = lr * rr * predicate_selectivity(node.condition, base)
        if isinstance(node, P.Join):
            return P.Estimate(pairs)
        if node.anchor is None:
            node = dataclasses.replace(node, anchor=P.expr_columns(node.template)[0].qualifier)
        anchor_rows = lr if node.anchor in P.aliases(node.left) else rr
        a, b = P.anchor_column(node), P.partner_column(node)
        q = m.text_tokens(P.join_question_text(node))
        c = join_cost(m, min(anchor_rows, pairs), doc_tokens(ctx, tables, [a]), pairs,
                      doc_tokens(ctx, tables, [b]), q)
        return P.Estimate(pairs * ai_selectivity(node.hints), pairs, c.tokens, c.fresh, c.seconds)
    if isinstance(node, P.AIFilter):
        rows = _rows(node.child)
        doc = P.doc_columns(node.template)
        c = filter_cost(m, rows, doc_tokens(ctx, tables, doc),
                        m.text_tokens(P.question_text(node.template)), doc in cached_docs(node.child),
                        distinct=distinct_docs(node.child, doc))
        return P.Estimate(rows * ai_selectivity(node.hints), rows, c.tokens, c.fresh, c.seconds)
    if isinstance(node, P.Project):
        rows, total, seen = _rows(node.child), Cost(), set(cached_docs(node.child))
        for item in (i for i in node.items if isinstance(i, P.AI_ITEMS)):
            doc = P.doc_columns(item.template)
            q = m.text_tokens(P.question_text(item.template))
            labels = getattr(item, "labels", ())
            q += sum(m.text_tokens(x) + 1 for x in labels)
            total += filter_cost(m, rows, doc_tokens(ctx, tables, doc), q, doc in seen,
                                 answers=len(labels) or None, distinct=distinct_docs(node.child, doc))
            seen.add(doc)
        evaluated = rows if total.tokens else 0.0
        return P.Estimate(rows, evaluated, total.tokens, total.fresh, total.seconds)
    if isinstance(node, P.TopK):
        return P.Estimate(min(float(node.k), _rows(node.child)))
    if isinstance(node, P.Limit):
        return P.Estimate(min(float(node.n), _rows(node.child)))
    return P.Estimate(_rows(node.child))


def annotate(plan, ctx: Context):
    """``plan`` with ``est`` set on every node."""
    return P.transform(plan, lambda n: dataclasses.replace(n, est=estimate_node(n, ctx)))


def total(plan) -> P.Estimate:
    """Sum of the AI work of an annotated plan; ``rows`` are the root's."""
    nodes = list(P.walk(plan))
    return P.Estimate(_rows(plan), sum(n.est.evaluated for n in nodes),
                      sum(n.est.tokens for n in nodes), sum(n.est.fresh_tokens for n in nodes),
                      sum(n.est.sol_s for n in nodes))
