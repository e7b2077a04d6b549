"""What keeps an enrichment run safe: the writer lock, checks of what it reads and of what it commits.

- :func:`usable_state` reads a sink's rerun state (key, ``_ai_hash``, ``_ai_row``) with Spark
  and checks it: readable, one row per key, every ``_ai_hash`` a JSON map.
  Anything else is a damaged state: one warning line naming the path and the
  fault, and ``None`` (every row is recomputed). A damaged state never stops a
  run and never doubles a row.
- :func:`checked_previous` reads the previous output and its state and checks
  both before use: an output that cannot be read (a missing version, damaged
  pages) is reported and treated as absent; keys it holds more than once (an
  output written by an older version from a doubled state) are recomputed,
  never copied (:func:`unique_previous`); a state whose row prints
  (:func:`row_print`: the row's values and hashes as committed) differ from the
  output's rows is stale and ignored (every row is recomputed).
- :func:`check_output` compares the staged output with the input keys before a
  commit: exactly one row per input key, or :class:`OutputInvalid` naming a key
  and nothing is committed.
- :class:`WriterLock` is the writer lock of sinks on a file system (``flock``,
  released by the OS even on SIGKILL); a held lock raises :class:`OutputBusy`.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import sys
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quail_spark.errors import error_line


class OutputBusy(RuntimeError):
    """Another run holds (or changed) the output; nothing was committed."""


class OutputInvalid(RuntimeError):
    """The staged output is not one row per input key; nothing was committed."""


class EnrichFailed(RuntimeError):
    """``fail_on_error`` and some rows could not be scored: nothing was committed."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


def warn(warnings: list, line: str) -> None:
    """One warning line on stderr, kept for the report."""
    warnings.append(line)
    print(f"quail-spark enrich: warning: {line}", file=sys.stderr, flush=True)


def _fault(e: BaseException, files: list) -> str:
    """What is wrong, naming the file when the error names one of ``files``."""
    text = str(e)
    for f in files:
        name = os.path.basename(str(f).rstrip("/"))
        if name and name in text and not os.path.isdir(str(f).removeprefix("file://")):
            return f"unreadable file {f} ({type(e).__name__}: {error_line(e)[:200]})"
    return f"unreadable ({type(e).__name__}: {error_line(e)[:300]})"


def usable_state(spark, key: str, files: list, where: str, warnings: list) -> DataFrame | None:
    """The checked state read from ``files`` (Parquet files or folders), or None after a warning."""
    try:
        df = spark.read.parquet(*[str(f) for f in files])
        if not {key, "_ai_hash"} <= set(df.columns):
            warn(warnings, f"damaged rerun state {where}: columns {df.columns}, expected [{key!r}, '_ai_hash']; "
                           "every row is recomputed")
            return None
        k = column(key)
        bad_hash = F.from_json(F.col("_ai_hash"), "map<string,string>").isNull()
        bad = (df.groupBy(k).agg(F.count(F.lit(1)).alias("__n"), F.max(bad_hash.cast("int")).alias("__bad"))
               .where((F.col("__n") > 1) | k.isNull() | (F.col("__bad") == 1)).limit(1).collect())
    except Exception as e:  # noqa: BLE001 - any read failure of the state only costs recomputation
        warn(warnings, f"damaged rerun state {where}: {_fault(e, files)}; every row is recomputed")
        return None
    if bad:
        k_val, n, malformed = bad[0]
        what = (f"NULL key {key!r}" if k_val is None else f"duplicated key {key}={k_val!r} ({n} rows)"
                if n > 1 else f"malformed _ai_hash of key {key}={k_val!r}")
        warn(warnings, f"damaged rerun state {where}: {what}; every row is recomputed")
        return None
    return df.select(column(key), "_ai_hash", *([ROW_PRINT] if ROW_PRINT in df.columns else []))


def column(name: str):
    """The column ``name`` exactly as written (backquoted: a dot or a backquote in a name is no path)."""
    return F.col("`" + name.replace("`", "``") + "`")


ROW_PRINT = "_ai_row"


def row_print(df: DataFrame, key: str):
    """16 hex digits over an output row as committed: every column of ``df`` but the key and ``_ai_row``,
    by name (the AI columns, ``_ai_error`` and the state's ``_ai_hash``). The state keeps it per key."""
    names = sorted(c for c in df.columns if c not in (key, ROW_PRINT))
    return F.substring(F.sha2(F.to_json(F.struct(*[column(n) for n in names])), 256), 1, 16)


