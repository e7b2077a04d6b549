"""Which rows a run must compute: content hashes against the previous output.

Every AI column ``c`` of a row has a hash of (the column's call, model and
value-changing engine settings; the row's referenced input values). Beside the
output (not in it) the sink keeps a state table of (key, ``_ai_hash``): JSON,
column -> hash of the value the output holds; a column whose value errored has
no entry; and ``_ai_row``, the print of the output row the hashes describe
(:func:`quail_spark.enrich.guard.row_print`), checked before the state is
used. A rerun recomputes a column of a row when its hash is new, changed or
missing, and keeps the previous value otherwise; rows that left the input (or
the ``where``) leave the output. No usable state (deleted, unreadable, stale)
means every row is recomputed. An output written before the state moved out
still has an ``_ai_hash`` column: its hashes are read once, and the next write
leaves the column out.

Before (previous output with its state, and input)::

    id  body        _ai_hash                 id  body
    1   "late!"     {"complaint": "9f.."}     1   "late!"        -> kept
    2   "thanks"    {"complaint": "c1.."}     2   "thanks, bye"  -> computed (content)
                                              3   "broken"       -> computed (new key)
"""
from __future__ import annotations

import functools

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quail_spark.enrich.guard import column
from quail_spark.enrich.spec import Spec, SpecError

TEXT_TYPES = ("string", "binary")


def check_input(spec: Spec, df: DataFrame) -> None:
    """The key and every referenced column exist; documents are text (string or binary)."""
    types = dict(df.dtypes)
    if spec.key not in types:
        raise SpecError(f"key {spec.key!r} is not an input column; the input has {sorted(types)}")
    for c in spec.columns:
        for x in c.inputs:
            if x not in types:
                raise SpecError(f"column {c.name!r}: {x!r} is not an input column; the input has {sorted(types)}")
            if types[x] not in TEXT_TYPES:
                raise SpecError(f"column {c.name!r}: input column {x!r} is {types[x]}; AI calls read text "
                                "(string or binary) columns")


def check_key(spec: Spec, df: DataFrame) -> None:
    """The key is never NULL and never repeats (else a rerun could not match rows)."""
    k = column(spec.key)
    dup = df.groupBy(k).count().where((F.col("count") > 1) | k.isNull()).limit(3).collect()
    if dup:
        shown = ", ".join(f"{r[0]!r} ({r[1]} rows)" for r in dup)
        raise SpecError(f"key {spec.key!r} must be unique and not NULL; found {shown}")


def row_hash(spec: Spec, i: int) -> F.Column:
    """Hash of column ``i``'s call and the row's values of its input columns (16 hex digits)."""
    col = spec.columns[i]
    parts = [F.lit(spec.column_hash(col))]
    for x in col.inputs:
        parts.append(F.coalesce(F.sha2(column(x).cast("binary"), 256), F.lit("NULL")))
    return F.substring(F.sha2(F.concat_ws("|", *parts), 256), 1, 16)


def hash_json(names, hashes) -> F.Column:
    """``_ai_hash`` as Spark writes it: compact JSON, keys sorted (as the tasks write it)."""
    pairs = sorted(zip(names, hashes), key=lambda p: p[0])
    args = [a for n, h in pairs for a in (F.lit(n), h)]
    return F.to_json(F.create_map(*args))


def with_hashes(spec: Spec, prev: DataFrame, state: DataFrame | None) -> DataFrame:
    """The previous rows with their ``_ai_hash`` from ``state`` (NULL, so recomputed, when it is unusable)."""
    if state is not None and {spec.key, "_ai_hash"} <= set(state.columns):
        return prev.drop("_ai_hash").join(state.select(column(spec.key), "_ai_hash"), spec.key, "left")
    if "_ai_hash" in prev.columns:  # an output written with the hashes as a column
        return prev
    return prev.withColumn("_ai_hash", F.lit(None).cast("string"))


def work_rows(spec: Spec, inp: DataFrame, prev: DataFrame | None, state: DataFrame | None = None) -> DataFrame:
    """Input rows with ``__h{i}`` (new hash), ``__o{i}`` (previous value), ``__n{i}`` (compute?) and
    ``__oerr`` (the previous reasons the kept values still have: :func:`kept_reasons`).

    ``prev`` holds the previous output rows and ``state`` their (key, ``_ai_hash``).
    """
    key = spec.key
    hashed = inp.select(column(key), *[column(x) for x in spec.referenced if x != key],
                        *[row_hash(spec, i).alias(f"__h{i}") for i in range(len(spec.columns))])
    if prev is None:
        work = hashed.select("*", *[F.lit(None).cast(c.result_type).alias(f"__o{i}")
                                    for i, c in enumerate(spec.columns)],
                             F.lit(None).cast("string").alias("__oerr"),
                             F.lit(None).cast("map<string,string>").alias("__oldh"))
    else:
        prev = with_hashes(spec, prev, state)
        ptypes = {f.name: f.dataType.simpleString() for f in prev.schema.fields}
        old = prev.select(column(key).alias("__k"), *[
            (column(c.name) if ptypes.get(c.name) == spark_type(c) else F.lit(None).cast(c.result_type))
            .alias(f"__o{i}") for i, c in enumerate(spec.columns)],
            kept_reasons(spec, prev).alias("__oerr"),
            F.from_json(F.col("_ai_hash"), "map<string,string>").alias("__oldh"))
        work = hashed.join(old, column(key) == F.col("__k"), "left").drop("__k")
    for i, c in enumerate(spec.columns):
        had = F.try_element_at(F.col("__oldh"), F.lit(c.name))
        work = work.withColumn(f"__n{i}", had.isNull() | (had != F.col(f"__h{i}")))
    return work.drop("__oldh")


def spark_type(col) -> str:
    """The simple string of an AI column's Spark type (``struct<name:string,age:int>``), as
    ``DataType.simpleString`` writes the type of a column read back (a value of another type is not kept)."""
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(col.result_type).simpleString()


def kept_reasons(spec: Spec, prev: DataFrame) -> F.Column:
    """The parts of the previous ``_ai_error`` a kept value still has: the fields of an ai_extract column
    cut at max_tokens (a value computed whole; the rows and columns that failed have no hash and are
    recomputed), of the spec's columns; NULL when none."""
    if "_ai_error" not in prev.columns:
        return F.lit(None).cast("string")
    starts = [f"{c.name}: field '" for c in spec.columns if c.call.kind == "extract"]
    parts = F.filter(F.split(F.col("_ai_error"), "; "),
                     lambda p: functools.reduce(lambda a, b: a | b, [p.startswith(x) for x in starts], F.lit(False)))
    return F.when(F.size(parts) > 0, F.array_join(parts, "; "))


def needs_any(spec: Spec) -> F.Column:
    cond = F.lit(False)
    for i in range(len(spec.columns)):
        cond = cond | F.col(f"__n{i}")
    return cond


def kept_rows(spec: Spec, work: DataFrame) -> DataFrame:
    """Rows with nothing to compute: the output's columns, then ``_ai_hash`` (the state's, split off on write)."""
    names = [c.name for c in spec.columns]
    return work.where(~needs_any(spec)).select(
        column(spec.key), *[F.col(f"__o{i}").alias(n) for i, n in enumerate(names)],
        F.col("__oerr").alias("_ai_error"),  # NULL, or fields cut at max_tokens in the kept values
        hash_json(names, [F.col(f"__h{i}") for i in range(len(names))]).alias("_ai_hash"))
