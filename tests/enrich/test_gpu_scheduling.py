"""Stage-level GPU scheduling on a real standalone cluster (``local-cluster``: one worker, two cores,
two fake GPUs from a discovery script), in its own process and SparkContext.

The spec asks for device 'cuda', so only the AI stage requests one GPU per task; the engine runs
the tiny random model on the CPU (a test-only fault: helpers.faults_env) while each task still binds
the address Spark assigned. Every first task attempt raises (another injected fault): the retries give
the rows of a clean run, nothing doubled.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from itertools import combinations

import pyarrow.parquet as pq

from quail_spark.enrich import load_spec, run

from .helpers import assert_same_rows, faults_env, notes, rows, write_spec


def test_local_cluster_ai_tasks_each_bind_one_gpu_and_first_attempt_failures_change_nothing(spark, tmp_path):
    pq.write_table(notes(24), tmp_path / "notes.parquet")
    script = tmp_path / "gpus.sh"
    script.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    script.chmod(0o755)
    gpu = {"spark.worker.resource.gpu.amount": "2", "spark.worker.resource.gpu.discoveryScript": str(script),
           "spark.executor.resource.gpu.amount": "2", "spark.executor.resource.gpu.discoveryScript": str(script)}
    conf = {"spark.master": "local-cluster[1,2,1536]", "spark.executor.memory": "1200m",
            "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",  # as the driver's (tests/conftest.py)
            "spark.ui.enabled": "false", "spark.sql.execution.arrow.maxRecordsPerBatch": "4", **gpu}
    spec = write_spec(tmp_path, device="cuda")
    faults = faults_env(QUAIL_FAULT_ENGINE_DEVICE="cpu", QUAIL_FAULT_FAIL_FIRST_ATTEMPT="1",
                        QUAIL_FAULT_BATCH_DELAY_S="0.3")
    env = {**os.environ, **faults, "PYSPARK_PYTHON": sys.executable,
           # standalone workers read their resources from SPARK_WORKER_OPTS (the in-process workers
           # of local-cluster also from the application's conf above)
           "SPARK_WORKER_OPTS": " ".join(f"-D{k}={v}" for k, v in gpu.items() if k.startswith("spark.worker"))}
    progress = tmp_path / "progress"
    args = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
    proc = subprocess.run([sys.executable, "-m", "quail_spark.cli", "enrich", str(spec), "--spark-preset",
                           "spark/local-cpu", "--progress-dir", str(progress), *args],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # the default profile (scans, shuffles, the write of kept rows) asks for no GPU per task
    assert "gpu was specified but no corresponding task resource request" in proc.stderr

    records = {p.name: json.loads(p.read_text()) for p in sorted(progress.glob("p*-a*.json"))}
    tasks = list(records.values())
    assert tasks and all(name.endswith("-a1.json") for name, t in records.items() if t.get("rows")), \
        "every AI task with rows failed once and finished on its second attempt"
    assert all(len(t["gpu"]) == 1 for t in tasks), [t["gpu"] for t in tasks]
    overlaps = 0
    for a, b in combinations(tasks, 2):
        overlap = a["start"] < b["t"] and b["start"] < a["t"]
        assert not (overlap and a["gpu"] == b["gpu"]), (a, b)
        overlaps += overlap
    assert overlaps, "two AI tasks ran at the same time (two cores, two GPUs)"

    clean = run(load_spec(write_spec(tmp_path, "clean.json", output="clean.parquet")), spark, out=io.StringIO())
    assert clean["rows_enriched"] == sum(t.get("rows", 0) for t in tasks)
    assert_same_rows(rows(tmp_path / "out.parquet"), rows(tmp_path / "clean.parquet"))
