"""The SparkSession of a ``quail-spark`` command (enrich, eval): the active one, spark-submit's, or one
built from a conf/spark preset plus ``--conf KEY=VALUE`` settings."""
from __future__ import annotations

import os
import sys


def spark_session(args):
    """The active session, spark-submit's, or one built from the preset and --conf."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from pyspark.sql import SparkSession

    from quail_spark.enrich import SpecError
    from quail_spark.presets import load_preset

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    preset = args.spark_preset or (None if under_submit else "spark/local-cpu")
    conf = load_preset(preset) if preset else {}
    for kv in args.conf:
        k, sep, v = kv.partition("=")
        if not sep:
            raise SpecError(f"--conf expects KEY=VALUE, got {kv!r}")
        conf[k] = v
    builder = SparkSession.builder.appName("quail-enrich")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    # a failure is one line of ours (error_line): Spark's own task errors and their tracebacks are shown
    # with --debug, or under spark-submit, whose logs are the user's
    quiet = not under_submit and not getattr(args, "debug", False)
    spark.sparkContext.setLogLevel("FATAL" if quiet else "WARN")
    return spark
