"""Session-wide fixtures: one SmolLM2 engine and one local[2] SparkSession for the whole run."""
from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Triton kernels run in its interpreter on CPU; the flag must precede any triton import.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smol_engine():
    from gpu_worker import Engine, EngineConfig

    return Engine(EngineConfig(model="smollm2-135m", device="cpu"))


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession with the quail-spark extension, shared by every test directory."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import quail_spark
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("quail-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "4")
               .config("spark.python.worker.reuse", "true"))
    for k, v in quail_spark.spark_conf().items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
