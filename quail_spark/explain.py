"""``Query.explain()``: Spark's plans (with our rules' rewrites) and the estimates the plan carries.

Everything here reads the text of ``df.explain(mode="cost")``, which classic and
Spark Connect sessions both print and which runs no Spark job: the optimized
logical plan with Spark's statistics on every node, then the physical plan.
The planner's cost model is in the Java rules (``AiCost.java``); each call the
rules write carries its estimates in its spec (the first argument of
``quail_chain`` / ``quail_join`` / ``quail_join_score`` / ``quail_eval``), and this module prints those numbers, never
numbers of its own:

- AI filter order: each fused chain's predicates in the order the plan
  evaluates them, with selectivity (hint or default), rank = SoL seconds per
  row / (1 - selectivity), and rows evaluated under short-circuit;
- AI joins: the anchor (the document whose KV is shared) and why, each side's
  rows and tokens with their sources, and the cost with either column as anchor;
- AI join order, when the rules ordered several AI joins: the chosen order of
  the tables and its cost, and the cost of the order as written;
- AI calls evaluated together (``quail_eval``: a SELECT list, CASE, OR, a
  score threshold, top-k, an aggregate): per document, each call's SoL seconds
  per row (the first computes the document, later ones their question) and
  the group's cost;
- AI calls on each row's partners (``quail_match``: outer / semi / anti joins,
  correlated EXISTS / IN), which carry no estimate;
- AI calls the rules did not plan (rules off, or shapes they leave alone);
- the total the plan's estimates add up to (each call site once: a UNION's two
  branches are two sites).

Sites are listed in evaluation order: deeper in the plan first.
"""
from __future__ import annotations

import contextlib
import io
import json

from gpu_worker import ai_calls
from gpu_worker.ai_calls import EXTRACT_UDF
from quail_spark.operators import estimated
from quail_spark.specs import Chain, Cost, Eval, Join, parse

INTERNAL = tuple(f"{name}(" for name in ai_calls.INTERNAL)  # a call's name as the plan prints it


def plan_text(df, mode: str = "cost") -> str:
    """What ``df.explain(mode)`` prints (classic and Spark Connect alike; no job runs)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        df.explain(mode=mode)
    return buf.getvalue()


def optimized_section(text: str) -> str:
    """The "Optimized Logical Plan" section of ``explain`` text ('' when absent)."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("== "):
            inside = line.startswith("== Optimized Logical Plan")
            continue
        if inside:
            out.append(line)
    return "\n".join(out)


def planned_calls(text: str) -> list:
    """[(kind 'chain', 'join', 'join_score', 'eval', 'match' or 'match_score', spec dict)] of the rules' calls
    in the optimized plan of ``text``, in evaluation order (deeper lines first); a spec repeated on one line
    once, the same spec on two lines (two branches of a UNION) twice."""
    found = [call for line in optimized_section(text).splitlines() for call in calls_in_line(line)]
    return found[::-1]


def calls_in_line(line: str) -> list:
    """[(kind, spec dict)] of the rules' internal calls one plan line (or node string) carries, each once."""
    found, seen, decoder = [], set(), json.JSONDecoder()
    for name in INTERNAL:
        start = line.find(name)
        while start >= 0:
            at = start + len(name)
            try:
                spec, _ = decoder.raw_decode(line, at)
            except ValueError:
                spec = None
            key = (name, json.dumps(spec, sort_keys=True))
            if isinstance(spec, dict) and key not in seen:
                seen.add(key)
                found.append((name[len("quail_"):-1], spec))
            start = line.find(name, at)
    return found


def explain_text(df, calls, model: str = "", tasks: dict | None = None) -> str:
    """Spark's plans and the plan's estimates for ``df`` whose AI calls are ``calls``."""
    return explain_plan(plan_text(df), calls, model, tasks)


