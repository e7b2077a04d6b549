"""`quail-spark enrich` over N short rows on local Spark: an uninterrupted run, then a first run over
half the rows, a run SIGKILLed inside its AI stage and the rerun; checks that the last output has
exactly the rows of the uninterrupted one and prints rows/s and tokens/s.

    python benchmarks/enrich_rows.py --rows 20000 --model tiny-llama-random

Every run is a real ``python -m quail_spark.cli enrich`` process with the spark/local-cpu preset.
Scores are compared up to float rounding (1e-5): batch composition changes their last bits.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
COLUMNS = {"complaint": "ai_if('Is {0} a complaint?', body)",
           "label": "ai_classify(body, array('bug', 'praise', 'question'))"}
FIELDS = ["id", "complaint", "label", "_ai_error", "_ai_hash"]


def table(n: int, version: int) -> pa.Table:
    ids = list(range(n))
    body = [f"Order {i}: the parcel came {i % 9} days late{' again' if version and i % 10 == 0 else ''}."
            for i in ids]
    return pa.table({"id": ids, "body": body})


def cli(spec: Path, log: Path, *args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYSPARK_PYTHON": sys.executable, "QUAIL_LOG_LEVEL": "WARNING"}
    return subprocess.Popen([sys.executable, "-m", "quail_spark.cli", "enrich", str(spec), "--progress-every", "15",
                             *args], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def run(spec: Path, name: str) -> dict:
    t0 = time.time()
    rc = cli(spec, spec.parent / f"{name}.log").wait()
    if rc:
        raise SystemExit(f"{name} failed ({rc}); see {spec.parent / f'{name}.log'}")
    out = json.loads(Path(str(spec.parent / json.loads(spec.read_text())["output"]) + ".report.json").read_text())
    out["process_s"] = round(time.time() - t0, 1)
    return out


def rows(path: Path) -> list:
    return sorted(tuple(r[f] for f in FIELDS) for r in pq.read_table(path).select(FIELDS).to_pylist())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--model", default="tiny-llama-random")
    ap.add_argument("--workdir", default="/tmp/quail-enrich-bench")
    a = ap.parse_args()
    work = Path(a.workdir)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    pq.write_table(table(a.rows, 1), work / "final.parquet")
    base = {"key": "id", "columns": COLUMNS, "model": a.model, "device": "cpu"}
    clean_spec, spec = work / "clean.json", work / "spec.json"
    clean_spec.write_text(json.dumps({**base, "input": "final.parquet", "output": "clean.parquet"}))
    spec.write_text(json.dumps({**base, "input": "notes.parquet", "output": "out.parquet"}))

    clean = run(clean_spec, "clean")
    print(f"uninterrupted: {clean['rows_enriched']:,} rows in {clean['ai_wall_s']:.1f} s of AI stage "
          f"({clean['rows_per_s']:,.0f} rows/s, {clean['tokens_per_s']:,.0f} requested tokens/s, "
          f"{clean['fresh_tokens']:,} fresh of {clean['requested_tokens']:,} tokens), "
          f"{clean['wall_s']:.1f} s run, {clean['process_s']:.1f} s process", flush=True)

    pq.write_table(table(a.rows // 2, 0), work / "notes.parquet")
    first = run(spec, "first")
    print(f"first run: {first['rows_enriched']:,} rows, {first['wall_s']:.1f} s", flush=True)
    before, link = pq.read_table(work / "out.parquet"), os.readlink(work / "out.parquet")

    pq.write_table(table(a.rows, 1), work / "notes.parquet")
    progress = work / "progress"
    proc = cli(spec, work / "killed.log", "--progress-dir", str(progress))
    sys.path.insert(0, str(REPO))
    from quail_spark.enrich.progress import totals

    while proc.poll() is None and totals(str(progress)).get("rows", 0) < a.rows // 10:
        time.sleep(0.5)
    done = totals(str(progress)).get("rows", 0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert os.readlink(work / "out.parquet") == link and pq.read_table(work / "out.parquet").equals(before), \
        "the killed run changed the output"
    print(f"killed run: SIGKILL after {done:,} rows computed; the previous output is unchanged", flush=True)

    rerun = run(spec, "rerun")
    print(f"rerun: {rerun['rows_enriched']:,} computed, {rerun['rows_skipped']:,} kept, {rerun['wall_s']:.1f} s",
          flush=True)
    got, want = rows(work / "out.parquet"), rows(work / "clean.parquet")
    assert [r[0] for r in got] == [r[0] for r in want] and len(got) == a.rows, "a row is missing or doubled"
    assert got == want, "values differ from the uninterrupted run"
    print(f"rerun output == uninterrupted output: {len(got):,} rows, none missing or doubled")
    print(json.dumps({"model": a.model, "rows": a.rows, "clean": clean, "rerun": rerun}, indent=1))


if __name__ == "__main__":
    main()
