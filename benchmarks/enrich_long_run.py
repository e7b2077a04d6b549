"""A long enrichment holds: 200,000 short rows, a SIGKILL in the middle, a rerun that completes it.

    python benchmarks/enrich_long_run.py --rows 200000 --model tiny-llama-random

Three real ``python -m quail_spark.cli enrich`` processes (spark/local-cpu preset,
Parquet output, engine defaults: a 1 GiB KV pool per Python worker):
  A. the first half of the rows, committed;
  B. all rows (the second half is new), SIGKILLed (the whole process group) once
     half of its new rows are computed; the output must still be A's;
  C. the rerun, which computes the new rows and keeps A's.
Checked: one row per input key; the rows kept from A identical to A's; the values
of a random sample of keys (``--sample``) equal to values recomputed in this
process with the same engine settings (``gpu_worker.ai_calls.evaluate``, the
function every path calls; scores up to 1e-5), or, with ``--clean``, every row
equal to a fourth, uninterrupted run over all rows. The RSS of every Spark
Python worker and of the JVM is sampled from /proc (benchmarks/proc_rss.py)
while each run works; "flat" compares the workers' summed RSS in the last tenth
of a run's computing time (from its first computed row to its last sample) with
the first tenth. Results: benchmarks/results/enrich_long_run_<commit>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from proc_rss import Sampler, commit, load_average  # noqa: E402

COLUMNS = {"urgent": "ai_score('Is {0} urgent?', body)",
           "topic": "ai_classify(body, array('delivery', 'billing', 'praise'))"}
ITEMS = ("parcel", "invoice", "refund", "phone", "order", "courier", "receipt", "charger")
STATES = ("late", "damaged", "on time", "twice", "without a label", "to the wrong door")


def table(n: int) -> pa.Table:
    ids = list(range(n))
    body = [f"Ticket {i}: the {ITEMS[i % 8]} arrived {STATES[i % 6]} after {i % 13} days." for i in ids]
    return pa.table({"id": ids, "body": body})


def launch(spec: Path, name: str, progress: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYSPARK_PYTHON": sys.executable, "QUAIL_LOG_LEVEL": "WARNING"}
    return subprocess.Popen([sys.executable, "-m", "quail_spark.cli", "enrich", str(spec), "--progress-every", "30",
                             "--progress-dir", str(progress)], env=env, stdout=open(spec.parent / f"{name}.log", "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def watch(spec: Path, name: str, every: float, kill_at: int | None = None) -> dict:
    """Run one enrichment process, sampling RSS and progress; SIGKILL it at ``kill_at`` computed rows."""
    from quail_spark.enrich.progress import totals

    progress = spec.parent / f"{name}.progress"
    load_start, t0 = load_average(), time.time()
    proc = launch(spec, name, progress)
    sampler = Sampler(proc.pid, every)
    done_at: list[tuple[float, int]] = []
    killed = False
    while proc.poll() is None:
        sampler.sample()
        rows = int(totals(str(progress)).get("rows", 0))
        done_at.append((sampler.samples[-1]["t"], rows))
        if kill_at is not None and rows >= kill_at:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(every)
    rc = proc.wait()
    if not killed and rc != 0:
        raise SystemExit(f"run {name} failed (exit {rc}); see {spec.parent / f'{name}.log'}")
    out = {"name": name, "exit": rc, "killed": killed, "process_s": round(time.time() - t0, 1),
           "load_avg_start": load_start, "load_avg_end": load_average(),
           "rows_computed_seen": done_at[-1][1] if done_at else 0, **flatness(sampler, done_at)}
    summary = sampler.summary()
    out["rss"] = {k: v for k, v in summary.items() if k != "processes"}
    out["rss_processes"] = summary["processes"]
    out["rss_timeline"] = [{"t": r["t"], "load1": r["load1"], "rows": rows, "jvm_mib": round(r["jvm"] / 1024),
                            "workers_mib": round(sampler.worker_total(r) / 1024)}
                           for r, (_, rows) in zip(sampler.samples, done_at)]
    if not killed:
        report = Path(str(spec.parent / json.loads(spec.read_text())["output"]) + ".report.json")
        out["report"] = json.loads(report.read_text())
    return out


def flatness(sampler: Sampler, done_at: list) -> dict:
    """Workers' summed RSS, mean of the last tenth of the computing window over the mean of the first tenth."""
    start = next((t for t, rows in done_at if rows > 0), None)
    window = [r for r in sampler.samples if start is not None and r["t"] >= start and r["workers"]]
    if len(window) < 20:
        return {"rss_flat": None, "rss_window_samples": len(window)}
    tenth = max(1, len(window) // 10)
    first = sum(sampler.worker_total(r) for r in window[:tenth]) / tenth
    last = sum(sampler.worker_total(r) for r in window[-tenth:]) / tenth
    ratio = last / first
    return {"rss_window_samples": len(window), "rss_window_s": round(window[-1]["t"] - window[0]["t"], 1),
            "workers_rss_first_tenth_mib": round(first / 1024), "workers_rss_last_tenth_mib": round(last / 1024),
            "rss_last_over_first": round(ratio, 3), "rss_flat": ratio <= 1.2}


def output_rows(path: Path) -> dict:
    t = pq.read_table(path)
    ids = t["id"].to_pylist()
    if len(ids) != len(set(ids)):
        raise SystemExit(f"{path}: {len(ids) - len(set(ids))} keys appear more than once")
    return {r["id"]: r for r in t.to_pylist()}


def recompute(model: str, ids: list[int], inputs: pa.Table) -> dict:
    """Values of the spec's columns for ``ids``, computed here by the function every path calls."""
    from gpu_worker import Engine, EngineConfig
    from gpu_worker.ai_calls import evaluate
    from quail_spark.enrich.spec import parse_column

    eng = Engine(EngineConfig(model=model))
    body = inputs["body"].to_pylist()
    docs = [body[i] for i in ids]
    out = {i: {} for i in ids}
    for name, expr in COLUMNS.items():
        for i, v in zip(ids, evaluate(eng, parse_column(name, expr).call, [docs])):
            out[i][name] = v
    return out


def same(a, b) -> bool:
    return abs(a - b) <= 1e-5 if isinstance(a, float) and isinstance(b, float) else a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--model", default="tiny-llama-random")
    ap.add_argument("--sample", type=int, default=2000, help="keys whose values are recomputed here")
    ap.add_argument("--clean", action="store_true", help="also an uninterrupted run over all rows, compared row by row")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between RSS samples")
    ap.add_argument("--workdir", default="/tmp/quail-enrich-long-run")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    a = ap.parse_args()
    work, rev = Path(a.workdir), commit(REPO)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    full, half = table(a.rows), a.rows // 2
    base = {"key": "id", "columns": COLUMNS, "model": a.model, "device": "cpu", "output": "out.parquet"}
    spec = work / "spec.json"
    spec.write_text(json.dumps({**base, "input": "notes.parquet"}))
    result = {"benchmark": "enrich_long_run", "commit": rev, "rows": a.rows, "model": a.model,
              "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
              "command": "python benchmarks/enrich_long_run.py " + " ".join(sys.argv[1:]), "runs": []}

    pq.write_table(full.slice(0, half), work / "notes.parquet")
    result["runs"].append(run_a := watch(spec, "A_first_half", a.every))
    print(f"A: {half:,} rows committed in {run_a['process_s']} s", flush=True)
    before = output_rows(work / "out.parquet")

    pq.write_table(full, work / "notes.parquet")
    result["runs"].append(run_b := watch(spec, "B_killed", a.every, kill_at=(a.rows - half) // 2))
    after_kill = output_rows(work / "out.parquet")
    assert after_kill == before, "the killed run changed the committed output"
    print(f"B: SIGKILL after {run_b['rows_computed_seen']:,} computed rows; the output is still A's", flush=True)

    result["runs"].append(run_c := watch(spec, "C_rerun", a.every))
    got = output_rows(work / "out.parquet")
    assert sorted(got) == list(range(a.rows)), "a key is missing, doubled or extra"
    assert all(got[i] == before[i] for i in before), "a row kept from A changed"
    print(f"C: {run_c['report'].get('rows_enriched'):,} computed, {run_c['report'].get('rows_skipped'):,} kept; "
          f"{len(got):,} rows, one per key", flush=True)

    if a.clean:
        clean = work / "clean.json"
        clean.write_text(json.dumps({**base, "input": "notes.parquet", "output": "clean.parquet"}))
        result["runs"].append(watch(clean, "D_clean", a.every))
        want = output_rows(work / "clean.parquet")
        bad = [i for i in want if not all(same(got[i][c], want[i][c]) for c in [*COLUMNS, "_ai_error"])]
        result["compared"] = {"against": "an uninterrupted run over all rows", "rows": len(want), "differ": len(bad)}
    else:
        keys = sorted(random.Random(0).sample(range(a.rows), min(a.sample, a.rows)))
        want = recompute(a.model, keys, full)
        bad = [i for i in keys if not all(same(got[i][c], want[i][c]) for c in COLUMNS)]
        result["compared"] = {"against": "values recomputed in-process for a random sample of keys",
                              "rows": len(keys), "differ": len(bad)}
    print(f"values: {result['compared']}", flush=True)
    for r in result["runs"]:
        rep = r.get("report", {})
        print(f"{r['name']}: {rep.get('rows_enriched', r['rows_computed_seen']):,} rows, "
              f"{rep.get('rows_per_s', '-')} rows/s, {rep.get('tokens_per_s', '-')} tokens/s; worker RSS "
              f"{r.get('workers_rss_first_tenth_mib', '-')} -> {r.get('workers_rss_last_tenth_mib', '-')} MiB "
              f"(x{r.get('rss_last_over_first', '-')}); peak per worker {r['rss']['peak_per_worker_mib']} MiB, JVM "
              f"{r['rss']['peak_jvm_mib']} MiB; load {r['load_avg_start']} -> {r['load_avg_end']}", flush=True)
    out = Path(a.out) / f"enrich_long_run_{rev}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"-> {out}")
    if bad:
        raise SystemExit(f"{len(bad)} rows differ, e.g. key {bad[0]}: {got[bad[0]]} vs {want[bad[0]]}")


if __name__ == "__main__":
    main()
