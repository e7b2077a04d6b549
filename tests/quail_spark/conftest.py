"""Fixtures of the Spark integration tests: one local[2] SparkSession for the whole run,
tiny tables, a QuailSession, and a driver-side reference engine (see spark_fixtures.py)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the shared helpers module beside this file
from spark_fixtures import NOTES, TERMS, Naive  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("quail-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "4")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def tables(spark):
    """Temp views ``notes`` and ``terms`` (2 partitions each)."""
    spark.createDataFrame(NOTES, "id int, body string, year int, kind string").repartition(2, "id") \
        .createOrReplaceTempView("notes")
    spark.createDataFrame(TERMS, "tid int, term string, kind string").createOrReplaceTempView("terms")
    return {"notes": NOTES, "terms": TERMS}


@pytest.fixture(scope="session")
def qs(spark, tables):
    from quail_spark import QuailSession

    return QuailSession(spark, model="smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def naive():
    """Reference answers: every prompt computed from scratch by a driver-side engine."""
    from gpu_worker import Engine, EngineConfig

    return Naive(Engine(EngineConfig(model="smollm2-135m", device="cpu", prefix_cache=False)))
