"""Presets shipped with the package: ``conf/spark/*.json`` (Spark conf) and ``conf/engine/*.json``.

In a checkout ``quail_spark/conf`` is a link to the repository's ``conf/``; in an
installed wheel it is a folder of package data, so presets load from both.
"""
from __future__ import annotations

import json
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent / "conf"


def load_preset(name: str) -> dict:
    """A preset from ``conf/``: ``spark/<name>`` (Spark conf) or ``engine/<name>`` (engine settings).

    Spark presets also carry ``quail_spark.spark_conf()`` (the extension's jar and class).

    >>> load_preset("spark/local-cpu")["spark.master"]
    'local[2]'
    >>> load_preset("spark/local-cpu")["spark.sql.extensions"]
    'io.quailspark.QuailExtensions'
    """
    path = CONF_DIR / f"{name}.json"
    if not path.is_file():
        have = sorted(str(p.relative_to(CONF_DIR).with_suffix("")) for p in CONF_DIR.glob("*/*.json"))
        raise FileNotFoundError(f"no preset {name!r} in {CONF_DIR}; expected one of {have}")
    out = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    if name.startswith("spark/"):
        from quail_spark.extension import spark_conf

        out.update(spark_conf())
    return out
