"""Fixtures of the Spark integration tests (the SparkSession is in tests/conftest.py):
tiny tables, a QuailSession, and a driver-side reference engine (see spark_fixtures.py)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the shared helpers module beside this file
from spark_fixtures import CATS, NOTES, TERMS, Naive  # noqa: E402


@pytest.fixture(scope="session")
def tables(spark):
    """Temp views ``notes`` and ``terms`` (2 partitions each) and ``cats``."""
    spark.createDataFrame(NOTES, "id int, body string, year int, kind string").repartition(2, "id") \
        .createOrReplaceTempView("notes")
    spark.createDataFrame(TERMS, "tid int, term string, kind string").createOrReplaceTempView("terms")
    spark.createDataFrame(CATS, "cid int, cat string").createOrReplaceTempView("cats")
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
