"""Iceberg output through pyiceberg: executors write data files, the driver commits one snapshot.

``"output": "iceberg:<namespace>.<table>"``; the catalog is a pyiceberg SQL
catalog on SQLite beside the spec (``quail_catalog.db``, warehouse
``warehouse/``) unless the spec's ``"catalog"`` gives other pyiceberg catalog
properties (REST, Glue, Hive ... as pyiceberg supports them).

Each run's files go to ``<table location>/data/quail-<run>/`` (Spark's commit
protocol keeps only committed task attempts); the driver then replaces every
data file of the current snapshot with them in ONE overwrite snapshot. A run
killed before that commit leaves the table's current snapshot as it was; its
files are orphans that no snapshot references.

The rerun state (key, ``_ai_hash``, ``_ai_row``) lives in a second table ``<table>__ai_state``
in the same namespace, committed the same way AFTER the data snapshot; both
snapshots carry ``quail.run``. A run killed between the two commits leaves the
state older than the data: the next run sees the runs differ, ignores that
state and recomputes every row (a stale hash could match a value it was not
computed from; recomputing never gives a wrong value).
"""
from __future__ import annotations

from pathlib import Path

from quail_spark.enrich.guard import OutputBusy, usable_state, warn
from quail_spark.enrich.spec import Spec, SpecError

STATE_SUFFIX = "__ai_state"


class IcebergSink:
    def __init__(self, spec: Spec):
        from pyiceberg.catalog import load_catalog

        self.ident = spec.output.removeprefix("iceberg:")
        if self.ident.count(".") < 1:
            raise SpecError(f"output {spec.output!r}: expected 'iceberg:<namespace>.<table>'")
        props = dict(spec.catalog) or {
            "type": "sql", "uri": f"sqlite:///{spec.path('quail_catalog.db')}",
            "warehouse": Path(spec.path("warehouse")).as_uri()}
        if props.get("type") == "sql" and "warehouse" in props and "://" not in props["warehouse"]:
            props["warehouse"] = Path(spec.path(props["warehouse"])).as_uri()
        Path(spec.path("warehouse")).mkdir(parents=True, exist_ok=True) if not spec.catalog else None
        self.catalog = load_catalog(props.pop("name", "quail"), **props)
        self.state_ident = self.ident + STATE_SUFFIX
        self.report_path = spec.path(self.ident.replace(".", "_") + ".report.json")

    def describe(self) -> str:
        return f"iceberg table {self.ident}"

    def lock(self) -> None:
        """Iceberg's optimistic commit already refuses a concurrent change of the snapshot we read."""

    def release(self) -> None:
        """Nothing to release (see :meth:`lock`)."""

    def clean(self) -> None:
        """Files of killed runs are unreferenced; Iceberg's orphan-file removal deletes them."""

    def _table(self, ident: str):
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(ident)
        except NoSuchTableError:
            return None

    def previous(self, spark):
        t = self._table(self.ident)
        self._base = t.current_snapshot().snapshot_id if t is not None and t.current_snapshot() else None
        if t is None or self._base is None:
            return None
        files = [task.file.file_path for task in t.scan().plan_files()]
        return spark.read.parquet(*files) if files else None

    def previous_state(self, spark, key: str, warnings: list):
        """(key, _ai_hash) of the current rows, or None when missing, damaged or older than the data."""
        data, state = self._table(self.ident), self._table(self.state_ident)
        if data is None or state is None or not data.current_snapshot() or not state.current_snapshot():
            return None
        run = data.current_snapshot().summary.get("quail.run")
        if run is None or state.current_snapshot().summary.get("quail.run") != run:
            warn(warnings, f"stale rerun state {self.state_ident}: it was not committed with {self.ident}'s "
                           f"current rows (run {run}); every row is recomputed")
            return None
        try:
            files = [task.file.file_path for task in state.scan().plan_files()]
        except Exception as e:  # noqa: BLE001 - unreadable metadata only costs recomputation
            warn(warnings, f"damaged rerun state {self.state_ident}: {type(e).__name__}: {e}; "
                           "every row is recomputed")
            return None
        return usable_state(spark, key, files, self.state_ident, warnings) if files else None

    def _staging(self, ident: str, run_id: str, schema) -> str:
        t = self._table(ident)
        if t is None:
            self.catalog.create_namespace_if_not_exists(ident.rsplit(".", 1)[0])
            t = self.catalog.create_table(ident, schema=schema)
        return f"{t.location().rstrip('/')}/data/quail-{run_id}"

    def staging(self, run_id: str, schema=None) -> str:
        return self._staging(self.ident, run_id, schema)

    def state_staging(self, run_id: str, schema=None) -> str:
        self._state_staged = self._staging(self.state_ident, run_id, schema)
        return self._state_staged

    def commit(self, staged: str, run_id: str) -> None:
        """The data snapshot, then the state's (a kill in between only costs recomputation)."""
        t = self.catalog.load_table(self.ident)
        head = t.current_snapshot().snapshot_id if t.current_snapshot() else None
        if head != self._base:
            raise OutputBusy(f"{self.ident} changed while this run worked (snapshot {self._base} -> {head}); "
                               "nothing committed, run again")
        _replace_files(t, staged, run_id)  # (an ``_ai_hash`` column of tables written before the state table goes)
        _replace_files(self.catalog.load_table(self.state_ident), self._state_staged, run_id)


def _replace_files(t, staged: str, run_id: str) -> None:
    """One overwrite snapshot of ``t``: its files become the Parquet files Spark wrote to ``staged``."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from pyiceberg.table import TableProperties, _parquet_files_to_data_files

    fs, root = pafs.FileSystem.from_uri(staged)
    paths = sorted(i.path for i in fs.get_file_info(pafs.FileSelector(root))
                   if i.path.endswith(".parquet") and not Path(i.path).name.startswith(("_", ".")))
    uris = [staged.rstrip("/") + "/" + Path(p).name for p in paths]
    with t.transaction() as txn:
        if paths:
            _match_schema(txn, pq.read_schema(paths[0], filesystem=fs))
        # Spark's files carry no Iceberg field ids: columns are matched by name.
        txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                              txn.table_metadata.schema().name_mapping.model_dump_json()})
        old = [task.file for task in t.scan().plan_files()]
        with txn.update_snapshot(snapshot_properties={"quail.run": run_id}).overwrite() as ow:
            for f in old:
                ow.delete_data_file(f)
            for f in _parquet_files_to_data_files(txn.table_metadata, uris, t.io):
                ow.append_data_file(f)


def _match_schema(txn, arrow) -> None:
    """The table's columns become the staged files' (``arrow``), in their order: columns the run does not
    write are dropped, a column whose type changed (``ai_if`` to ``ai_score``) is dropped and added again
    (Iceberg promotes only int -> long and float -> double; every data file is replaced anyway)."""
    import pyarrow as pa

    def plain(t):  # Iceberg reads strings (and lists) back as large ones, inside structs too
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type)) for f in t])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(plain(t.value_type))
        return pa.string() if pa.types.is_large_string(t) else pa.binary() if pa.types.is_large_binary(t) else t

    have = txn.table_metadata.schema().as_arrow()
    gone = [f.name for f in have if f.name not in arrow.names or plain(f.type) != plain(arrow.field(f.name).type)]
    if gone:
        with txn.update_schema() as up:
            for name in gone:
                up.delete_column(name)
    with txn.update_schema() as up:
        up.union_by_name(arrow)
    with txn.update_schema() as up:
        for i, name in enumerate(arrow.names):
            up.move_first(name) if i == 0 else up.move_after(name, arrow.names[i - 1])
