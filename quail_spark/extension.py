"""Build (once) and locate the jar of the Spark extension ``io.quailspark.QuailExtensions``.

The rules are Java sources in ``quail_spark/java``, compiled with the JDK's
``javac`` against the jars inside the installed pyspark (no Maven). The jar is
cached under ``~/.cache/quail_spark/`` (or ``$QUAIL_SPARK_CACHE``), keyed by a
hash of the sources, the contract, the pyspark version and the Java version, so it
is built again only when one of them changes. The contract (:func:`contract`) is what
the Python side defines once and the rules read from the jar's ``io/quailspark/contract.json``:
the AI functions and their kinds, the internal UDFs, the decode calls' default lengths, and
the shape and rate the rules price when ``install()`` has not set the session's model. Two processes building at once each
compile in a temporary folder and move their jar into place with
``os.replace``; both results are the same jar.

The set-up (``make``) runs ``python -m quail_spark.extension`` once.
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

EXTENSION_CLASS = "io.quailspark.QuailExtensions"
SOURCES = Path(__file__).parent / "java"


DAEMON_MODULE = "quail_spark.worker_daemon"


def spark_conf() -> dict:
    """SparkSession builder settings that enable the quail-spark optimizer rules.

    Spark starts its Python workers with ``PYSPARK_PYTHON`` (``python3`` on
    PATH when unset), read when the session starts. A notebook kernel or a cron
    job running a virtual environment's interpreter without activating it would
    start workers without pyarrow or quail_spark, so unless ``PYSPARK_PYTHON`` is
    set (spark-submit sets it from ``spark.pyspark.python``), this sets it to the
    interpreter running this code. Set it yourself before the session starts
    when the workers need another one (a cluster whose executors have their own).

    Returns
    -------
    dict
        ``spark.jars`` (the built jar), ``spark.sql.extensions``
        (``io.quailspark.QuailExtensions``), ``spark.pyspark.python`` (the
        interpreter the Python workers run) and ``spark.python.daemon.module``
        (``quail_spark.worker_daemon``: pyspark's daemon with torch and the engine
        imported before it forks workers, so a new worker loads its engine in
        about 1.5 s instead of about 10 s on 2 CPU cores).

    Examples
    --------
    >>> import quail_spark
    >>> from pyspark.sql import SparkSession
    >>> builder = SparkSession.builder.master("local[2]")
    >>> for k, v in quail_spark.spark_conf().items():    # doctest: +SKIP
    ...     builder = builder.config(k, v)
    >>> spark = builder.getOrCreate()                    # doctest: +SKIP
    """
    return {"spark.jars": str(jar_path()), "spark.sql.extensions": EXTENSION_CLASS,
            "spark.pyspark.python": worker_python(), "spark.python.daemon.module": DAEMON_MODULE}


def worker_python() -> str:
    """The Python workers' interpreter: ``PYSPARK_PYTHON`` if set, else this one (and it is set to it).

    Classic sessions read the variable when their SparkContext starts, Spark Connect's local
    server when it starts; both start after this call in the builder pattern above.
    """
    return os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def jar_path() -> Path:
    """The cached jar for these sources, pyspark and Java; built now if missing."""
    jar = _cache_dir() / f"quail-spark-ext-{_key()}.jar"
    if not jar.exists():
        _build(jar)
    return jar


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def _java_version() -> str:
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("quail_spark: javac (a JDK, 17 or later) is needed to build the Spark extension; "
                           "none is on PATH")
    out = subprocess.run([javac, "-version"], capture_output=True, text=True)
    return (out.stdout + out.stderr).strip()


CONTRACT = "io/quailspark/contract.json"


def contract() -> bytes:
    """The JSON the Java rules read (Contract.java): one definition each, made here from the Python side's."""
    import json

    from gpu_worker import ai_calls
    from quail_spark import cost

    functions = {name: kind for name, kind in ai_calls.FUNCTIONS.items() if name != "ai_extract"}
    functions[ai_calls.EXTRACT_UDF] = "extract"  # ai_extract is from_json over it (AiExtractFunction.java)
    shape = {k.removeprefix(cost.CONF): v for k, v in cost.preset_conf(cost.DEFAULT_MODEL, "cpu").items()}
    return json.dumps({"functions": functions, "internal": list(ai_calls.INTERNAL),
                       "extract_function": "ai_extract", "extract_udf": ai_calls.EXTRACT_UDF,
                       "decode_defaults": {"generate_tokens": ai_calls.DEFAULT_MAX_TOKENS["generate"],
                                           "field_tokens": ai_calls.DEFAULT_MAX_TOKENS["extract"],
                                           "summary_words": ai_calls.DEFAULT_MAX_WORDS},
                       "default_model": shape}, indent=1, sort_keys=True).encode()


def _key() -> str:
    import pyspark

    h = hashlib.sha256()
    h.update(contract() + b"\0")
    for src in _sources():
        h.update(src.relative_to(SOURCES).as_posix().encode() + b"\0" + src.read_bytes() + b"\0")
    h.update(pyspark.__version__.encode() + b"\0" + _java_version().encode())
    return h.hexdigest()[:16]


def _cache_dir() -> Path:
    d = Path(os.environ.get("QUAIL_SPARK_CACHE", Path.home() / ".cache" / "quail_spark"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _build(jar: Path) -> None:
    classpath = os.pathsep.join(glob.glob(str(_pyspark_jars() / "*.jar")))
    with tempfile.TemporaryDirectory(dir=jar.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        cmd = ["javac", "-nowarn", "-encoding", "UTF-8", "--release", "17", "-cp", classpath,
               "-d", str(classes), *map(str, _sources())]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"quail_spark: javac failed building the Spark extension:\n{done.stderr}")
        tmp_jar = Path(tmp) / jar.name
        with zipfile.ZipFile(tmp_jar, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: quail_spark\n\n")
            z.writestr(CONTRACT, contract())
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())
        os.replace(tmp_jar, jar)  # atomic: a concurrent builder's jar is the same bytes


def main() -> int:
    print(jar_path())
    return 0


if __name__ == "__main__":
    sys.exit(main())
