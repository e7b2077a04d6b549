"""Enrichment jobs: add AI columns to a table's rows, incrementally and atomically.

``quail-spark enrich SPEC.json`` (see :mod:`quail_spark.cli`) runs :func:`run`
on a spec loaded by :func:`load_spec`. One job per module: ``spec`` (what to
compute), ``incremental`` (which rows), ``ai_stage`` (the executor function),
``parquet_sink`` / ``iceberg_sink`` / ``delta_sink`` (atomic commits), ``guard``
(the lock, checks of the state read and of the rows committed), ``progress``
and ``report``; ``job`` ties them together.
"""
from quail_spark.enrich.spec import Spec, SpecError, load_spec, parse_spec


def run(spec, spark, **kw):
    """See :func:`quail_spark.enrich.job.run` (imported lazily: it needs pyspark)."""
    from quail_spark.enrich.job import run as _run

    return _run(spec, spark, **kw)


__all__ = ["Spec", "SpecError", "load_spec", "parse_spec", "run"]
