"""quail-spark: AI-SQL (ai_if, ai_score, ai_classify, AI joins; ai_generate, ai_extract, ai_summarize) on Apache Spark.

Two ways in:

- :func:`spark_conf` gives the SparkSession builder settings of the Spark
  extension (optimizer rules in Catalyst); :func:`install` registers the AI
  functions for plain ``spark.sql`` and DataFrame expressions;
  :func:`metrics` sums the AI work of the session so far;
- :class:`QuailSession` is a front end over the same Spark plan: it translates
  the BigQuery and Snowflake AI spellings to Spark SQL, and its queries explain
  themselves (Spark's optimized plan, filter order, join anchors, speed of
  light) and report what the engines computed;
- :class:`ArrowMapper` (for ``df.mapInArrow``) and :func:`with_ai_columns` add
  AI columns to a DataFrame's rows, with ``_ai_error`` per row (notebooks).

The layers and the rules are described in docs/architecture.md.

Importing this package loads neither torch nor a model.

>>> import quail_spark
>>> sorted(quail_spark.__all__)  # doctest: +NORMALIZE_WHITESPACE
['ArrowMapper', 'QuailSession', 'ai_classify', 'ai_extract', 'ai_generate', 'ai_if', 'ai_score', 'ai_summarize',
 'evaluate', 'install', 'metrics', 'spark_conf', 'with_ai_columns']
"""
from __future__ import annotations

from quail_spark.evaluate import evaluate  # the function; the module stays quail_spark.evaluate in sys.modules
from quail_spark.extension import spark_conf
from quail_spark.functions import ai_classify, ai_extract, ai_generate, ai_if, ai_score, ai_summarize, install
from quail_spark.mapper import ArrowMapper, with_ai_columns
from quail_spark.metrics import metrics


def __getattr__(name):
    if name == "QuailSession":
        from quail_spark.session import QuailSession

        return QuailSession
    raise AttributeError(f"module 'quail_spark' has no attribute {name!r}")


__all__ = ["ArrowMapper", "QuailSession", "ai_classify", "ai_extract", "ai_generate", "ai_if", "ai_score",
           "ai_summarize", "evaluate", "install", "metrics", "spark_conf", "with_ai_columns"]
