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
"""
from __future__ import annotations

from pathlib import Path

from quail_spark.enrich.spec import Spec, SpecError


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
        self.report_path = spec.path(self.ident.replace(".", "_") + ".report.json")

    def describe(self) -> str:
        return f"iceberg table {self.ident}"

    def lock(self) -> None:
        """Iceberg's optimistic commit already refuses a concurrent change of the snapshot we read."""

    def clean(self) -> None:
        """Files of killed runs are unreferenced; Iceberg's orphan-file removal deletes them."""

    def _table(self):
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.ident)
        except NoSuchTableError:
            return None

    def previous(self, spark):
        t = self._table()
        self._base = t.current_snapshot().snapshot_id if t is not None and t.current_snapshot() else None
        if t is None or self._base is None:
            return None
        files = [task.file.file_path for task in t.scan().plan_files()]
        return spark.read.parquet(*files) if files else None

    def staging(self, run_id: str, schema=None) -> str:
        t = self._table()
        if t is None:
            ns = self.ident.rsplit(".", 1)[0]
            self.catalog.create_namespace_if_not_exists(ns)
            t = self.catalog.create_table(self.ident, schema=schema)
        return f"{t.location().rstrip('/')}/data/quail-{run_id}"

    def commit(self, staged: str, run_id: str) -> None:
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq
        from pyiceberg.table import TableProperties, _parquet_files_to_data_files

        fs, root = pafs.FileSystem.from_uri(staged)
        paths = sorted(i.path for i in fs.get_file_info(pafs.FileSelector(root))
                       if i.path.endswith(".parquet") and not Path(i.path).name.startswith(("_", ".")))
        uris = [staged.rstrip("/") + "/" + Path(p).name for p in paths]
        t = self.catalog.load_table(self.ident)
        head = t.current_snapshot().snapshot_id if t.current_snapshot() else None
        if head != self._base:
            raise RuntimeError(f"{self.ident} changed while this run worked (snapshot {self._base} -> {head}); "
                               "nothing committed, run again")
        with t.transaction() as txn:
            if paths:
                txn.update_schema().union_by_name(pq.read_schema(paths[0], filesystem=fs)).commit()
            # Spark's files carry no Iceberg field ids: columns are matched by name.
            txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                  txn.table_metadata.schema().name_mapping.model_dump_json()})
            old = [task.file for task in t.scan().plan_files()]
            with txn.update_snapshot(snapshot_properties={"quail.run": run_id}).overwrite() as ow:
                for f in old:
                    ow.delete_data_file(f)
                for f in _parquet_files_to_data_files(txn.table_metadata, uris, t.io):
                    ow.append_data_file(f)
