"""Fixtures of the Spark integration tests (the SparkSession is in tests/conftest.py):
tiny tables, a QuailSession, and a driver-side reference engine (see spark_fixtures.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the shared helpers module beside this file
from spark_fixtures import CATS, NOTES, TERMS, Naive  # noqa: E402


@pytest.fixture(scope="session")
def tables(spark):
    """Temp views ``notes`` and ``terms`` (2 partitions each) and ``cats``.

    Each is a Python list checkpointed into the JVM's block store once (``localCheckpoint``: still a
    ``LogicalRDD``, as the golden plans show it): a query then scans rows the JVM holds instead of
    unpickling the list in a Python worker, about 0.2 s a scan on 2 cores."""
    spark.createDataFrame(NOTES, "id int, body string, year int, kind string").localCheckpoint() \
        .repartition(2, "id").createOrReplaceTempView("notes")
    spark.createDataFrame(TERMS, "tid int, term string, kind string").localCheckpoint() \
        .createOrReplaceTempView("terms")
    spark.createDataFrame(CATS, "cid int, cat string").localCheckpoint().createOrReplaceTempView("cats")
    return {"notes": NOTES, "terms": TERMS}


@pytest.fixture(scope="session")
def qs(spark, tables):
    """SmolLM2 on the session's AI functions (a module that installs another model installs SmolLM2 again after
    its tests: tests/conftest.py)."""
    from quail_spark import QuailSession

    return QuailSession(spark, model="smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def naive():
    """Reference answers: every prompt computed from scratch by a driver-side engine."""
    from gpu_worker import Engine, EngineConfig

    return Naive(Engine(EngineConfig(model="smollm2-135m", device="cpu", prefix_cache=False)))


@pytest.fixture(scope="session")
def connect_results():
    """A Spark Connect session in a subprocess (connect_queries.py: one server for test_connect.py's and
    test_arrow_mapper.py's queries), started on first use; calling the fixture's value waits for its
    JSON line: {"connect": ..., "mapper": ...} (a test is skipped there where pyspark[connect] is not installed)."""
    import connect_queries

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "SPARK_TESTING": "1"}  # an ephemeral gRPC port: no clash with another local server
    proc = subprocess.Popen([sys.executable, connect_queries.__file__], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    done: dict = {}

    def result() -> dict:
        pytest.importorskip("grpc", reason="Spark Connect needs the pyspark[connect] extra (grpcio ...)")
        if not done:
            try:
                done["out"], done["err"] = proc.communicate(timeout=400)
            finally:
                if proc.poll() is None:
                    proc.kill()
        assert proc.returncode == 0, done["err"][-3000:]
        return json.loads(done["out"].strip().splitlines()[-1])

    yield result
    if proc.poll() is None:
        proc.kill()
        proc.wait()
