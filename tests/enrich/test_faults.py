"""Fault tests: a job SIGKILLed mid-run leaves the previous output exactly as it was, and the rerun
gives the rows of an uninterrupted run. The killed run is a real ``python -m quail_spark.cli enrich``
process group (driver, its JVM and Python workers)."""
from __future__ import annotations

import os
import re
import signal
import time

import pyarrow.parquet as pq

from quail_spark.enrich.progress import ProgressLine

from .helpers import assert_same_rows, cli, enrich, faults_env, notes, rows, rows_done, write_spec


def test_sigkill_mid_run_keeps_the_previous_output_and_the_rerun_completes_it(spark, tmp_path):
    pq.write_table(notes(30), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path)
    enrich(spark, spec)
    out = tmp_path / "out.parquet"
    link, before = os.readlink(out), pq.read_table(out)

    edits = {i: f"Edited note {i}: nobody answered my emails." for i in range(0, 30, 2)}
    pq.write_table(notes(80, edit=edits), tmp_path / "notes.parquet")
    progress = tmp_path / "progress"
    proc = cli(spec, "--progress-dir", str(progress), "--progress-every", "1",
               "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=4", "--conf", "spark.ui.enabled=false",
               env=faults_env(QUAIL_FAULT_BATCH_DELAY_S="0.5"))
    try:
        deadline = time.time() + 150
        while rows_done(progress) == 0 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, (spec.parent / "spec.log").read_text()[-3000:]
        assert 0 < rows_done(progress) < 60, "the kill must land inside the AI stage"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log = (tmp_path / "spec.log").read_text()
    assert "enrich: 0/" in log and "tokens/s" in log, "the driver's progress line"
    line = ProgressLine(None, str(progress), 58).line()  # what it prints once rows are done
    assert re.match(r"enrich: [1-9][\d,]*/58 rows \([\d.]+%\), [\d,]+ tokens/s, [\d,]+ rows/s, ~\d+ s left$",
                    line), line
    assert "INFO gpu_worker" in log, "executor logging"
    assert os.readlink(out) == link
    assert pq.read_table(out).equals(before)  # pyarrow reads the previous rows exactly
    partial = [p for p in (tmp_path / "out.parquet.versions").iterdir() if p.is_dir() and not (p / "_SUCCESS").exists()]
    assert partial, "the killed run had started writing a version folder"

    rerun = enrich(spark, spec)
    n_en = sum(1 for i in range(80) if i % 11)
    assert rerun["rows_read"] == n_en and rerun["rows_skipped"] == sum(1 for i in range(30) if i % 11 and i % 2)
    assert not any(p.exists() for p in partial), "the rerun removed the killed run's folder"
    clean = enrich(spark, write_spec(tmp_path, "clean.json", output="clean.parquet"))
    assert clean["rows_enriched"] == n_en
    assert_same_rows(rows(out), rows(tmp_path / "clean.parquet"))


def test_a_spec_with_an_unknown_key_is_rejected_by_the_command(tmp_path):
    spec = write_spec(tmp_path, modle="smollm2-135m")
    proc = cli(spec)
    assert proc.wait(timeout=120) == 2
    log = (tmp_path / "spec.log").read_text()
    assert "unknown spec key(s) ['modle']" in log
