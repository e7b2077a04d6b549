"""An enrichment run's token budget while it runs (the spec's ``"budget": {"max_tokens": N}``).

Every AI task rewrites its counters into the run's progress folder after each batch
(``ai_stage.Progress``); a task sums the newest attempt of every partition there
(``progress.totals``) and, past the budget, fails with :class:`BudgetStopped`: the job fails,
nothing is committed and the previous output stays as it was (exit status 4).
"""
from __future__ import annotations


class BudgetStopped(RuntimeError):
    """The run's tasks requested more tokens than the spec's budget."""


def stop_if_over(folder: str | None, max_tokens: int) -> None:
    """Raise :class:`BudgetStopped` once the run's tasks requested more than ``max_tokens``."""
    from quail_spark.enrich.progress import totals

    if not folder:
        return
    used = int(totals(folder).get("requested_tokens", 0))
    if used > max_tokens:
        raise BudgetStopped(f"budget: the run was stopped after requesting {used:,} tokens, more than "
                            f"max_tokens={max_tokens:,}; nothing committed, the previous output is unchanged")
