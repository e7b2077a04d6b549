"""Executor side of an enrichment: the mapInArrow function that evaluates AI columns.

Each input batch holds the key, the referenced input columns and, per AI column
``i``, ``__n{i}`` (compute it for this row?), ``__o{i}`` (the value kept from
the previous output) and ``__h{i}`` (the row's new content hash for it), and
``__oerr`` (the reasons the kept values still have: fields cut at max_tokens). The
values come from :func:`gpu_worker.ai_columns.evaluate_batch`, the per-batch
evaluation of ``quail_spark.ArrowMapper`` too (one rendering and NULL rule of
every path). A row that cannot be scored gets its reason in
``_ai_error`` and the task goes on; a batch that raises is retried by Spark and,
on the last attempt Spark allows, is written with ``_ai_error`` set on its rows.

Plain data only crosses from the driver (:class:`StagePlan`); the engine comes
from the worker's cache (``quail_spark.executor.get_engine``).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam


@dataclass(frozen=True)
class StagePlan:
    """What every AI task needs, made on the driver."""

    engine_conf: dict
    key: str
    columns: tuple          # of spec.AIColumn
    max_failures: int       # Spark's task attempts; the last one records errors instead of raising
    progress_dir: str | None = None
    run_id: str = ""
    counters: object = None  # a Spark accumulator (CountersParam): counters of successful tasks
    max_tokens: int = 0  # the spec's budget: the run stops once its tasks requested more (0: none)
    timezone: str = "UTC"   # the session's: ai_extract's timestamps without an offset are read in it


def enrich_task(plan: StagePlan, batches):
    """mapInArrow function: AI columns (and ``_ai_error``, ``_ai_hash``) of each batch."""
    from pyspark import TaskContext

    _configure_logging()
    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx else 0
    progress = Progress(plan, ctx)
    for batch in batches:
        out, counts = evaluate_batch(plan, batch, attempt)
        progress.add(counts)
        if plan.max_tokens:  # the budget: every task's newest counts, summed over the progress folder
            from quail_spark.enrich.budget import stop_if_over

            progress.flush()
            stop_if_over(plan.progress_dir, plan.max_tokens)
        yield out
    progress.flush(final=True)
    if plan.counters is not None:
        plan.counters.add(progress.counts)


class CountersParam(AccumulatorParam):
    """Sums dicts of counters (Spark merges the updates of successful task attempts only)."""

    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        for k, v in b.items():
            a[k] = a.get(k, 0) + v
        return a


def evaluate_batch(plan: StagePlan, batch: pa.RecordBatch, attempt: int = 0):
    """(output batch, counters) of one input batch."""
    from gpu_worker.ai_columns import evaluate_batch as ai_values

    from quail_spark.executor import get_engine

    n = batch.num_rows
    need = [batch.column(f"__n{i}").to_pylist() for i in range(len(plan.columns))]
    got = ai_values(lambda: get_engine(plan.engine_conf), plan.columns, batch, need,
                    None if attempt + 1 < plan.max_failures else _failed(attempt), plan.timezone)
    values, hashes = [], [dict() for _ in range(n)]
    errors = row_errors(plan.columns, need, got.errors, batch.column("__oerr").to_pylist())
    for i, col in enumerate(plan.columns):
        new_hash = batch.column(f"__h{i}").to_pylist()
        vals = batch.column(f"__o{i}").to_pylist()  # kept from the previous output where not needed
        for r in range(n):
            if need[i][r]:
                vals[r] = got.values[i][r]
            if not need[i][r] or r not in got.failed[i]:
                hashes[r][col.name] = new_hash[r]
        values.append(pa.array(vals, col.arrow_type))
    counts = {"rows": n, **got.counters, "errored_rows": sum(1 for e in got.errors if e),
              "computed": sum(any(x[r] for x in need) for r in range(n))}
    out = pa.RecordBatch.from_arrays(
        [batch.column(plan.key), *values, errors, pa.array([hash_text(h) for h in hashes], pa.string())],
        names=[plan.key, *[c.name for c in plan.columns], "_ai_error", "_ai_hash"])
    return out, counts


def row_errors(columns, need, computed, previous) -> pa.Array:
    """``_ai_error`` of each row, in column order: a computed column's reasons (``computed``), a kept
    column's from the previous output (``previous``: the cut fields its value has, see
    ``incremental.kept_reasons``)."""
    out = []
    for r, (new, old) in enumerate(zip(computed, previous)):
        old = old.split("; ") if old else []
        parts = []
        for i, col in enumerate(columns):
            mine = f"{col.name}: "
            parts += [p for p in (new if need[i][r] else old) if p.startswith(mine)]
        out.append("; ".join(parts) if parts else None)
    return pa.array(out, pa.string())


def _failed(attempt: int):
    """The reason each row of a batch gets when its engine call raised on the last attempt."""
    def why(e: Exception) -> str:
        text = f"batch failed after {attempt + 1} attempt(s): {type(e).__name__}: {e}"
        logging.getLogger("gpu_worker").error("enrich: %s", text)
        return text
    return why


def hash_text(hashes: dict) -> str:
    """``_ai_hash`` exactly as Spark's ``to_json`` writes a map with sorted keys."""
    return json.dumps(hashes, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Progress:
    """Per-task counters appended as small JSON records to the run's progress folder.

    One file per (partition, attempt), rewritten atomically: the driver sums the
    newest attempt of each partition. Best effort: a folder executors cannot
    reach (a cluster without a shared file system) only loses the progress line.
    """

    def __init__(self, plan: StagePlan, ctx, every_s: float = 1.0):
        self.path = None
        if plan.progress_dir and ctx is not None:
            self.path = os.path.join(plan.progress_dir, f"p{ctx.partitionId():06d}-a{ctx.attemptNumber()}.json")
        gpu = ctx.resources().get("gpu") if ctx is not None else None
        self.task = {"gpu": list(gpu.addresses) if gpu is not None else [], "pid": os.getpid(),
                     "start": time.time()}
        self.counts: dict = {}
        self.every_s, self.last = every_s, 0.0

    def add(self, counts: dict) -> None:
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        if time.time() - self.last >= self.every_s:
            self.flush()

    def flush(self, final: bool = False) -> None:
        if self.path is None:
            return
        self.last = time.time()
        try:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({**self.task, **self.counts, "done": final, "t": self.last}, f)
            os.replace(tmp, self.path)
        except OSError:
            self.path = None


_LOGGING_SET = False


def _configure_logging() -> None:
    """The ``gpu_worker`` logger writes INFO lines to the executor's stderr (its log)."""
    global _LOGGING_SET
    if _LOGGING_SET:
        return
    log = logging.getLogger("gpu_worker")
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [pid %(process)d]: %(message)s"))
        log.addHandler(h)
        log.setLevel(os.environ.get("QUAIL_LOG_LEVEL", "INFO"))
    _LOGGING_SET = True
