"""The ``quail-spark`` command.

    quail-spark enrich SPEC.json [--fail-on-error] [--spark-preset spark/local-cpu] [--conf K=V ...]

Outside spark-submit the command starts its own SparkSession from a preset
(default ``spark/local-cpu``) plus ``--conf``; under spark-submit
(``jobs/enrich.py``) it uses the session spark-submit configured.
Exit status: 0 done, 1 rows failed under --fail-on-error (nothing committed),
2 a bad spec or input.
"""
from __future__ import annotations

import argparse
import os
import sys


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quail-spark", description="AI-SQL on Apache Spark")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("enrich", help="add AI columns to a table's rows (incremental, atomic)")
    e.add_argument("spec", help="SPEC.json or SPEC.yaml (see README, 'Enrichment jobs')")
    e.add_argument("--fail-on-error", action="store_true",
                   help="rows that cannot be scored fail the run (nothing is committed)")
    e.add_argument("--spark-preset", default=None,
                   help="conf/spark preset when this command starts Spark (default spark/local-cpu)")
    e.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    e.add_argument("--progress-every", type=float, default=10.0, metavar="S",
                   help="seconds between progress lines (default 10)")
    e.add_argument("--progress-dir", default=None, help="keep the executors' progress records here")
    from quail_spark import eval_command

    eval_command.add_parser(sub)  # quail-spark eval SPEC
    return p


def spark_session(args):
    """spark-submit's session, or one built from the preset and --conf."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from pyspark.sql import SparkSession

    from quail_spark.presets import load_preset

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    preset = args.spark_preset or (None if under_submit else "spark/local-cpu")
    conf = load_preset(preset) if preset else {}
    for kv in args.conf:
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"--conf expects KEY=VALUE, got {kv!r}")
        conf[k] = v
    builder = SparkSession.builder.appName("quail-enrich")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def enrich(args) -> int:
    from quail_spark.enrich import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
    except (SpecError, OSError) as e:
        print(f"quail-spark enrich: {e}", file=sys.stderr)
        return 2
    from quail_spark.enrich.job import EnrichFailed, run

    spark = spark_session(args)
    try:
        run(spec, spark, fail_on_error=args.fail_on_error, progress_every=args.progress_every,
            progress_dir=args.progress_dir)
    except SpecError as e:
        print(f"quail-spark enrich: {e}", file=sys.stderr)
        return 2
    except EnrichFailed as e:
        print(f"quail-spark enrich: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command == "enrich":
        return enrich(args)
    if args.command == "eval":
        return args.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
