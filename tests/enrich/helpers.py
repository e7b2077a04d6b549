"""Small tables, specs and comparisons shared by the enrichment tests."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = {"complaint": "ai_if('Is {0} a complaint?', body)",
           "label": "ai_classify(body, array('bug', 'praise'))",
           "p": "ai_score('Is {0} about a delivery?', body)"}
FIELDS = ["id", "complaint", "label", "p", "_ai_error"]  # exactly the output's columns
REPO = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).resolve().parent / "faults"  # sitecustomize.py: faults injected into a subprocess run


def faults_env(**faults: str) -> dict:
    """Environment of a subprocess run with test-only faults (faults/sitecustomize.py), e.g.
    ``faults_env(QUAIL_FAULT_BATCH_DELAY_S="0.5")``; the driver and its Spark Python workers see them."""
    return {"PYTHONPATH": os.pathsep.join([str(FAULTS), str(REPO), os.environ.get("PYTHONPATH", "")]), **faults}


def notes(n: int, start: int = 0, edit: dict | None = None) -> pa.Table:
    """``n`` short notes (every 7th body NULL), ids from ``start``; ``edit``: id -> new body."""
    ids = list(range(start, start + n))
    body = [None if i % 7 == 3 else f"Note {i}: the parcel came {i % 5} days late." for i in ids]
    for i, text in (edit or {}).items():
        body[ids.index(i)] = text
    return pa.table({"id": ids, "body": body, "lang": ["en" if i % 11 else "fr" for i in ids]})


def write_spec(folder: Path, name: str = "spec.json", **over) -> Path:
    spec = {"input": "notes.parquet", "output": "out.parquet", "key": "id", "columns": COLUMNS,
            "where": "lang = 'en'", "model": "tiny-llama-random", "device": "cpu", **over}
    path = folder / name
    path.write_text(json.dumps(spec))
    return path


def rows(path) -> list:
    """Rows of an output as sorted tuples (pyarrow reads the folder the symlink points to)."""
    t = pq.read_table(str(path))
    assert t.column_names == FIELDS, t.column_names  # the rerun state (_ai_state/) is skipped
    return sorted(tuple(r[f] for f in FIELDS) for r in t.select(FIELDS).to_pylist())


def hashes(path) -> dict:
    """key -> ``_ai_hash`` of a Parquet output's rerun state (in its version folder)."""
    t = pq.read_table(Path(path) / "_ai_state")
    assert t.column_names == ["id", "_ai_hash", "_ai_row"], t.column_names  # _ai_row: the row's print
    return dict(zip(t["id"].to_pylist(), t["_ai_hash"].to_pylist()))


def assert_same_rows(a: list, b: list, tol: float = 1e-5) -> None:
    """Equal rows; ai_score values up to float rounding (batch composition changes the last bits)."""
    assert [r[0] for r in a] == [r[0] for r in b], "keys differ (a row missing or doubled)"
    for x, y in zip(a, b):
        fx, fy = [v for i, v in enumerate(x) if i != 3], [v for i, v in enumerate(y) if i != 3]
        assert fx == fy, (x, y)
        assert (x[3] is None) == (y[3] is None) and (x[3] is None or abs(x[3] - y[3]) <= tol), (x, y)


def enrich(spark, spec_path, **kw) -> dict:
    """One in-process run on the shared session (the printed report is discarded)."""
    from quail_spark.enrich import load_spec, run

    return run(load_spec(spec_path), spark, out=io.StringIO(), **kw)


def cli(spec: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """``python -m quail_spark.cli enrich SPEC ...`` as its own process group; output in ``<spec>.log``."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYSPARK_PYTHON": sys.executable, **(env or {})}
    log = open(spec.parent / f"{spec.stem}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "quail_spark.cli", "enrich", str(spec), *args],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def rows_done(progress: Path) -> int:
    """Rows the AI tasks of a run have finished, from their progress records."""
    from quail_spark.enrich.progress import totals

    return int(totals(str(progress)).get("rows", 0))
