"""spark_conf() makes Spark's Python workers run the driver's interpreter unless PYSPARK_PYTHON is set:
a session built from a virtual environment's python that is not activated (a notebook kernel, a cron
job) runs AI queries although PATH's python3 lacks pyarrow and quail_spark."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import quail_spark

ROOT = Path(__file__).resolve().parents[2]
DRIVER = """
import json, sys
import quail_spark
from pyspark.sql import SparkSession
builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for k, v in quail_spark.spark_conf().items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
quail_spark.install(spark, model="tiny-llama-random", device="cpu", seed=1)
spark.createDataFrame([(1, "a red apple"), (2, None)], "id int, body string").createOrReplaceTempView("t")
rows = spark.sql("SELECT id, ai_if('Is {0} food?', body) IS NULL AS n "
                 "FROM t ORDER BY id").collect()
worker = spark.range(1).rdd.map(lambda _: sys.executable).collect()[0]
print(json.dumps({"rows": [[r.id, r.n] for r in rows], "worker": worker, "driver": sys.executable}))
spark.stop()
"""


def test_workers_run_the_drivers_interpreter_when_none_is_set(tmp_path):
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    system = Path("/usr/bin/python3")
    if not system.exists() or system.resolve() == Path(sys.executable).resolve():
        pytest.skip("needs a /usr/bin/python3 other than the interpreter running the tests")
    bare = tmp_path / "bin"  # a PATH whose python3 is the system's, without pyarrow or quail_spark
    bare.mkdir()
    (bare / "python3").symlink_to(system)
    missing = subprocess.run([str(bare / "python3"), "-c", "import pyarrow"], capture_output=True)
    assert missing.returncode != 0, "expected a python3 on PATH without pyarrow"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                             "VIRTUAL_ENV")}
    env.update(PATH=os.pathsep.join([str(bare), "/usr/bin", "/bin"]), PYTHONPATH=str(ROOT),
               TOKENIZERS_PARALLELISM="false")  # java is in /usr/bin; the venv's bin is not on PATH
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["worker"] == got["driver"] == sys.executable
    assert got["rows"] == [[1, False], [2, True]]  # the AI function ran in those workers; NULL stays NULL


def test_a_python_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/cluster/python3")
    assert quail_spark.spark_conf()["spark.pyspark.python"] == "/opt/cluster/python3"
    assert os.environ["PYSPARK_PYTHON"] == "/opt/cluster/python3"
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert quail_spark.spark_conf()["spark.pyspark.python"] == sys.executable == os.environ["PYSPARK_PYTHON"]
