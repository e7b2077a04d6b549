"""Delta output through the ``deltalake`` package: one new table version per run.

``"output": "delta:<path>"`` (a local or mounted path). Spark's executors write
the run's rows as Parquet to a staging folder inside the table,
``<path>/_quail_staging/<run>/data/`` (Delta readers and pyarrow skip ``_``
names; Spark's commit protocol keeps only committed task attempts). The driver
then streams those files through pyarrow into ONE
``write_deltalake(mode="overwrite")``: deltalake writes its data files, then
commits one log entry, the new version. The write starts from the version this
run read, so a version committed meanwhile by someone else fails it
(:class:`~quail_spark.enrich.guard.OutputBusy`) instead of being overwritten.
A run killed before the log entry leaves the previous version current; its
files are unreferenced (deltalake's ``vacuum`` removes them) and the next run
removes its staging folder.

The rerun state (key, ``_ai_hash``, ``_ai_row``) is a second Delta table
``<path>__ai_state``, written the same way AFTER the data version; both commits
carry ``quail.run`` in their commit info. A run killed between the two leaves
the state older than the data: the next run sees the runs differ, warns, and
recomputes every row (a stale hash could match a value it was not computed
from; recomputing never keeps a wrong value). One writer at a time: a lock file
in the staging folder.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from quail_spark.enrich.guard import OutputBusy, WriterLock, usable_state, warn
from quail_spark.enrich.spec import Spec, SpecError
from quail_spark.errors import error_line

STAGING = "_quail_staging"
STATE_SUFFIX = "__ai_state"


class DeltaSink:
    def __init__(self, spec: Spec):
        raw = spec.output.removeprefix("delta:")
        if not raw or ("://" in raw and not raw.startswith("file://")):
            raise SpecError(f"output {spec.output!r}: expected 'delta:<path>' with a local or mounted path")
        self.path = Path(spec.path(raw.removeprefix("file://")))
        self.state_path = Path(str(self.path) + STATE_SUFFIX)
        self.staging_root = self.path / STAGING
        self.report_path = str(self.path) + ".report.json"
        self._lock = WriterLock(self.staging_root, self.path, str(self.path))
        self._base, self._base_run, self._schemas = None, None, {}
        if self.path.exists() and not _is_table(self.path) and \
                any(p.name != STAGING for p in self.path.iterdir()):
            raise SpecError(f"output {spec.output!r}: {self.path} exists and is not a Delta table; move it "
                            "away or choose another output path")

    def describe(self) -> str:
        return f"delta table {self.path}"

    def lock(self) -> None:
        """Hold the writer lock until :meth:`release`."""
        self._lock.acquire()

    def release(self) -> None:
        """Let go of the lock; a first run that committed nothing leaves no folder behind."""
        self._lock.release(committed=_is_table(self.path))

    def clean(self) -> None:
        """Remove the staging folders of killed runs (the lock is held: no other run is writing)."""
        for p in self.staging_root.iterdir():
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)

    def previous(self, spark):
        """The current version's rows as a DataFrame, or None before the first commit."""
        from deltalake import DeltaTable

        if not _is_table(self.path):
            return None
        t = DeltaTable(str(self.path))
        self._base, self._base_run = t.version(), _run_of(t)
        files = t.file_uris()
        return spark.read.parquet(*files) if files else None

    def previous_state(self, spark, key: str, warnings: list):
        """(key, _ai_hash) of the current rows, or None when missing, damaged or older than the data."""
        from deltalake import DeltaTable

        if self._base is None or not _is_table(self.state_path):
            return None
        try:
            state = DeltaTable(str(self.state_path))
            run, state_run, files = self._base_run, _run_of(state), state.file_uris()
        except Exception as e:  # noqa: BLE001 - an unreadable log only costs recomputation
            warn(warnings, f"damaged rerun state {self.state_path}: {type(e).__name__}: {e}; "
                           "every row is recomputed")
            return None
        if run is None or state_run != run:
            warn(warnings, f"stale rerun state {self.state_path}: it was not committed with {self.path}'s "
                           f"current version (run {run}); every row is recomputed")
            return None
        return usable_state(spark, key, files, str(self.state_path), warnings) if files else None

    def staging(self, run_id: str, schema=None) -> str:
        staged = self.staging_root / run_id / "data"
        # Made now, not by Spark's write: with the rows cached Spark computes them before it sets its
        # job up, and the folder of a run killed meanwhile is removed by the next run's clean().
        staged.mkdir(parents=True)
        self._schemas[str(staged)] = schema
        return str(staged)

    def state_staging(self, run_id: str, schema=None) -> str:
        self._state_staged = str(self.staging_root / run_id / "state")
        self._schemas[self._state_staged] = schema
        return self._state_staged

    def commit(self, staged: str, run_id: str) -> None:
        """The data version, then the state's (a kill in between only costs recomputation)."""
        from deltalake import CommitProperties, DeltaTable, write_deltalake
        from deltalake.exceptions import CommitFailedError

        props = CommitProperties(custom_metadata={"quail.run": run_id})
        target = DeltaTable(str(self.path), version=self._base) if self._base is not None else str(self.path)
        try:
            write_deltalake(target, self._reader(staged), mode="overwrite", schema_mode="overwrite",
                            commit_properties=props)
        except CommitFailedError as e:
            raise OutputBusy(f"{self.path} changed while this run worked (it read version {self._base}): "
                             f"{error_line(e)}; nothing committed, run again") from None
        write_deltalake(str(self.state_path), self._reader(self._state_staged), mode="overwrite",
                        schema_mode="overwrite", commit_properties=props)
        shutil.rmtree(Path(staged).parent, ignore_errors=True)

    def _reader(self, staged: str):
        """The Parquet files Spark wrote to ``staged`` as one stream of record batches."""
        import pyarrow.dataset as ds

        return ds.dataset(staged, format="parquet", schema=self._schemas.get(staged)).scanner().to_reader()


def _is_table(path: Path) -> bool:
    from deltalake import DeltaTable

    return path.is_dir() and DeltaTable.is_deltatable(str(path))


def _run_of(table) -> str | None:
    """The ``quail.run`` of a table version's commit (None when another writer made it)."""
    hist = table.history(1)
    return hist[0].get("quail.run") if hist else None
