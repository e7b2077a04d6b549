"""AI columns over Arrow record batches: the per-batch evaluation of ``quail_spark.ArrowMapper``,
``quail_spark.with_ai_columns`` and the enrichment job. Never imports pyspark.

An :class:`AIColumn` is a named AI call whose documents are input columns.
:func:`evaluate_batch` computes every AI column of a batch through
:func:`gpu_worker.ai_calls.evaluate` (the one rendering and NULL rule of every
path, so values equal ``spark.sql``'s for the same call). A row the model cannot
score (an over-long prompt under ``on_overflow='error'``, text that is not
UTF-8) gets its reason and its neighbours are still scored.

    >>> import pyarrow as pa
    >>> from gpu_worker.ai_calls import Call
    >>> col = AIColumn("late", "ai_if('Is {0} late?', body)", Call("if", "Is {0} late?", 1), ("body",))
    >>> got = evaluate_batch(lambda: None, [col], pa.table({"body": [None, " "]}))
    >>> got.values, got.errors
    ([[None, None]], [[], []])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from .ai_calls import Call, evaluate, is_null

ARROW_TYPES = {"boolean": pa.bool_(), "double": pa.float64(), "string": pa.string()}
ENGINE_COUNTERS = ("requested_tokens", "fresh_tokens", "reused_tokens", "kv_regret_tokens",
                   "forward_passes", "truncated_rows")
CHUNK_ROWS, CHUNK_BYTES = 256, 1 << 20  # an engine call per few short rows would leave a GPU idle


@dataclass(frozen=True)
class AIColumn:
    """One output column: an AI call over input columns (or expressions of them, which Spark computes
    into columns of their own before the batches arrive)."""

    name: str
    expr: str          # canonical SQL of the call
    call: Call
    inputs: tuple      # input column names, in argument order
    derived: tuple = ()  # (input name, Spark SQL) of each argument that is an expression

    @property
    def result_type(self) -> str:
        return self.call.result_type

    @property
    def arrow_type(self) -> pa.DataType:
        return ARROW_TYPES[self.result_type]


@dataclass
class BatchValues:
    """What :func:`evaluate_batch` computed: per column its values (None where NULL, errored or not
    asked) and the rows it could not score, per row the reasons ("column: why"), engine counter deltas."""

    values: list
    errors: list
    failed: list = field(default_factory=list)
    counters: dict = field(default_factory=lambda: dict.fromkeys(ENGINE_COUNTERS, 0))

    def error_column(self) -> pa.Array:
        """``_ai_error``: NULL, or the reasons of the row joined by '; '."""
        return pa.array(["; ".join(e) if e else None for e in self.errors], pa.string())


def evaluate_batch(engine: Callable, columns, batch, need=None,
                   on_failure: Callable[[Exception], str] | None = None) -> BatchValues:
    """The AI ``columns`` over the rows of ``batch`` (a RecordBatch or Table).

    ``engine()`` returns the engine; it is called only when a row needs the model.
    ``need`` (optional): per column, a list of booleans, the rows to compute.
    An engine call that raises propagates, unless ``on_failure`` is given: then
    each non-NULL row of that column gets ``on_failure(error)`` as its reason.
    """
    n = batch.num_rows
    texts, undecodable = decode(batch, {x for c in columns for x in c.inputs},
                                {name: sql for c in columns for name, sql in c.derived})
    out = BatchValues([], [[] for _ in range(n)])
    for i, col in enumerate(columns):
        rows, failed = [], set()
        out.failed.append(failed)
        for r in range(n):
            if need is not None and not need[i][r]:
                continue
            bad = [undecodable[(x, r)] for x in col.inputs if (x, r) in undecodable]
            if bad:
                out.errors[r].append(f"{col.name}: {bad[0]}")
                failed.add(r)
            else:
                rows.append(r)
        vals = [None] * n
        got, errs = _column(engine, col, [[texts[x][r] for r in rows] for x in col.inputs], out.counters,
                            on_failure)
        for r, v, e in zip(rows, got, errs):
            vals[r] = v
            if e is not None:
                out.errors[r].append(f"{col.name}: {e}")
                failed.add(r)
        out.values.append(vals)
    return out


def _column(engine, col: AIColumn, cols, counters: dict, on_failure):
    """(values, per-row error or None) of one AI column over the given rows' texts."""
    n = len(cols[0]) if cols else 0
    errs: list = [None] * n
    nulls = [any(is_null(c[i]) for c in cols) for i in range(n)]
    if all(nulls):
        return [None] * n, errs  # the NULL rule: no prompt, no engine needed
    try:
        eng = engine()
        before = {k: eng.stats.get(k, 0) for k in ENGINE_COUNTERS}
        try:
            return evaluate(eng, col.call, cols, errors=errs, where=lambda i: f"column {col.name!r}, row {i}"), errs
        finally:
            for k in ENGINE_COUNTERS:
                counters[k] += eng.stats.get(k, 0) - before[k]
    except Exception as e:  # noqa: BLE001 - the caller decides: raise, or a reason on each row
        if on_failure is None:
            raise
        why = on_failure(e)
        return [None] * n, [None if null else why for null in nulls]


