"""AI functions for plain Spark SQL: ``ai_if`` (alias ``ai_filter``), ``ai_score``, ``ai_classify``.

:func:`install` registers them as Arrow-batched Python UDFs, so any
``spark.sql`` query or DataFrame expression can call them. Each Arrow batch of a
task goes to the worker's cached engine in one call: rows under the same
template share the prompt's fixed parts, a document asked several questions is
computed once while it stays cached, and the cache lives across batches and
tasks of the worker.

Signatures (the template's ``{i}`` is the i-th column after it):

``ai_if(template, col0[, col1 ...])`` -> boolean
    TRUE when the model answers yes (margin > 0); NULL for a NULL document.
``ai_score(template, col0[, col1 ...])`` -> double
    P(yes) = sigmoid(margin); NULL for a NULL document.
``ai_classify(col, array('a', 'b', ...))`` or ``ai_classify(template, col, ..., array(...))`` -> string
    The most likely label; NULL for a NULL document.

With one column ``{0}`` reads "the document". With several, the document is
the lines ``input 1: value``, ``input 2: value``... and ``{i}`` reads
"input i+1". For the optimised path (filter ordering, AI joins, retained
documents) use :class:`quail_spark.QuailSession`.
"""
from __future__ import annotations

import functools

from quail_spark import executor

FUNCTIONS = {"ai_if": ("boolean", executor.udf_if), "ai_filter": ("boolean", executor.udf_if),
             "ai_score": ("double", executor.udf_score), "ai_classify": ("string", executor.udf_classify)}


def install(spark, model: str = "smollm2-135m", device: str = "cpu", **engine_conf) -> dict:
    """Register ai_if, ai_filter, ai_score and ai_classify as Spark SQL functions.

    Parameters
    ----------
    spark : SparkSession
    model : str
        Engine model preset or path (see ``gpu_worker.EngineConfig``).
    device : str
        'cpu', 'cuda' (each task takes the GPU Spark assigned it), 'cuda:N' or 'auto'.
    **engine_conf
        Other ``EngineConfig`` fields, e.g. ``token_budget=4096``, ``on_overflow='truncate'``.

    Returns
    -------
    dict
        name -> the registered UDF, for DataFrame expressions.

    Examples
    --------
    >>> import quail_spark
    >>> udfs = quail_spark.install(spark)                          # doctest: +SKIP
    >>> spark.createDataFrame([(1, "My parcel never arrived!")], "id int, body string") \\
    ...     .createOrReplaceTempView("notes")                      # doctest: +SKIP
    >>> spark.sql("SELECT id, ai_score('Is {0} a complaint?', body) AS p FROM notes").show()  # doctest: +SKIP
    """
    from pyspark.sql.functions import arrow_udf

    conf = executor.engine_conf(model, device, **engine_conf)
    out = {}
    for name, (return_type, body) in FUNCTIONS.items():
        fn = functools.partial(body, conf)
        fn.__name__ = name  # the name Spark shows in plans
        out[name] = spark.udf.register(name, arrow_udf(fn, return_type))
    return out


def ai_if(template: str, *cols):
    """Column expression ``ai_if(template, cols...)`` (after :func:`install`).

    >>> df.filter(ai_if("Is {0} a complaint?", "body"))   # doctest: +SKIP
    """
    return _call("ai_if", template, cols)


def ai_score(template: str, *cols):
    """Column expression ``ai_score(template, cols...)`` (after :func:`install`).

    >>> df.withColumn("p", ai_score("Is {0} a complaint?", "body"))   # doctest: +SKIP
    """
    return _call("ai_score", template, cols)


def ai_classify(col, labels, template: str | None = None):
    """Column expression ``ai_classify([template,] col, array(labels))`` (after :func:`install`).

    >>> df.withColumn("kind", ai_classify("body", ["bug", "praise"]))   # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    arr = F.array(*[F.lit(x) for x in labels])
    args = ([F.lit(template)] if template is not None else []) + [_col(col), arr]
    return F.call_function("ai_classify", *args)


def _call(name: str, template: str, cols):
    from pyspark.sql import functions as F

    if not cols:
        raise TypeError(f"{name} expected at least one document column after the template")
    return F.call_function(name, F.lit(template), *[_col(c) for c in cols])


def _col(c):
    from pyspark.sql import functions as F

    return F.col(c) if isinstance(c, str) else c
