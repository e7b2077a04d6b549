"""AI operators of a plan: their estimates (from the specs the rules wrote) and their actuals.

An operator is one internal call the rules planned (``quail_chain``, ``quail_join``,
``quail_join_score``, ``quail_eval``). Its id is a hash of its spec, computed the same way
on the driver (from the plan's text) and on the executors (from the spec the UDF
receives), so the executors' counters, written per batch with the id
(``quail_spark.metrics``: ``ops``), line up with the plan's estimates without any
state on the driver. Estimates: rows in (a join's pairs), rows out (after the
selectivities), tokens requested and fresh, seconds (the rules' cost model).
"""
from __future__ import annotations

import hashlib
import json
import math

from quail_spark.specs import Chain, Eval, identity, parse

COLUMNS = ("rows_in", "rows_out", "requested_tokens", "fresh_tokens")
KINDS = {"chain": "AI filter chain", "join": "AI join", "join_score": "AI join (scores)", "eval": "AI calls together"}


def op_id(kind: str, spec: dict) -> str:
    """The id of the operator of internal call ``quail_<kind>`` with ``spec`` (its JSON as a dict): a hash of
    the spec's fields but the run's budget and the planner's estimates (``specs.identity``), so that an
    estimate and the run it precedes name one operator alike.

    >>> a = {"doc": "body", "rows": 20, "rows_source": "sample of 60 rows, scan 0.2 s", "calls": [{"template": "t"}]}
    >>> op_id("chain", a) == op_id("chain", {**a, "rows_source": "sample of 60 rows, cached"})
    True
    >>> op_id("chain", a) == op_id("chain", {**a, "doc": "x"})
    False
    """
    key = {"call": kind, **identity(parse(kind, spec))}
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]


def estimated(planned, tasks: dict | None = None) -> list:
    """One dict per priced operator of ``planned`` (``explain.planned_calls``), in evaluation order.
    ``tasks``: {op id: tasks that run it at once} (``concurrency.tasks_at_once``; absent: one): its
    ``engine_seconds`` are one engine's serial seconds (the cost model's), ``seconds`` the wall of that
    work spread over its tasks."""
    out = []
    for kind, raw in planned:
        if kind not in KINDS:
            continue
        spec = parse(kind, raw)
        if spec.cost is None:
            continue
        rows_in, rows_out, label = _rows(spec)
        c, op = spec.cost, op_id(kind, raw)
        n = max(1, min((tasks or {}).get(op, 1), math.ceil(rows_in or 1)))
        out.append({"op": op, "kind": KINDS[kind], "call": label, "rows_in": rows_in, "rows_out": rows_out,
                    "requested_tokens": c.requested, "fresh_tokens": c.fresh, "tasks": n,
                    "engine_seconds": c.seconds, "seconds": c.seconds / n})
    return out


def _rows(spec) -> tuple:
    if isinstance(spec, Chain):
        kept = spec.rows
        for c in spec.calls:
            kept *= c.selectivity
        return spec.rows, kept, " AND ".join(f"ai_if({c.template!r})" for c in spec.calls)
    if isinstance(spec, Eval):
        return spec.rows, spec.rows, ", ".join(f"{c.fn}({c.template!r})" for c in spec.calls)
    pairs = spec.pairs or spec.sides[0].rows * spec.sides[-1].rows
    label = f"ai_if({spec.template!r}, {', '.join(s.column for s in spec.sides)})"
    return pairs, pairs * spec.selectivity, label


def actual_line(kind: str, spec: dict, rows: int, passed: int, delta: dict, seconds: float) -> dict:
    """The per-operator counters of one batch, for the metrics line (``metrics.add`` sums them)."""
    return {op_id(kind, spec): {"batches": 1, "rows_in": rows, "rows_out": passed,
                                "requested_tokens": delta.get("requested_tokens", 0),
                 "fresh_tokens": delta.get("fresh_tokens", 0), "seconds": seconds}}


def analyze_table(estimates: list, actuals: dict) -> str:
    """Each operator's estimate beside its actual (``actuals``: op id -> counters of the run), one
    line per operator, cells ``estimate / actual`` separated by `` | ``; engine seconds are one engine's
    (the actual summed over the operator's tasks), the tasks those that run it at once (estimated), the wall
    the engine seconds over those tasks (the actual from the operator's first batch to its last)."""
    out = ["== AI operators: estimate / actual ==",
           "  operator | rows in | rows out | tokens requested | tokens fresh | engine seconds | tasks | wall s | call"]
    for e in estimates:
        a = actuals.get(e["op"], {})
        cells = ([f"{e['kind']} {e['op']}"] + [_pair(e[k], a.get(k)) for k in COLUMNS]
                 + [_pair(e["engine_seconds"], a.get("seconds")), str(e["tasks"]), _pair(e["seconds"], a.get("wall_s")),
                    e["call"]])
        out.append("  " + " | ".join(cells))
    return "\n".join(out)


def _pair(est, act) -> str:
    def f(x):
        return "-" if x is None else f"{x:,.0f}" if abs(x) >= 10 else f"{x:.3g}"
    return f"{f(est)} / {f(act)}"
