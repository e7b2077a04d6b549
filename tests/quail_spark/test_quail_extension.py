"""The Spark extension's jar (built by javac, cached) and install() on a session without it."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import zipfile

import quail_spark
from quail_spark import extension

WITHOUT_EXTENSION = """
import os, sys, warnings
os.environ["PYSPARK_PYTHON"] = sys.executable
import quail_spark
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "1").getOrCreate())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    quail_spark.install(spark, model="tiny-llama-random", device="cpu")
print("WARNING:", " ".join(str(w.message) for w in caught))
spark.createDataFrame([(1, "a"), (2, None)], "id int, body string").createOrReplaceTempView("t")
df = spark.sql("SELECT id FROM t WHERE ai_if('Is {0} short?', body) OR id = 1")
print("ROWS:", sorted(r.id for r in df.collect()))
print("EXPLAIN:", "quail_" in df._jdf.queryExecution().optimizedPlan().toString())
spark.stop()
"""


def test_spark_conf_names_the_jar_and_the_class():
    conf = quail_spark.spark_conf()
    assert conf["spark.sql.extensions"] == "io.quailspark.QuailExtensions"
    with zipfile.ZipFile(conf["spark.jars"]) as z:
        names = set(z.namelist())
    assert {"io/quailspark/QuailExtensions.class", "io/quailspark/QuailFilterChain.class",
            "io/quailspark/QuailAiJoin.class", "io/quailspark/QuailLocalSort.class"} <= names


def test_jar_is_cached_and_concurrent_builds_are_safe(tmp_path, monkeypatch):
    monkeypatch.setenv("QUAIL_SPARK_CACHE", str(tmp_path))
    jar = tmp_path / f"quail-spark-ext-{extension._key()}.jar"
    errors = []

    def build():
        try:
            extension._build(jar)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and zipfile.ZipFile(jar).testzip() is None
    stamp = jar.stat().st_mtime_ns
    assert extension.jar_path() == jar and jar.stat().st_mtime_ns == stamp  # cached: not built again
    assert [p.name for p in tmp_path.iterdir()] == [jar.name]  # no temporary folder left


def test_install_without_the_extension_warns_and_still_works():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", WITHOUT_EXTENSION], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in out.stdout.splitlines() if ":" in line}
    assert "spark_conf()" in lines["WARNING"] and "unoptimized" in lines["WARNING"]
    assert lines["ROWS"].startswith("[1") and lines["EXPLAIN"] == "False"
