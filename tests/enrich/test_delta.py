"""Delta output: one table version per run, the rerun state in ``<path>__ai_state``, and SIGKILLs (in
the AI stage, and between the data and state commits) that leave the previous version readable and
a rerun equal to an uninterrupted run. Readers: deltalake and the pyarrow dataset it gives."""
from __future__ import annotations

import os
import signal
import time

import pyarrow.parquet as pq
import pytest


from .helpers import FIELDS, assert_same_rows, cli, enrich, faults_env, notes, rows_done, write_spec

deltalake = pytest.importorskip("deltalake")
COLS = {"complaint": "ai_if('Is {0} a complaint?', body)", "label": "ai_classify(body, array('bug', 'praise'))",
        "p": "ai_score('Is {0} about a delivery?', body)"}


def delta_rows(path) -> list:
    """The current version's rows, read by deltalake and by its pyarrow dataset (which must agree)."""
    t = deltalake.DeltaTable(str(path))
    table = t.to_pyarrow_table()
    assert table.column_names == FIELDS, table.column_names
    assert t.to_pyarrow_dataset().to_table().sort_by("id").equals(table.sort_by("id"))
    return sorted(tuple(r[f] for f in FIELDS) for r in table.to_pylist())


def version(path) -> int:
    return deltalake.DeltaTable(str(path)).version()


def test_delta_output_commits_one_version_per_run_and_survives_sigkills(spark, tmp_path):
    pq.write_table(notes(16), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path, output="delta:out", columns=COLS)
    out, state = tmp_path / "out", tmp_path / "out__ai_state"
    r1 = enrich(spark, spec)
    n = sum(1 for i in range(16) if i % 11)
    first = delta_rows(out)
    assert (r1["rows_enriched"], len(first), version(out), version(state)) == (n, n, 0, 0)
    assert r1["output"] == f"delta table {out}" and (tmp_path / "out.report.json").exists()
    assert deltalake.DeltaTable(str(state)).to_pyarrow_table().column_names == ["id", "_ai_hash", "_ai_row"]

    r2 = enrich(spark, spec)  # nothing changed: nothing recomputed, the same rows in a new version
    assert (r2["rows_skipped"], r2["rows_enriched"], r2["requested_tokens"]) == (n, 0, 0)
    assert delta_rows(out) == first and (version(out), version(state)) == (1, 1)

    # a run SIGKILLed in its AI stage: version 1 stays current and readable
    edits = {i: f"Edited note {i}: nobody answered my emails." for i in range(0, 16, 2)}
    pq.write_table(notes(40, edit=edits), tmp_path / "notes.parquet")
    progress = tmp_path / "progress"
    proc = cli(spec, "--progress-dir", str(progress), "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=4",
               env=faults_env(QUAIL_FAULT_BATCH_DELAY_S="0.5"))
    try:
        deadline = time.time() + 150
        while rows_done(progress) == 0 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "spec.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert delta_rows(out) == first and version(out) == 1
    assert any((out / "_quail_staging").iterdir()), "the killed run had staged files"

    # a run SIGKILLed between its data and state commits: the data version is complete, the state stale
    proc = cli(spec, env=faults_env(QUAIL_FAULT_KILL="between-commits"))
    assert proc.wait(timeout=300) == -signal.SIGKILL, (tmp_path / "spec.log").read_text()[-3000:]
    killed = delta_rows(out)
    assert (version(out), version(state)) == (2, 1) and len(killed) == sum(1 for i in range(40) if i % 11)

    r3 = enrich(spark, spec)
    assert any("stale rerun state" in w and str(state) in w for w in r3["warnings"]), r3["warnings"]
    assert r3["rows_enriched"] == len(killed) and (version(out), version(state)) == (3, 2)
    clean = enrich(spark, write_spec(tmp_path, "clean.json", output="delta:clean", columns=COLS))
    assert clean["rows_enriched"] == len(killed)
    assert_same_rows(delta_rows(out), delta_rows(tmp_path / "clean"))
    assert_same_rows(killed, delta_rows(tmp_path / "clean"))
    assert not [p for p in (out / "_quail_staging").iterdir() if p.is_dir()], "staging folders were removed"
    r4 = enrich(spark, spec)
    assert (r4["rows_skipped"], r4["warnings"]) == (len(killed), [])
