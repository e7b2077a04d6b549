"""What an enrichment run would compute, before it runs: ``quail-spark enrich SPEC --dry-run`` and the
spec's ``"budget": {"max_tokens": N}``.

The rows to compute are the run's own (``incremental.work_rows`` over the input and the previous
output: a rerun counts only the rows whose key, content or spec changed), per AI column the
rows whose inputs are not NULL (the NULL rule asks nothing of the model). Tokens: the exact
prompts of a bounded sample of those rows (the first ``SAMPLE_ROWS`` by key), rendered on the driver
by the model's own renderer (only the tokenizer loads), scaled to the rows to compute; fresh
tokens count what a row's later columns share with its first one (whole KV pages, as the
engine's prefix tree does). Seconds: the planner's cost model for the engine's measured rates
(``quail_spark.cost``). Nothing is written and no lock is taken.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from quail_spark.enrich.guard import column
from quail_spark.enrich.incremental import needs_any
from quail_spark.enrich.spec import Spec, SpecError

SAMPLE_ROWS = 1000
PAGE = 16  # tokens per KV page: only whole pages are shared between prompts


class BudgetRefused(SpecError):
    """The run's estimate exceeds the spec's budget (exit status 2: nothing ran)."""


def estimate(spec: Spec, spark, work) -> dict:
    """Rows, columns, tokens and seconds the run over ``work`` (``incremental.work_rows``) would compute."""
    from gpu_worker.prompts import is_null
    from quail_spark.concurrency import task_threads

    counts = work.select(F.count(F.lit(1)), *[
        F.sum((F.col(f"__n{i}") & _not_null(c.inputs)).cast("long")) for i, c in enumerate(spec.columns)],
        F.sum(needs_any(spec).cast("long"))).first()
    n_read, per_col, n_todo = counts[0], [int(x or 0) for x in counts[1:-1]], int(counts[-1] or 0)
    # the first rows by key: the same sample on every preview of the same rows
    rows = work.where(needs_any(spec)).orderBy(column(spec.key)).limit(SAMPLE_ROWS).collect() if n_todo else []
    render = _renderer(spec)
    lengths = [[] for _ in spec.columns]
    fresh_rows, pairs_rows = [], []
    for r in rows:
        prompts = []
        for i, c in enumerate(spec.columns):
            values = [r[x] for x in c.inputs]
            if r[f"__n{i}"] and not any(is_null(v) for v in values):
                prompts.append(render(c.call, values))
                lengths[i].append(len(prompts[-1]))
        fresh, pairs = _fresh(prompts)
        fresh_rows.append(fresh)
        pairs_rows.append(pairs)
    requested = sum(n * sum(ls) / len(ls) for n, ls in zip(per_col, lengths) if ls)
    scale = n_todo / len(rows) if rows else 0.0
    fresh, pairs = sum(fresh_rows) * scale, sum(pairs_rows) * scale
    return {"rows_read": n_read, "rows_to_compute": n_todo, "rows_skipped": n_read - n_todo,
            "columns": {c.name: n for c, n in zip(spec.columns, per_col)}, "sampled_rows": len(rows),
            "requested_tokens": round(requested), "fresh_tokens": round(fresh),
            "seconds": _seconds(spec, fresh, pairs, sum(per_col), task_threads(spark))}


def check(spec: Spec, est: dict) -> None:
    """Refuse a run whose estimate exceeds the spec's budget."""
    limit = spec.budget.get("max_tokens")
    if limit is not None and est["requested_tokens"] > limit:
        raise BudgetRefused(f"budget: the run is estimated to request {est['requested_tokens']:,} tokens "
                            f"({est['rows_to_compute']:,} rows to compute), more than max_tokens={limit:,}; "
                            "nothing ran, the output is unchanged")


def text(est: dict) -> str:
    """The dry run's printed lines."""
    cols = ", ".join(f"{k} {v:,}" for k, v in est["columns"].items())
    return (f"dry run (nothing computed, nothing committed): {est['rows_read']:,} rows read, "
            f"{est['rows_to_compute']:,} to compute, {est['rows_skipped']:,} kept from the previous output\n"
            f"  rows per AI column: {cols}\n"
            f"  estimate: {est['requested_tokens']:,} tokens requested, {est['fresh_tokens']:,} fresh; "
            f"{est['seconds']:.3g} s of model time (prompts of {est['sampled_rows']:,} rows rendered)")


def _renderer(spec: Spec):
    """``render(call, values) -> prompt ids`` of the spec's model, on the driver (its tokenizer only)."""
    from gpu_worker import weights
    from gpu_worker.ai_calls import render
    from gpu_worker.prompts import PromptRenderer

    src = weights.resolve(spec.model, spec.engine.get("cache_dir"), tokenizer=spec.engine.get("tokenizer"))
    prompts = _Prompts(PromptRenderer(weights.load_tokenizer(src)))
    return lambda call, values: render(prompts, call, values)


class _Prompts:
    """The engine's prompt layouts (``Engine.render_*``) over a renderer alone: no model, no pool."""

    def __init__(self, renderer):
        self.r = renderer

    def _ids(self, text: str) -> list:
        return self.r.encode_docs([text])[0] if text else []

    def render_filter(self, doc, question):
        head, tail = self.r.filter_parts(question)
        return head + self._ids(doc) + tail

    def render_join(self, anchor, partner, question):
        head, mid, post = self.r.join_parts(question)
        return head + self._ids(anchor) + mid + self._ids(partner) + post

    def render_classify(self, doc, labels, instruction):
        head, tail = self.r.classify_parts(instruction, list(labels))
        return head + self._ids(doc) + tail


def _fresh(prompts: list) -> tuple:
    """(fresh tokens, attended pairs) of one row's prompts: later ones reuse the first's whole pages."""
    fresh = pairs = 0
    for k, p in enumerate(prompts):
        shared = 0
        if k:
            first = prompts[0]
            n = next((j for j, (a, b) in enumerate(zip(first, p)) if a != b), min(len(first), len(p)))
            shared = min(n, len(p) - 1) // PAGE * PAGE
        new = len(p) - shared
        fresh += new
        pairs += new * shared + new * (new + 1) / 2
    return fresh, pairs


def _seconds(spec: Spec, fresh: float, pairs: float, prompts: int, threads: int) -> float:
    """The rules' cost model (AiCost.prompts) over the sampled fresh tokens, attended pairs and prompts (a CPU's
    rates those of an engine of a task's ``threads``)."""
    from quail_spark.cost import CONF, model_shape, session_conf

    conf = session_conf(spec.model, spec.device, spec.engine, threads)
    s = model_shape(spec.model)
    rate, attn = float(conf[CONF + "rate"]), float(conf[CONF + "attn_rate"])
    per_prompt = float(conf.get(CONF + "prompt_s", 0))
    return (2 * s.n_lin * fresh / rate + 4 * s.n_layers * s.n_q_heads * s.head_dim * pairs / attn
            + prompts * per_prompt)


def _not_null(inputs) -> F.Column:
    cond = F.lit(True)
    for x in inputs:
        cond = cond & F.col(f"`{x}`").isNotNull() & (F.trim(F.col(f"`{x}`").cast("string")) != "")
    return cond
