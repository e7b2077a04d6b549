"""Iceberg: a damaged state table (a data file added twice, deleted, bytes changed, garbage) is reported
naming it, every row is recomputed, the table keeps one row per key with an uninterrupted run's values,
and the next run is clean."""
from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest

from .helpers import FIELDS, assert_same_rows, enrich, notes, write_spec
from .test_damaged_state import COLS, corrupt

pyiceberg = pytest.importorskip("pyiceberg")


def table_rows(cat) -> list:
    t = cat.load_table("ai.notes").scan().to_arrow()
    assert t.column_names == FIELDS, t.column_names
    return sorted(tuple(r[f] for f in FIELDS) for r in t.to_pylist())


def test_a_damaged_iceberg_state_table_is_reported_and_recomputed(spark, tmp_path):
    from pyiceberg.catalog import load_catalog

    pq.write_table(notes(14), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path, output="iceberg:ai.notes", columns=COLS)
    n = enrich(spark, spec)["rows_read"]
    cat = load_catalog("quail", type="sql", uri=f"sqlite:///{tmp_path / 'quail_catalog.db'}",
                       warehouse=(tmp_path / "warehouse").as_uri())
    want = table_rows(cat)

    def state_file() -> str:
        state = cat.load_table("ai.notes__ai_state")
        return next(t.file.file_path for t in state.scan().plan_files() if t.file.record_count)

    def damaged_run(what: str) -> None:
        r = enrich(spark, spec)
        assert any(what in w for w in r["warnings"]), r["warnings"]
        assert (r["rows_skipped"], r["rows_enriched"] + r["rows_errored"]) == (0, n)
        got = table_rows(cat)
        assert len({x[0] for x in got}) == len(got) == n
        assert_same_rows(got, want)

    # the same data file added to the state table a second time (in a snapshot of the same run)
    run = cat.load_table("ai.notes").current_snapshot().summary.get("quail.run")
    cat.load_table("ai.notes__ai_state").add_files([state_file()], snapshot_properties={"quail.run": run},
                                                   check_duplicate_files=False)
    damaged_run("duplicated key id=")

    for how in ("deleted", "bytes changed", "garbage"):
        path = Path(urlparse(state_file()).path)
        if how == "deleted":
            os.remove(path)
        elif how == "bytes changed":
            corrupt(path)
        else:
            path.write_bytes(b"not parquet at all")
        damaged_run("unreadable file")
        assert any(path.name in w for w in enrich_warnings_of(tmp_path)), how

    again = enrich(spark, spec)
    assert (again["rows_skipped"], again["warnings"]) == (n, [])
    assert_same_rows(table_rows(cat), want)


def enrich_warnings_of(folder: Path) -> list:
    """The warnings of the last run, from its JSON report."""
    return json.loads((folder / "ai_notes.report.json").read_text())["warnings"]
