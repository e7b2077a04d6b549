"""quail-spark: AI-SQL (ai_if, ai_score, ai_classify, AI joins) on Apache Spark.

Two ways in:

- :func:`install` registers the AI functions for plain ``spark.sql`` and
  DataFrame expressions (Arrow-batched Python UDFs);
- :class:`QuailSession` plans a query (filter ordering, join anchors, prefix
  grouping, KV retention) and lowers it to Spark DataFrame operations, with
  ``explain()`` and a report of what the engines computed.

Importing this package loads neither torch nor a model.

>>> import quail_spark
>>> sorted(quail_spark.__all__)
['QuailSession', 'install']
"""
from __future__ import annotations

from quail_spark.functions import install


def __getattr__(name):
    if name == "QuailSession":
        from quail_spark.session import QuailSession

        return QuailSession
    raise AttributeError(f"module 'quail_spark' has no attribute {name!r}")


__all__ = ["QuailSession", "install"]
