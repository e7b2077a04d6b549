"""``quail-spark eval SPEC``: :func:`quail_spark.evaluate.evaluate` from the command line.

A spec is a JSON or YAML mapping like an enrichment spec's::

    {"input": "yes_no.jsonl",                      # Parquet / JSON lines / CSV path, or a table
     "label": {"animal": "is_animal", "kind": "category"},   # or one column for every question
     "columns": {"animal": "ai_if('Is {0} an animal?', text)",
                 "kind": "ai_classify(text, array('animal', 'fruit', 'color', 'tool'))"},
     "where": "lang = 'en'",                       # optional
     "model": "smollm2-135m", "device": "cpu", "engine": {...},
     "output": "quality.json"}                     # optional; --json overrides

Prints the table and writes the figures as JSON (default ``quail_eval.json``);
``--model`` / ``--device`` measure another model on the same spec.
Exit status: 0 done, 2 a bad spec or input, 4 an internal error.
"""
from __future__ import annotations

import os
import sys
import warnings

from quail_spark.errors import error_line

KEYS = ("input", "label", "columns", "where", "model", "device", "engine", "output")


def add_parser(sub) -> None:
    e = sub.add_parser("eval", help="measure AI expressions against a labelled table (accuracy, AUC)")
    e.add_argument("spec", help="SPEC.json or SPEC.yaml (see docs/quality.md)")
    e.add_argument("--json", default=None, metavar="PATH", help="where to write the figures as JSON")
    e.add_argument("--model", default=None, help="the model to measure instead of the spec's")
    e.add_argument("--device", default=None, help="the device instead of the spec's")
    e.add_argument("--spark-preset", default=None,
                   help="conf/spark preset when this command starts Spark (default spark/local-cpu)")
    e.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    e.add_argument("--debug", action="store_true", help="a traceback on an internal error")
    e.set_defaults(run=main)


def load(path: str) -> dict:
    """The checked spec as a dict; paths relative to the spec's folder."""
    from quail_spark.enrich.spec import SpecError, read_file

    raw = read_file(path)
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a spec is a mapping of {list(KEYS)}, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS))
    missing = [k for k in ("input", "label", "columns") if k not in raw]
    if unknown or missing:
        raise SpecError(f"{path}: unknown key(s) {unknown}, missing key(s) {missing}; expected {list(KEYS)}")
    if not isinstance(raw.get("engine", {}), dict):
        raise SpecError(f"{path}: 'engine' must be a mapping of EngineConfig fields")
    return {**raw, "base_dir": os.path.dirname(os.path.abspath(path))}


def main(args) -> int:
    from quail_spark.enrich.spec import SpecError

    try:
        spec = load(args.spec)
        spec.update({k: getattr(args, k) for k in ("model", "device") if getattr(args, k)})
    except (SpecError, OSError) as e:
        print(f"quail-spark eval: {e}", file=sys.stderr)
        return 2
    from pyspark.errors import PySparkException

    from quail_spark.spark_session import spark_session

    spark = spark_session(args)
    try:
        with warnings.catch_warnings():  # pyspark's toPandas warns with the task's traceback: one line here
            if not args.debug:
                warnings.simplefilter("ignore", UserWarning)
            ev = run(spark, spec)
    except (SpecError, OSError, TypeError, ValueError, PySparkException) as e:
        if args.debug:
            raise
        print(f"quail-spark eval: {error_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        print(f"quail-spark eval: internal error: {type(e).__name__}: {error_line(e)} (--debug prints the "
              "traceback)", file=sys.stderr)
        return 4
    finally:
        spark.stop()
    out = args.json or (_path(spec, spec["output"]) if spec.get("output") else "quail_eval.json")
    with open(out, "w", encoding="utf-8") as f:
        f.write(ev.to_json() + "\n")
    print(ev)
    print(f"figures written to {out}")
    return 0


def run(spark, spec: dict):
    from quail_spark.evaluate import _Source, evaluate
    from quail_spark.enrich.job import read_input

    df = read_input(spark, _Source(spec["input"], spec["base_dir"]))
    if spec.get("where"):
        df = df.where(spec["where"])
    return evaluate(df, spec["label"], spec["columns"], model=spec.get("model", "smollm2-135m"),
                    device=spec.get("device", "cpu"), **spec.get("engine", {}))


def _path(spec: dict, p: str) -> str:
    return p if os.path.isabs(p) else os.path.join(spec["base_dir"], p)
