"""A query's token budget while it runs (``spark.quail.maxTokensPerQuery``).

The rule ``QuailBudget.java`` refuses a plan whose estimate exceeds the budget before any AI
work and writes ``"budget": {"max_tokens": N, "query": id}`` into each AI operator's spec.
Each batch's metrics line then carries the query's id, and after writing it an executor sums
the tokens requested for that query over the session's metrics folder (every executor's
lines): past the budget, the batch fails with :class:`BudgetExceeded` and so does the query.
"""
from __future__ import annotations

import json
from pathlib import Path


class BudgetExceeded(RuntimeError):
    """The AI work of a query passed its token budget while running."""


def requested(folder: str, query: str) -> int:
    """Tokens requested so far for ``query`` by every executor writing to ``folder``."""
    total = 0
    for f in Path(folder).glob("*.jsonl"):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if query not in line:
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a killed worker
                if d.get("query") == query:
                    total += int(d.get("requested_tokens", 0))
    return total


def stop_if_over(folder: str | None, budget) -> None:
    """Raise :class:`BudgetExceeded` when the query of ``budget`` (``specs.Budget``) requested more than its
    max_tokens."""
    if not folder:
        return
    used, limit = requested(folder, budget.query), budget.max_tokens
    if used > limit:
        raise BudgetExceeded(f"quail: the query was stopped: its AI operators requested {used:,} tokens, more than "
                             f"spark.quail.maxTokensPerQuery={limit:,}")
