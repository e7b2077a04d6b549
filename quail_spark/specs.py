"""The specs of the rules' internal calls: one dataclass per call, read from the JSON text each call carries.

The Java rules write a spec as the first argument of each internal call they plan (one Java record per
call, `Specs.java`, serialized with Jackson: snake_case names, absent where null). The executors' bodies,
explain and the per-operator estimates read it here, once, with :func:`parse`; a field neither side knows
is an error, not a silent default. An operator's id hashes its spec's fields but the estimates
(:func:`identity`, ``operators.op_id``).

>>> s = parse("chain", '{"doc": "t.body", "calls": [{"template": "Is {0} rude?", "selectivity": 0.1}]}')
>>> s.calls[0].template, s.calls[0].selectivity, s.cost is None
('Is {0} rude?', 0.1, True)
>>> parse("match", {"template": "Is {0} in {1}?", "kind": "score", "anchor_arg": 1}).anchor_arg
1
>>> parse("match", {"template": "t", "bogus": 1})
Traceback (most recent call last):
...
ValueError: a quail_match spec has no field 'bogus' (its fields: template, template_arg, anchor_arg, kind)
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass


def _estimate(default=dataclasses.MISSING):
    """A field that is an estimate or its source (or the run's budget), not a part of the operator: an
    operator's id leaves it out (:func:`identity`), so the estimate made before a run ("sample of 60 rows,
    scan 0.2 s") and the run's plan ("..., cached") name one operator."""
    return dataclasses.field(default=default, metadata={"estimate": True})


@dataclass(frozen=True)
class Cost:
    """Tokens requested (full prompts) and fresh (computed), and one engine's serial seconds."""
    requested: float = 0.0
    fresh: float = 0.0
    seconds: float = 0.0


@dataclass(frozen=True)
class Budget:
    """The query's token budget (``spark.quail.maxTokensPerQuery``) and the query's id (``QuailBudget``)."""
    max_tokens: int
    query: str


@dataclass(frozen=True)
class ChainCall:
    """One ai_if of a chain, in evaluation order, with its estimate."""
    template: str
    selectivity: float = _estimate(0.5)
    selectivity_source: str = _estimate("default")
    seconds_per_row: float = _estimate(0.0)
    rank: float = _estimate(0.0)
    evaluated: float = _estimate(0.0)


@dataclass(frozen=True)
class OnDocument:
    """What a call over one document column estimates: the document, its tokens, the rows, their sources,
    the cost; and the query's budget where it has one."""
    doc: str = ""
    doc_tokens: float = _estimate(0.0)
    tokens_source: str = _estimate("")
    rows: float = _estimate(0.0)
    rows_source: str = _estimate("")
    cost: Cost | None = _estimate(None)
    budget: Budget | None = _estimate(None)


@dataclass(frozen=True)
class Chain(OnDocument):
    """``quail_chain(spec, document)``: the AI predicates of one filter over one document (``QuailFilterChain``)."""
    calls: tuple[ChainCall, ...] = ()


@dataclass(frozen=True)
class Side:
    """One column of an AI join: its rows and tokens and their sources, and its cost as the anchor."""
    column: str
    rows: float = _estimate()
    rows_source: str = _estimate()
    tokens: float = _estimate()
    tokens_source: str = _estimate()
    cost_as_anchor: Cost = _estimate()


@dataclass(frozen=True)
class JoinOrder:
    """The order ``QuailAiJoinOrder`` chose among a tree's AI joins, and the written one, with their costs."""
    chosen: tuple[str, ...]
    seconds: float
    written: tuple[str, ...]
    written_seconds: float


@dataclass(frozen=True)
class Join:
    """``quail_join(spec, col0, col1...)`` / ``quail_join_score``: an inner AI join's call (``QuailAiJoin``).
    ``score_bounds``: ``((op, x), ...)``, the ON's comparisons of the score with literals; ``score_compared``:
    the comparison Spark makes with each pair's score (quail_join_score)."""
    template: str
    selectivity: float = _estimate(0.5)
    selectivity_source: str = _estimate("default")
    anchor_arg: int | None = None
    score_bounds: tuple[tuple[str, float], ...] | None = None
    score_compared: str | None = None
    anchor: str = ""
    why: str = _estimate("")
    sides: tuple[Side, ...] = ()
    cost: Cost | None = _estimate(None)
    join_order: JoinOrder | None = _estimate(None)
    pairs: float | None = _estimate(None)
    budget: Budget | None = _estimate(None)


@dataclass(frozen=True)
class EvalCall:
    """One AI call of a ``quail_eval``: its function, the positions of its arguments, its estimate."""
    fn: str
    args: tuple[int, ...]
    template: str = ""
    seconds_per_row: float = _estimate(0.0)
    output_tokens: float | None = None


@dataclass(frozen=True)
class Eval(OnDocument):
    """``quail_eval(spec, args...)``: the AI calls of one plan node over one document (``QuailFuseCalls``)."""
    calls: tuple[EvalCall, ...] = ()


@dataclass(frozen=True)
class Match:
    """``quail_match(spec, lists...)`` / ``quail_match_score``: an outer, semi or anti AI join's call on each
    row's partners (``PartnerMatch``); ``template_arg``: each pair's template is the first list."""
    template: str | None = None
    template_arg: bool = False
    anchor_arg: int | None = None
    kind: str = "if"


# the internal call's name without "quail_" -> its spec
KINDS = {"chain": Chain, "join": Join, "join_score": Join, "eval": Eval, "match": Match, "match_score": Match}
Spec = Chain | Join | Eval | Match


def parse(kind: str, spec) -> Spec:
    """The spec of internal call ``quail_<kind>`` from its JSON text (or the dict of it)."""
    d = json.loads(spec) if isinstance(spec, (str, bytes)) else spec
    return _build(KINDS[kind], d, f"a quail_{kind} spec")


def identity(spec) -> dict:
    """The fields of ``spec`` that make its operator, nested specs likewise: every field but the estimates.

    >>> identity(parse("chain", {"doc": "t.body", "rows": 20, "calls": [{"template": "t", "rank": 0.3}]}))
    {'doc': 't.body', 'calls': [{'template': 't'}]}
    """
    return {f.name: _identity(getattr(spec, f.name))
            for f in dataclasses.fields(spec) if not f.metadata.get("estimate")}


def _identity(v):
    if dataclasses.is_dataclass(v):
        return identity(v)
    if isinstance(v, tuple):
        return [_identity(x) for x in v]
    return v


def budget(spec: dict) -> Budget | None:
    """The budget a spec's JSON (a dict, whatever its call) carries, or None."""
    b = spec.get("budget")
    return None if b is None else _build(Budget, b, "a spec's budget")


def _build(cls, d: dict, what: str):
    if not isinstance(d, dict):
        raise ValueError(f"{what} is not a JSON object: {d!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in d:
        if k not in hints:
            raise ValueError(f"{what} has no field {k!r} (its fields: {', '.join(names)})")
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in d and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{what} lacks {', '.join(repr(m) for m in missing)}")
    return cls(**{k: _value(hints[k], v, f"{what}'s {k}") for k, v in d.items()})


def _value(tp, v, what: str):
    if v is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):  # X | None
        return _value(next(a for a in args if a is not type(None)), v, what)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], x, what) for x in v)
        return tuple(_value(a, x, what) for a, x in zip(args, v, strict=True))
    if dataclasses.is_dataclass(tp):
        return _build(tp, v, what)
    if tp is float:
        return float(v)
    if tp is int:
        return int(v)
    if tp is bool:
        return bool(v)
    return str(v)