def checked_previous(spark, sink, key: str, warnings: list) -> tuple:
    """(previous rows, their state) read from ``sink`` and checked; either may be None (rows recomputed)."""
    where = sink.describe()

    def unreadable(e: Exception) -> tuple:  # an unreadable previous output only costs recomputation
        warn(warnings, f"previous output {where}: {_fault(e, [])}; every row is recomputed")
        return None, None

    try:
        prev = sink.previous(spark)
    except Exception as e:  # noqa: BLE001 - see unreadable
        return unreadable(e)
    prev = unique_previous(key, prev, where, warnings)
    if prev is None:
        return None, None
    n_warned = len(warnings)
    state = sink.previous_state(spark, key, warnings)
    if state is None and len(warnings) == n_warned and "_ai_hash" not in prev.columns:
        warn(warnings, f"previous output {where} has no rerun state; every row is recomputed")
    try:
        stale = stale_row(key, prev, state)
    except Exception as e:  # noqa: BLE001 - damaged pages show when every column is read
        return unreadable(e)
    if stale is not None:
        warn(warnings, f"stale rerun state of {where}: key {key}={stale!r} has a hash or values other than the "
                       "output's row; every row is recomputed")
        return prev, None
    return prev, state


def stale_row(key: str, prev: DataFrame, state: DataFrame | None):
    """Reads every column of ``prev`` (damaged pages raise here); a key whose state row print differs
    from its output row's, or None. A state without prints (written by an older version) is not compared."""
    if state is None or ROW_PRINT not in state.columns:  # only read every value
        prev.agg(F.bit_xor(F.xxhash64(*[column(c) for c in prev.columns]))).collect()
        return None
    rows = prev.drop("_ai_hash").join(state, key, "left")
    bad = F.col(ROW_PRINT).isNull() | (F.col(ROW_PRINT) != row_print(rows.drop(ROW_PRINT), key))
    found = rows.agg(F.count_if(bad), F.first(F.when(bad, column(key)), ignorenulls=True)).first()
    return found[1] if found[0] else None


def unique_previous(key: str, prev: DataFrame | None, where: str, warnings: list) -> DataFrame | None:
    """``prev`` without the keys it holds more than once (or NULL): those rows are recomputed."""
    if prev is None:
        return None
    k = column(key)
    try:
        dup = prev.groupBy(k).count().where((F.col("count") > 1) | k.isNull())
        first = dup.limit(1).collect()
    except Exception as e:  # noqa: BLE001 - an unreadable previous output only costs recomputation
        warn(warnings, f"previous output {where}: {_fault(e, [])}; every row is recomputed")
        return None
    if not first:
        return prev
    n_keys = dup.count()
    warn(warnings, f"previous output {where} holds key {key}={first[0][0]!r} {first[0][1]} times "
                   f"({n_keys} such key(s)); their rows are recomputed")
    return prev.where(k.isNotNull()).join(dup.select(k).where(k.isNotNull()), key, "left_anti")


def key_figures(df: DataFrame, key: str) -> tuple:
    """(rows, distinct keys, NULL keys, XOR of the keys' 64-bit hashes): one row per key, as a fingerprint."""
    k = column(key)
    return tuple(df.agg(F.count(F.lit(1)), F.count_distinct(k), F.count_if(k.isNull()),
                        F.bit_xor(F.xxhash64(k))).first())


def check_output(spark, key: str, inp: DataFrame, want: tuple, staged: str, where: str) -> None:
    """Exactly one staged row per input key (``want``: the input's :func:`key_figures`), or
    :class:`OutputInvalid` naming a key."""
    got = spark.read.parquet(staged)
    if key_figures(got, key) == tuple(want):
        return
    counts = got.groupBy(column(key)).agg(F.count(F.lit(1)).alias("__n"))
    bad = (inp.select(column(key)).withColumn("__in", F.lit(True)).join(counts, key, "full_outer")
           .where(F.col("__in").isNull() | F.col("__n").isNull() | (F.col("__n") != 1)).limit(1).collect())
    k_val, present, n = bad[0] if bad else (None, True, None)
    what = (f"{n} rows" if present else f"{n} row(s) but it is not an input key") if n else "no row"
    raise OutputInvalid(f"{where}: the output would hold {what} for {key}={k_val!r} (one row per input "
                        "key expected); nothing committed")


class WriterLock:
    """One writer per output: an exclusive ``flock`` on ``folder/.lock`` (released by the OS even on SIGKILL).

    A run that created ``root`` for the lock and committed nothing removes it on
    :meth:`release`, so a rejected first run leaves nothing behind.
    """

    def __init__(self, folder: Path, root: Path, output: str):
        self.folder, self.root, self.output = folder, root, output
        self._file, self._made = None, False

    def acquire(self) -> None:
        self._made = not self.root.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        f = open(self.folder / ".lock", "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise OutputBusy(f"another run is writing {self.output} (it holds the lock {self.folder / '.lock'})"
                             ) from None
        self._file = f

    def release(self, committed: bool) -> None:
        if self._made and not committed and self._file is not None:
            shutil.rmtree(self.root, ignore_errors=True)  # still locked: no other run is inside
        if self._file is not None:
            self._file.close()
            self._file = None
