"""Parquet output committed atomically: versioned data folders and one symlink swap.

Layout of an output ``out.parquet``::

    out.parquet -> out.parquet.versions/v000002-<run>   (a symlink; readers follow it)
    out.parquet.versions/v000001-<run>/part-*.parquet   (the previous version, kept for readers)
    out.parquet.versions/v000002-<run>/part-*.parquet
    out.parquet.versions/v000002-<run>/_ai_state/part-*.parquet  (key, _ai_hash: for reruns)
    out.parquet.versions/.lock                          (one writer at a time)
    out.parquet.report.json                             (the last run's report)

Spark's executors write a new version folder (its own commit protocol drops
failed task attempts, so no row is doubled); the driver then replaces the
symlink with ``os.replace`` (atomic on POSIX). A run killed before that leaves
the symlink, and so the previous rows, untouched; the next run removes its
partial folder. pyarrow and Spark read ``out.parquet`` as a plain folder and
skip ``_ai_state/`` (they ignore names starting with ``_``), so the rows and
the state they were computed with switch together in the one swap.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from quail_spark.enrich.guard import WriterLock, usable_state, warn
from quail_spark.enrich.spec import Spec, SpecError

STATE = "_ai_state"


class ParquetSink:
    def __init__(self, spec: Spec):
        path = spec.path(spec.output)
        if "://" in path and not path.startswith("file://"):
            raise SpecError(f"output {path!r}: Parquet output is committed by a symlink swap and needs a "
                            "local or mounted file system; use an Iceberg table ('iceberg:ns.table') for "
                            "object stores")
        self.link = Path(path.removeprefix("file://"))
        self.versions = Path(str(self.link) + ".versions")
        self.report_path = str(self.link) + ".report.json"
        self._lock = WriterLock(self.versions, self.versions, str(self.link))
        if self.link.exists() and not self.link.is_symlink():
            raise SpecError(f"output {path!r} exists and is not a quail-spark output (a symlink to a version "
                            "folder); move it away or choose another output path")

    def describe(self) -> str:
        return str(self.link)

    def lock(self) -> None:
        """Hold the writer lock until :meth:`release`."""
        self._lock.acquire()

    def release(self) -> None:
        """Let go of the lock; a first run that committed nothing leaves no folder behind."""
        self._lock.release(committed=self.current() is not None)

    def current(self) -> Path | None:
        return self.link.resolve() if self.link.is_symlink() else None

    def previous(self, spark):
        """The committed rows as a DataFrame, or None before the first commit."""
        cur = self.current()
        return spark.read.parquet(str(cur)) if cur is not None else None

    def previous_state(self, spark, key: str, warnings: list):
        """(key, _ai_hash) of the committed rows, or None when missing or damaged (all rows recomputed)."""
        cur = self.current()
        state = cur / STATE if cur is not None else None
        if state is None or not state.exists():
            return None
        if not (state / "_SUCCESS").exists():
            warn(warnings, f"damaged rerun state {state}: incomplete (no _SUCCESS); every row is recomputed")
            return None
        files = sorted(p for p in state.iterdir() if not p.name.startswith(("_", ".")))
        return usable_state(spark, key, files or [state], str(state), warnings)

    def clean(self) -> None:
        """Remove version folders other than the current one and the one before it (partial runs too)."""
        keep = {p.name for p in self._committed()[-2:]}
        for p in self.versions.iterdir():
            if p.is_dir() and p.name not in keep:
                shutil.rmtree(p, ignore_errors=True)
        for p in self.link.parent.glob(f".{self.link.name}.*.tmp"):  # a link made just before a kill
            p.unlink(missing_ok=True)

    def _committed(self) -> list:
        cur = self.current()
        done = sorted(p for p in self.versions.iterdir() if p.is_dir() and (p / "_SUCCESS").exists())
        return [p for p in done if cur is None or p.name <= cur.name]

    def staging(self, run_id: str, schema=None) -> str:
        cur = self.current()
        n = int(cur.name[1:7]) + 1 if cur is not None else 1
        self._staged = self.versions / f"v{n:06d}-{run_id}"
        # Made now, not by Spark's write: with the rows cached (see job.stage) Spark computes them
        # before it sets its job up, and a run killed meanwhile must leave a folder to clean.
        self._staged.mkdir()
        return str(self._staged)

    def state_staging(self, run_id: str, schema=None) -> str:
        """Where this run writes its state: inside its version folder, so it commits with the rows."""
        return str(self._staged / STATE)

    def commit(self, staged: str, run_id: str) -> None:
        """Point the output at ``staged`` in one atomic step."""
        staged_p = Path(staged)
        for done in (staged_p / "_SUCCESS", staged_p / STATE / "_SUCCESS"):
            if not done.exists():
                raise RuntimeError(f"{done.parent}: Spark did not finish writing it (no _SUCCESS); "
                                   "nothing committed")
        tmp = self.link.with_name(f".{self.link.name}.{run_id}.tmp")
        os.symlink(os.path.relpath(staged_p, self.link.parent), tmp)
        os.replace(tmp, self.link)
        _fsync_dir(self.link.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
