"""Memory of local Spark on the CPU at default settings: peak RSS of every Python worker and of the JVM.

    python benchmarks/cpu_memory.py                      # local[4], SmolLM2, 1 GiB KV pool per worker

Each Spark Python worker loads its own engine: the model and a 1 GiB KV pool where memory allows
(gpu_worker/runtime.py, CPU_POOL_BYTES). The workload is enough distinct documents
that every worker's pool fills and evicts (its fresh tokens exceed the pool's
slots; checked from the per-worker metrics files). A sampler thread reads VmRSS /
VmHWM of the JVM and of every Python worker from /proc (benchmarks/proc_rss.py).
Results: benchmarks/results/cpu_memory_<commit>.json. Refuses to start with less
than --min-available-gib of memory available (the machine may be shared).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from proc_rss import Sampler, commit, load_average, mem_available_gib  # noqa: E402

QUESTION = "Is {0} about sport?"
WORDS = ("river market engine letter window garden coffee signal winter planet doctor silver "
         "travel budget museum forest lesson camera bridge harbor pencil ticket orange castle "
         "rocket violin saddle marble lantern meadow canyon feather thunder compass velvet").split()


def documents(n: int, words: int, seed: int = 0) -> list[tuple[int, str]]:
    """``n`` distinct documents of ``words`` random words (no shared prefix beyond 'Record')."""
    rng = random.Random(seed)
    return [(i, f"Record {i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) + ".") for i in range(n)]


def pool_slots(model: str) -> tuple[int, int]:
    """(slots, bytes per slot) of the default CPU pool of ``model`` in float32 (as `Runtime.size_pool`)."""
    import torch

    from gpu_worker import weights
    from gpu_worker.runner import KVCache
    from gpu_worker.runtime import CPU_POOL_BYTES

    per_slot = KVCache.bytes_per_slot(weights.resolve(model).config, torch.float32)
    return CPU_POOL_BYTES // per_slot // 16 * 16, per_slot  # the default's ceiling: enough to fill it


def per_worker_fresh(metrics_dir: str) -> dict[int, int]:
    """Fresh tokens computed by each Python worker (its metrics file is named by its pid)."""
    out: dict[int, int] = {}
    for f in Path(metrics_dir).glob("*.jsonl"):
        pid = int(f.name.split("-", 1)[0])
        for line in f.read_text().splitlines():
            out[pid] = out.get(pid, 0) + json.loads(line).get("fresh_tokens", 0)
    return out


def session(master: str):
    import quail_spark
    from pyspark.sql import SparkSession
    from quail_spark.presets import load_preset

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    builder = SparkSession.builder
    for k, v in {**load_preset("spark/local-cpu"), **quail_spark.spark_conf(), "spark.master": master,
                 "spark.ui.showConsoleProgress": "false"}.items():
        if not k.startswith("_"):
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quail_spark.install(spark)  # the defaults: smollm2-135m on the CPU, default engine settings
    return spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="local[4]")
    ap.add_argument("--docs", type=int, default=1600)
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--min-available-gib", type=float, default=12.0)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    a = ap.parse_args()
    avail = mem_available_gib()
    if avail < a.min_available_gib:
        raise SystemExit(f"{avail:.1f} GiB available, below --min-available-gib {a.min_available_gib}: not started")
    import quail_spark

    load_before, rev = load_average(), commit(REPO)
    sampler = Sampler(os.getpid(), a.every)
    sampler.start()
    t0 = time.time()
    spark = session(a.master)
    docs = spark.createDataFrame(documents(a.docs, a.words), "id int, body string").repartition(a.partitions)
    docs.createOrReplaceTempView("docs")
    before = quail_spark.metrics(spark)
    t1 = time.time()
    passed = spark.sql(f"SELECT count(*) AS n FROM docs WHERE ai_if('{QUESTION}', body)").collect()[0]["n"]
    query_s = time.time() - t1
    after = quail_spark.metrics(spark)
    fresh = per_worker_fresh(spark.conf.get("spark.quail.metrics.session_dir"))
    sampler.stop()
    spark.stop()
    load_after = load_average()

    slots, per_slot = pool_slots("smollm2-135m")
    summary = sampler.summary()
    workers = {pid: p for pid, p in summary["processes"].items() if p["role"] == "python_worker"}
    for pid, p in workers.items():
        p["fresh_tokens"] = fresh.get(int(pid), 0)
        p["pool_filled"] = p["fresh_tokens"] > slots
    result = {
        "benchmark": "cpu_memory", "commit": rev, "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "command": "python benchmarks/cpu_memory.py " + " ".join(sys.argv[1:]),
        "master": a.master, "model": "smollm2-135m", "kv_pool_slots_per_worker": slots,
        "kv_pool_gib_per_worker": round(slots * per_slot / 2**30, 3),
        "docs": a.docs, "words_per_doc": a.words, "partitions": a.partitions, "rows_passed": passed,
        "requested_tokens": after["requested_tokens"] - before["requested_tokens"],
        "fresh_tokens": after["fresh_tokens"] - before["fresh_tokens"],
        "query_s": round(query_s, 1), "wall_s": round(time.time() - t0, 1),
        "mem_available_gib_before": round(avail, 1), "load_avg_before": load_before, "load_avg_after": load_after,
        **summary,
        "timeline": [{"t": r["t"], "load1": r["load1"], "driver_mib": round(r["root"] / 1024),
                      "jvm_mib": round(r["jvm"] / 1024),
                      "workers_mib": [round(v / 1024) for v in r["workers"].values()]} for r in sampler.samples],
    }
    out = Path(a.out) / f"cpu_memory_{rev}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"{a.master}, {a.docs:,} documents, {result['fresh_tokens']:,} fresh tokens in {query_s:.0f} s; "
          f"pool {slots:,} slots per worker; load average {load_before} -> {load_after}")
    for pid, p in sorted(workers.items()):
        print(f"  python worker {pid}: peak RSS {p['peak_mib']:,.0f} MiB, {p['fresh_tokens']:,} fresh tokens, "
              f"pool {'filled' if p['pool_filled'] else 'NOT filled'}")
    print(f"  driver {summary['peak_root_mib']:,.0f} MiB, JVM {summary['peak_jvm_mib']:,.0f} MiB; "
          f"workers together {summary['peak_workers_sum_mib']:,.0f} "
          f"MiB; all processes {summary['peak_total_mib']:,.0f} MiB (peak of the sampled sums) -> {out}")


if __name__ == "__main__":
    main()
