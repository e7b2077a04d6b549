"""Explain's estimate on a Spark driver without a GPU against the wall a GPU measured for the same work.

A cluster's driver plans on the CPU: it prices a query with the rates the executors' engine measured on
its GPU (gpu_worker/rates.py). This script is that driver. It reads a ``public_bench.py`` results file
(sections WORKLOADS and BIO2: the GPU's measured rates, the workloads' sizes and walls), writes the same
texts (public_bench's generators and seeds, the tokenizer the GPU run used) as Parquet tables, plans
the workloads as SQL in a local Spark session with ``qwen3-4b-random`` installed for 'cuda' and the
GPU's rates, and puts ``estimate()``'s tokens and seconds (what ``explain`` prints) beside the GPU's:

    FILTER  SELECT id FROM docs WHERE ai_if('Is {0} positive?', body)                 2,048 x 300 words
    JOIN    SELECT a.aid, p.pid FROM anchors a JOIN partners p ON ai_if(...)          8 x 5,000 words x 1,000
    BIO-2   the same join over the BIO2 section's anchors (4,500-5,500 words) x 1,127 partners

No statistics are computed (no ANALYZE): the planner reads its bounded sample of each file, as it would
for a user. The join's three GPU runs (three anchor sets) are compared with the first set's estimate.

    .venv/bin/python benchmarks/explain_vs_gpu.py benchmarks/results/<run>/planned_rates.json --tokenizer .cache/tok
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from public_bench import Words  # noqa: E402

QUERIES = {
    "FILTER": "SELECT id FROM docs WHERE ai_if('Is {0} positive?', body)",
    "JOIN": "SELECT a.aid, p.pid FROM anchors a JOIN partners p "
            "ON ai_if('Does {0} report the adverse reaction named in {1}?', a.body, p.term)",
    "BIO-2": "SELECT a.aid, p.pid FROM bio2_anchors a JOIN bio2_partners p "
             "ON ai_if('Does {0} report the adverse reaction named in {1}?', a.body, p.term)",
}


def texts(tokenizer, sizes: dict) -> dict:
    """The tables of the workloads: public_bench's texts, drawn in its order from its seeds."""
    w = Words(tokenizer, 11)
    docs = w.texts(sizes["filter_docs"], sizes["doc_words"])
    w.texts(sizes["chain_docs"], sizes["doc_words"])  # CHAIN's documents come between
    partners = w.partners(sizes["join_partners"])
    anchors = w.texts(sizes["join_anchors"], sizes["anchor_words"])  # JOIN run 1's anchors
    b = Words(tokenizer, 41)
    b_anchors = b.texts(sizes["bio2_anchors"], lambda: int(b.rng.integers(4500, 5501)))
    b_partners = b.partners(sizes["bio2_partners"])

    def table(key, col, values):
        return pa.table({key: pa.array(range(len(values)), pa.int64()), col: pa.array(values, pa.string())})

    return {"docs": table("id", "body", docs), "anchors": table("aid", "body", anchors),
            "partners": table("pid", "term", partners), "bio2_anchors": table("aid", "body", b_anchors),
            "bio2_partners": table("pid", "term", b_partners)}


def gpu_figures(res: dict) -> dict:
    """name -> (requested tokens, fresh tokens, [walls]) of the GPU run."""
    wl = res["workloads"]
    joins = [wl[k] for k in sorted(wl) if k.startswith("JOIN run")]
    bio = res["bio2_text"]
    return {"FILTER": (wl["FILTER"]["requested_tokens"], wl["FILTER"]["fresh_tokens"], [wl["FILTER"]["wall_s"]]),
            "JOIN": (joins[0]["requested_tokens"], joins[0]["fresh_tokens"], [j["wall_s"] for j in joins]),
            "BIO-2": (bio["requested_tokens"], bio["fresh_tokens"], [bio["wall_s"]])}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a public_bench.py results file with the WORKLOADS and BIO2 sections")
    ap.add_argument("--tokenizer", required=True, help="the tokenizer folder the GPU run used")
    ap.add_argument("--out", help="write the comparison here (default: explain_vs_gpu.json beside the results)")
    args = ap.parse_args(argv)
    res = json.loads(Path(args.results).read_text())
    from transformers import AutoTokenizer

    from pyspark.sql import SparkSession

    import quail_spark
    from quail_spark.estimates import estimate

    tables = texts(AutoTokenizer.from_pretrained(args.tokenizer), res["sizes"])
    builder = SparkSession.builder.master("local[2]").appName("explain-vs-gpu").config("spark.ui.enabled", "false") \
        .config("spark.task.cpus", "2")  # one task at a time, as the one-GPU preset runs: the GPU run is one engine
    for k, v in quail_spark.spark_conf().items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    out = {"gpu_results": args.results, "gpu_commit": res["commit"], "gpu_device": res["device"],
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).resolve().parents[1]).stdout.strip(),
           "rates": {k: res["rates"][k] for k in ("rate", "attn_rate")}, "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, t in tables.items():
            pq.write_table(t, f"{tmp}/{name}.parquet")
            spark.read.parquet(f"{tmp}/{name}.parquet").createOrReplaceTempView(name)
        quail_spark.install(spark, model=res["model"], device="cuda", tokenizer=args.tokenizer)
        # the rates the GPU's engine measured, as the driver reads them from the executors' first report
        spark.conf.set("spark.quail.model.rate", f"{res['rates']['rate']:g}")
        spark.conf.set("spark.quail.model.attn_rate", f"{res['rates']['attn_rate']:g}")
        spark.conf.set("spark.quail.model.rate_source", "measured")
        for name, (req, fresh, walls) in gpu_figures(res).items():
            est = estimate(spark.sql(QUERIES[name]))
            out["workloads"][name] = {
                "sql": QUERIES[name], "estimated_requested_tokens": est["requested_tokens"],
                "estimated_fresh_tokens": est["fresh_tokens"], "estimated_s": est["seconds"],
                "gpu_requested_tokens": req, "gpu_fresh_tokens": fresh, "gpu_walls_s": walls,
                "requested_ratio": est["requested_tokens"] / req, "fresh_ratio": est["fresh_tokens"] / fresh,
                "seconds_over_wall": [est["seconds"] / w for w in walls]}
            w = out["workloads"][name]
            print(f"{name:7s} estimate {est['seconds']:.2f} s vs GPU {', '.join(f'{x:.2f}' for x in walls)} s "
                  f"({', '.join(f'{r:.2f}x' for r in w['seconds_over_wall'])}); requested tokens "
                  f"{w['requested_ratio']:.2f}x, fresh {w['fresh_ratio']:.2f}x of the GPU run's", flush=True)
    spark.stop()
    dest = Path(args.out) if args.out else Path(args.results).with_name("explain_vs_gpu.json")
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