def decode(batch, names, expressions=None) -> tuple[dict, dict]:
    """Columns ``names`` of ``batch`` as Python str/None; binary (or invalid UTF-8) decoded per row.

    Returns (name -> list, {(name, row): why} for values that are not UTF-8); ``why`` names the
    expression a column holds when ``expressions`` (name -> SQL) has it, else the column.
    """
    expressions = expressions or {}
    out, bad = {}, {}
    for name in names:
        arr = batch.column(name)
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            try:
                out[name] = arr.to_pylist()
                continue
            except UnicodeDecodeError:
                arr = arr.cast(pa.binary())
        vals = []
        for r, v in enumerate(arr.to_pylist()):
            try:
                vals.append(None if v is None else v.decode("utf-8"))
            except UnicodeDecodeError as e:
                where = f"argument {expressions[name]!r}" if name in expressions else f"column {name!r}"
                bad[(name, r)] = f"undecodable text in {where} ({e.reason} at byte {e.start})"
                vals.append(None)
        out[name] = vals
    return out, bad


def chunks(batches: Iterable[pa.RecordBatch], rows: int = CHUNK_ROWS,
           min_bytes: int = CHUNK_BYTES) -> Iterator[pa.Table]:
    """Record batches gathered into tables of at least ``rows`` rows and ``min_bytes`` bytes (the
    last may be smaller), so that one engine call sees many rows and schedules their shared prefixes
    together."""
    held, n, size = [], 0, 0
    for b in batches:
        if b.num_rows == 0:
            continue
        held.append(b)
        n += b.num_rows
        size += b.nbytes
        if n >= rows and size >= min_bytes:
            yield pa.Table.from_batches(held)
            held, n, size = [], 0, 0
    if held:
        yield pa.Table.from_batches(held)


def with_columns(engine: Callable, columns, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each row of ``batches`` with the AI ``columns`` and ``_ai_error`` appended (ArrowMapper's body).

    Batches are gathered by :func:`chunks` before evaluation; the output keeps every row, in order.
    ``engine`` as in :func:`evaluate_batch`; use :func:`with_columns_counted` to read the counters.
    """
    for table, _ in with_columns_counted(engine, columns, batches):
        yield from table.to_batches()


def with_columns_counted(engine: Callable, columns, batches):
    """(output table, :class:`BatchValues`) of each chunk of ``batches`` (see :func:`with_columns`)."""
    for table in chunks(batches):
        got = evaluate_batch(engine, columns, table)
        for col, vals in zip(columns, got.values):
            table = table.append_column(col.name, pa.array(vals, col.arrow_type))
        yield table.append_column("_ai_error", got.error_column()), got
