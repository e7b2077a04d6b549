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

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator
from zoneinfo import ZoneInfo

import pyarrow as pa

from .ai_calls import Call, evaluate, is_null
from .counters import REPORTED, metered

ARROW_TYPES = {"boolean": pa.bool_(), "double": pa.float64(), "string": pa.string()}
# Spark's JSON names of the field types ai_extract decodes -> Arrow (as pyspark's to_arrow_type)
FIELD_TYPES = {"string": pa.string(), "integer": pa.int32(), "long": pa.int64(), "short": pa.int16(),
               "byte": pa.int8(), "double": pa.float64(), "float": pa.float32(), "boolean": pa.bool_(),
               "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC")}
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
        if self.call.kind == "extract":
            return arrow_type(json.loads(self.call.schema))
        return ARROW_TYPES[self.result_type]


def arrow_type(t) -> pa.DataType:
    """The Arrow type of a Spark type given in Spark's JSON form (``DataType.jsonValue()``).

    >>> arrow_type({"type": "struct", "fields": [{"name": "age", "type": "integer", "nullable": True,
    ...                                           "metadata": {}}]})
    StructType(struct<age: int32>)
    """
    if isinstance(t, str):
        if t not in FIELD_TYPES:
            raise ValueError(f"Spark type {t!r} has no Arrow type here; expected one of {sorted(FIELD_TYPES)}")
        return FIELD_TYPES[t]
    if t["type"] == "array":
        return pa.list_(arrow_type(t["elementType"]))
    if t["type"] == "struct":
        return pa.struct([pa.field(f["name"], arrow_type(f["type"])) for f in t["fields"]])
    raise ValueError(f"Spark type {t!r} has no Arrow type here (string, numbers, boolean, date, timestamp, "
                     "array, struct)")


INT_BITS = {"integer": 32, "long": 64, "short": 16, "byte": 8}


def spark_value(v, t, tz: str = "UTC"):
    """A decoded JSON value as Spark's ``from_json`` reads it into type ``t`` (Spark's JSON form): None
    where Spark gives NULL (an integer out of range, text that is no date). ``tz``: the session time
    zone, in which Spark reads a timestamp without an offset.

    >>> spark_value("2021-03-14", "date"), spark_value(2 ** 40, "integer"), spark_value(3, "double")
    (datetime.date(2021, 3, 14), None, 3.0)
    """
    if v is None:
        return None
    if isinstance(t, dict):
        if t["type"] == "array":
            return None if not isinstance(v, list) else [spark_value(x, t["elementType"], tz) for x in v]
        if not isinstance(v, dict):
            return None
        return {f["name"]: spark_value(v.get(f["name"]), f["type"], tz) for f in t["fields"]}
    if t in INT_BITS:
        ok = isinstance(v, int) and not isinstance(v, bool) and -(1 << INT_BITS[t] - 1) <= v < 1 << INT_BITS[t] - 1
        return v if ok else None
    if t in ("double", "float"):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if t == "boolean":
        return v if isinstance(v, bool) else None
    if t == "string":
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    return _moment(v, t, tz)


def _moment(v, t: str, tz: str):
    """A date (datetime.date) or timestamp (aware datetime) from ISO text or a datetime object."""
    try:
        if t == "date":
            return v if isinstance(v, dt.date) and not isinstance(v, dt.datetime) else \
                dt.date.fromisoformat(str(v)[:10])
        x = v if isinstance(v, dt.datetime) else dt.datetime.fromisoformat(str(v).replace("Z", "+00:00"))
        return x if x.tzinfo is not None else x.replace(tzinfo=ZoneInfo(tz))
    except ValueError:
        return None


def decode_result(col: AIColumn, result, tz: str = "UTC") -> tuple:
    """(value for ``col.arrow_type``, reasons) of one row's result: text as it is; an ai_extract
    ``Extraction`` as a dict of its fields (NULL where cut at max_tokens, each cut field a reason)."""
    if result is None or col.call.kind != "extract":
        return result, []
    schema = json.loads(col.call.schema)
    value = spark_value(dict(result.values), schema, tz)
    n = col.call.output_tokens
    return value, [f"field {f!r} cut at max_tokens {n}" for f in result.cut]


@dataclass
class BatchValues:
    """What :func:`evaluate_batch` computed: per column its values (None where NULL, errored or not
    asked) and the rows it could not score, per row the reasons ("column: why"), engine counter deltas."""

    values: list
    errors: list
    failed: list = field(default_factory=list)
    counters: dict = field(default_factory=lambda: dict.fromkeys(REPORTED, 0))

    def error_column(self) -> pa.Array:
        """``_ai_error``: NULL, or the reasons of the row joined by '; '."""
        return pa.array(["; ".join(e) if e else None for e in self.errors], pa.string())


def evaluate_batch(engine: Callable, columns, batch, need=None,
                   on_failure: Callable[[Exception], str] | None = None, timezone: str = "UTC") -> BatchValues:
    """The AI ``columns`` over the rows of ``batch`` (a RecordBatch or Table).

    ``engine()`` returns the engine; it is called only when a row needs the model.
    ``need`` (optional): per column, a list of booleans, the rows to compute.
    An engine call that raises propagates, unless ``on_failure`` is given: then
    each non-NULL row of that column gets ``on_failure(error)`` as its reason.
    Values are as the column's Arrow type takes them (:func:`decode_result`; ``timezone``:
    the Spark session's, for timestamps without an offset).
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
            vals[r], cut = decode_result(col, v, timezone)
            out.errors[r] += [f"{col.name}: {why}" for why in cut]  # values of the other fields are kept
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
        with metered(eng.stats, into=counters):
            return evaluate(eng, col.call, cols, errors=errs, where=lambda i: f"column {col.name!r}, row {i}"), errs
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


def with_columns(engine: Callable, columns, batches: Iterable[pa.RecordBatch],
                 timezone: str = "UTC") -> Iterator[pa.RecordBatch]:
    """Each row of ``batches`` with the AI ``columns`` and ``_ai_error`` appended (ArrowMapper's body).

    Batches are gathered by :func:`chunks` before evaluation; the output keeps every row, in order.
    ``engine`` as in :func:`evaluate_batch`; use :func:`with_columns_counted` to read the counters.
    """
    for table, _ in with_columns_counted(engine, columns, batches, timezone):
        yield from table.to_batches()


def with_columns_counted(engine: Callable, columns, batches, timezone: str = "UTC"):
    """(output table, :class:`BatchValues`) of each chunk of ``batches`` (see :func:`with_columns`)."""
    for table in chunks(batches):
        got = evaluate_batch(engine, columns, table, timezone=timezone)
        for col, vals in zip(columns, got.values):
            table = table.append_column(col.name, pa.array(vals, col.arrow_type))
        yield table.append_column("_ai_error", got.error_column()), got