def explain_plan(text: str, calls=(), model: str = "", tasks: dict | None = None) -> str:
    """``text`` (``explain(mode='cost')`` output) followed by the estimates its plan carries; ``tasks``
    ({op id: tasks at once}, ``concurrency.tasks_at_once``) adds the wall of the work so spread."""
    out = [text.rstrip()]
    planned = planned_calls(text)
    typed = [(k, parse(k, s)) for k, s in planned]
    chains = [s for k, s in typed if k == "chain"]
    joins = [s for k, s in typed if k in ("join", "join_score")]
    evals = [s for k, s in typed if k == "eval" and s.cost is not None]
    matches = [s for k, s in typed if k in ("match", "match_score")]
    for specs, heading, lines in (
            (chains, "AI filter order (as the plan evaluates; rank = SoL s per row / (1 - selectivity))", _chain),
            (joins, "AI join anchors (the document whose KV is computed once)", _join),
            (evals, "AI calls evaluated together (one document's KV computed once per row)", _eval)):
        if specs:
            out.append(f"== {heading} ==")
        for spec in specs:
            out += lines(spec)
    if matches:
        out.append("== AI calls on each row's partners (outer / semi / anti joins, correlated subqueries: every "
                   "pair evaluated, the row's document first; no estimate) ==")
        out += [f"  {'ai_score' if s.kind == 'score' else 'ai_if'}"
                f"({s.template if s.template is not None else 'each row template'!r})" for s in matches]
    orders = dict.fromkeys(s.join_order for s in joins if s.join_order is not None)  # one per tree, in order
    if orders:
        out.append("== AI join order (Selinger-style over the AI predicates; SoL s, survivor-thinned) ==")
        for o in orders:
            out += [f"  chosen: {' > '.join(o.chosen)}  cost {o.seconds:.3g} s",
                    f"  written: {' > '.join(o.written)}  cost {o.written_seconds:.3g} s"]
    templates = ({c.template for s in chains + evals for c in s.calls}
                 | {s.template for s in joins + matches if s.template is not None})
    rest = [c for c in calls if c.template not in templates]
    if rest:
        out.append("== AI calls the rules did not plan (no estimate: evaluated as written) ==")
        out += [f"  {_call(c)}" for c in rest]
    if chains or joins or evals:
        unpriced = " (the calls on partners carry none)" if matches else ""
        ops = estimated(planned, tasks)  # the priced operators: the totals are theirs
        out += ["== SoL estimate ==",
                f"the planned AI calls: {sum(o['requested_tokens'] for o in ops):,.0f} tokens requested, "
                f"{sum(o['fresh_tokens'] for o in ops):,.0f} fresh; SoL "
                f"{sum(o['engine_seconds'] for o in ops):.3g} s{f' ({model})' if model else ''}{unpriced}"]
        if any(o["tasks"] > 1 for o in ops):
            spread = ", ".join(sorted({str(o["tasks"]) for o in ops}))
            out.append(f"on {spread} tasks at once (task slots, the operators' input partitions): wall "
                       f"~{sum(o['seconds'] for o in ops):.3g} s")
    return "\n".join(out)


def _chain(spec: Chain) -> list:
    out = [f"on {spec.doc} ({_n(spec.rows)} rows, {spec.rows_source}; document "
           f"{_n(spec.doc_tokens)} tokens, {spec.tokens_source}; cost {_cost(spec.cost)}):"]
    for k, c in enumerate(spec.calls):
        out.append(f"  {k + 1}. ai_if({c.template!r}) selectivity={c.selectivity:g} "
                   f"({c.selectivity_source}) rank={c.rank:.3g} evaluated={_n(c.evaluated)}")
    return out


def _eval(spec: Eval) -> list:
    out = [f"on {spec.doc} ({_n(spec.rows)} rows, {spec.rows_source}; document "
           f"{_n(spec.doc_tokens)} tokens, {spec.tokens_source}; cost {_cost(spec.cost)}):"]
    for k, c in enumerate(spec.calls):
        fn = "ai_extract" if c.fn.lower() == EXTRACT_UDF else c.fn
        decoded = f" output <= {_n(c.output_tokens)} tokens" if c.output_tokens is not None else ""
        out.append(f"  {k + 1}. {fn}({c.template!r}){decoded} SoL s per row={c.seconds_per_row:.3g}")
    return out


def _join(spec: Join) -> list:
    cols = ", ".join(s.column for s in spec.sides)
    call = f"ai_if({spec.template!r}, {cols})"
    if spec.score_bounds is not None:
        score = f"ai_score({spec.template!r}, {cols})"
        call = " AND ".join(f"{score} {op} {x}" for op, x in spec.score_bounds)
    if spec.score_compared is not None:  # quail_join_score: Spark compares each pair's score
        call = f"ai_score({spec.template!r}, {cols}) {spec.score_compared}"
    pairs = f" over {_n(spec.pairs)} pairs (join order, survivor-thinned)" if spec.pairs is not None else ""
    out = [f"  {call}: anchor {spec.anchor} ({spec.why}){pairs}; cost {_cost(spec.cost)}"]
    for s in spec.sides:
        out.append(f"    {s.column}: {_n(s.rows)} rows ({s.rows_source}), {_n(s.tokens)} tokens "
                   f"({s.tokens_source}); as anchor {_cost(s.cost_as_anchor)}")
    return out


def _cost(c: Cost | None) -> str:
    return "not priced" if c is None else f"{c.fresh:,.0f} fresh tokens, SoL {c.seconds:.3g} s"


def _call(c) -> str:
    args = ", ".join((repr(c.template),) + tuple(c.args))
    hints = f", hints {dict(c.hints)}" if c.hints else ""
    labels = f", labels {list(c.labels)}" if c.labels else ""
    return f"{c.fn}({args}){labels}{hints}"


def _n(x) -> str:
    return f"{x:,.0f}" if x >= 10 or x == int(x) else f"{x:.3g}"
