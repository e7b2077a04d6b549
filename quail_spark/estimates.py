"""A query's cost before it runs, and beside what it cost after.

- :func:`estimate`: the plan's AI operators with their estimated rows, tokens and
  seconds (the rules' cost model, fed by measured inputs: docs/estimates.md), and the
  totals; no AI work runs (the planner may read a bounded sample of a file source).
- :func:`analyzed`: runs the query and prints each operator's estimate beside the
  actual counters the executors wrote for it (``quail_spark.operators``).
"""
from __future__ import annotations

from quail_spark.concurrency import tasks_at_once
from quail_spark.explain import plan_text, planned_calls
from quail_spark.operators import analyze_table, estimated

BUDGET = "spark.quail.maxTokensPerQuery"


def estimate(df) -> dict:
    """What the AI operators of ``df``'s plan are estimated to cost.

    Returns
    -------
    dict
        ``rows`` (rows out of the last operator), ``requested_tokens``, ``fresh_tokens``,
        ``seconds`` (the wall: each operator's engine seconds over the tasks that run it at
        once, summed over the operators), ``engine_seconds`` (one engine's serial seconds) and
        ``operators``: one dict per operator in evaluation order (``op`` id, ``kind``, ``call``,
        ``rows_in``, ``rows_out``, ``requested_tokens``, ``fresh_tokens``, ``tasks``,
        ``engine_seconds``, ``seconds``).

    Examples
    --------
    >>> est = estimate(spark.sql("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body)"))  # doctest: +SKIP
    >>> est["requested_tokens"] > 0                                                           # doctest: +SKIP
    True
    """
    spark = df.sparkSession
    limit = spark.conf.get(BUDGET, None)
    if limit:  # the preview of a query over its budget is what it is: the rule would refuse to plan it
        spark.conf.unset(BUDGET)
    try:
        plan = df.select("*")  # a new plan, without the budget
        ops = estimated(planned_calls(plan_text(plan)), tasks_at_once(plan))
    finally:
        if limit:
            spark.conf.set(BUDGET, limit)
    return {"rows": ops[-1]["rows_out"] if ops else None,
            "requested_tokens": sum(o["requested_tokens"] for o in ops),
            "fresh_tokens": sum(o["fresh_tokens"] for o in ops),
            "seconds": sum(o["seconds"] for o in ops), "engine_seconds": sum(o["engine_seconds"] for o in ops),
            "operators": ops}


def analyzed(query) -> str:
    """Run ``query`` (a ``QuailSession`` Query) and return each operator's estimate beside its actual."""
    est = estimate(query.to_df())
    query.collect(progress=False)
    report = query.report
    ops = report.get("ops", {})
    text = analyze_table(est["operators"], ops)
    ai_wall = sum(ops.get(o["op"], {}).get("wall_s", 0) for o in est["operators"])
    return (f"{text}\n== AI run: estimate / actual ==\n  {est['requested_tokens']:,.0f} / "
            f"{report.get('requested_tokens', 0):,} tokens requested, {est['fresh_tokens']:,.0f} / "
            f"{report.get('fresh_tokens', 0):,} fresh; AI operators' wall {est['seconds']:.2f} / {ai_wall:.2f} s "
            f"(the action's {report.get('wall_s', 0):.2f} s)")
