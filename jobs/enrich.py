"""Enrichment job: run one AI-SQL query over files and write the result.

    spark-submit jobs/enrich.py \\
        --table notes=data/notes.parquet --table terms=data/terms.jsonl \\
        --sql "SELECT id, ai_classify(body, array('bug', 'praise')) AS label FROM notes" \\
        --output out/labels.parquet --engine-preset engine/gpu

Each ``--table name=path`` becomes a temp view (parquet, json/jsonl or csv with a
header, by extension). ``--spark-preset`` applies a conf/spark preset when the
job builds its own SparkSession (under spark-submit, pass ``--conf`` there
instead). The job prints the explain output before running and the report after.
"""
from __future__ import annotations

import argparse
import json
import sys


def read_table(spark, path: str):
    lower = path.lower()
    if lower.endswith((".json", ".jsonl")):
        return spark.read.json(path)
    if lower.endswith(".csv"):
        return spark.read.option("header", "true").option("inferSchema", "true").csv(path)
    return spark.read.parquet(path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", action="append", default=[], metavar="NAME=PATH", required=True)
    p.add_argument("--sql", required=True, help="the AI-SQL query (or @file.sql)")
    p.add_argument("--output", required=True, help="output path (.parquet, .json or .csv)")
    p.add_argument("--spark-preset", default=None, help="e.g. spark/local-cpu")
    p.add_argument("--engine-preset", default="engine/cpu", help="e.g. engine/gpu")
    p.add_argument("--engine", default="{}", help='extra engine settings as JSON, e.g. {"token_budget": 4096}')
    return p.parse_args(argv)


def main(argv=None) -> None:
    from pyspark.sql import SparkSession

    from quail_spark import QuailSession
    from quail_spark.session import load_preset

    args = parse_args(argv if argv is not None else sys.argv[1:])
    builder = SparkSession.builder.appName("quail-enrich")
    for key, value in (load_preset(args.spark_preset) if args.spark_preset else {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for spec in args.table:
        name, _, path = spec.partition("=")
        if not name or not path:
            raise SystemExit(f"--table expects NAME=PATH, got {spec!r}")
        read_table(spark, path).createOrReplaceTempView(name)
    sql = open(args.sql[1:]).read() if args.sql.startswith("@") else args.sql
    engine = {**load_preset(args.engine_preset), **json.loads(args.engine)}
    qs = QuailSession(spark, **engine)
    q = qs.sql(sql)
    q.explain()
    out = q.to_df()
    fmt = "json" if args.output.endswith((".json", ".jsonl")) else "csv" if args.output.endswith(".csv") else "parquet"
    writer = out.write.mode("overwrite")
    (writer.option("header", "true") if fmt == "csv" else writer).format(fmt).save(args.output)
    print(q.summary())
    spark.stop()


if __name__ == "__main__":
    main()
