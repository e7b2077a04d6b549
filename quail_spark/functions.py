"""AI functions for Spark SQL: ``ai_if`` (alias ``ai_filter``), ``ai_score``, ``ai_classify``, and the decode
functions ``ai_generate``, ``ai_extract``, ``ai_summarize`` (docs/decode.md).

:func:`install` registers them as Arrow-batched Python UDFs, so any
``spark.sql`` query or DataFrame expression can call them, together with the
internal UDFs ``quail_chain``, ``quail_join``, ``quail_eval`` and ``quail_match`` that the
optimizer rules of the Spark extension (``quail_spark.spark_conf()``) put in
place of AI filters, AI joins, the other AI calls of a plan node, and outer / semi / anti AI joins. Every evaluation goes through :mod:`gpu_worker.ai_calls`: one
prompt rendering, one NULL rule, on every path.

Signatures (the template's ``{i}`` is the i-th column after it; an optional
last argument ``map('selectivity', 0.25, 'anchor', 'n')`` is a hint for the
optimizer and never changes an answer):

``ai_if(template, col0[, col1 ...][, hint])`` -> boolean
    TRUE when the model answers yes (margin > 0).
``ai_score(template, col0[, col1 ...][, hint])`` -> double
    P(yes) = sigmoid(margin).
``ai_classify(col, array('a', 'b', ...))`` or ``ai_classify(template, col, ..., array(...))`` -> string
    The most likely label.

NULL, empty or whitespace-only text in any referenced column gives NULL (a
filter drops the row, a join drops the pair). With several columns, the
document placed first is the DOCUMENT whose KV is shared (a join's anchor): of
two, the column the ``anchor`` hint names, else the row's longer value
(see :mod:`gpu_worker.ai_calls`).
"""
from __future__ import annotations

import functools
import warnings

from gpu_worker import ai_calls
from quail_spark import executor
from quail_spark.extension import EXTENSION_CLASS
from quail_spark.metrics import session_dir

# name -> (result type, body); the names are the one table of gpu_worker.ai_calls. ai_extract is the Spark
# extension's function (its type is its schema's struct): from_json over the JSON text of EXTRACT_UDF.
BODIES = {"if": executor.udf_if, "score": executor.udf_score, "classify": executor.udf_classify,
          "generate": executor.udf_generate, "summarize": executor.udf_summarize}
FUNCTIONS = {**{name: (ai_calls.RESULT_TYPES[kind], BODIES[kind]) for name, kind in ai_calls.FUNCTIONS.items()
                if kind != "extract"}, ai_calls.EXTRACT_UDF: ("string", executor.udf_extract)}
# made by the optimizer rules only; non-deterministic so that Spark keeps them where the rules put them
INTERNAL = {name: {"quail_chain": ("boolean", executor.udf_chain), "quail_join": ("boolean", executor.udf_join),
                   "quail_eval": (executor.EVAL_TYPE, executor.udf_eval),
                   "quail_match": ("array<boolean>", executor.udf_match),
                   "quail_match_score": ("array<double>", executor.udf_match),
                   "quail_join_score": ("double", executor.udf_join_score)}[name] for name in ai_calls.INTERNAL}


def install(spark, model: str = "smollm2-135m", device: str = "cpu", **engine_conf) -> dict:
    """Register ai_if, ai_filter, ai_score, ai_classify (and the rules' internal UDFs) in ``spark``.

    Without the extension (see :func:`quail_spark.spark_conf`) the functions
    work, unoptimized, and a warning says how to enable the rules.

    Parameters
    ----------
    spark : SparkSession
        A classic or a Spark Connect session.
    model : str
        Engine model preset or path (see ``gpu_worker.EngineConfig``).
    device : str
        'cpu', 'cuda' (each task takes the GPU Spark assigned it), 'cuda:N' or 'auto'.
    **engine_conf
        Other ``EngineConfig`` fields, e.g. ``token_budget=4096``, ``on_overflow='truncate'``.

    Returns
    -------
    dict
        name -> the registered UDF.

    Examples
    --------
    >>> import quail_spark
    >>> udfs = quail_spark.install(spark)                          # doctest: +SKIP
    >>> spark.createDataFrame([(1, "My parcel never arrived!")], "id int, body string") \\
    ...     .createOrReplaceTempView("notes")                      # doctest: +SKIP
    >>> spark.sql("SELECT id, ai_score('Is {0} a complaint?', body) AS p FROM notes").show()  # doctest: +SKIP
    """
    from quail_spark.concurrency import task_threads
    from quail_spark.cost import CONF, MEASURED, session_conf

    conf = executor.engine_conf(model, executor.session_device(spark, device), **engine_conf)
    run = {"metrics_dir": session_dir(spark)}
    values = session_conf(model, conf["device"], conf, task_threads(spark))  # a CPU's rates: a task's threads
    for k, v in values.items():  # what the rules' cost model prices
        spark.conf.set(k, v)
    for k in MEASURED:  # a figure of the model installed before that this one lacks
        if CONF + k not in values:
            spark.conf.unset(CONF + k)
    out = {}
    for table, deterministic in ((FUNCTIONS, True), (INTERNAL, False)):
        for name in table:
            udf = arrow_function(name, conf, run)
            out[name] = spark.udf.register(name, udf if deterministic else udf.asNondeterministic())
    if not extension_enabled(spark):
        warnings.warn(
            "quail_spark: the optimizer rules are not enabled in this session, so AI filters and joins run "
            "unoptimized (every predicate on every row, AI joins as a cross join). Build the session with "
            "quail_spark.spark_conf(): for k, v in quail_spark.spark_conf().items(): "
            "builder = builder.config(k, v)", stacklevel=2)
    return out


def arrow_function(name: str, conf: dict, run: dict, shown_as: str | None = None):
    """The Arrow UDF of AI function ``name`` for engine ``conf``, unregistered.

    ``shown_as`` names it in plans instead of ``name``: a name the optimizer rules do not
    read as an AI call, for a column whose engine differs from the session's functions'.
    """
    from pyspark.sql.functions import arrow_udf

    return_type, body = {**FUNCTIONS, **INTERNAL}[name]
    fn = functools.partial(body, conf, run)
    fn.__name__ = shown_as or name  # the name Spark shows in plans
    return arrow_udf(fn, return_type)


def extension_enabled(spark) -> bool:
    """Whether ``spark`` was built with ``spark.sql.extensions`` naming io.quailspark.QuailExtensions."""
    try:
        ext = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception:  # noqa: BLE001 - not readable: assume absent
        return False
    return EXTENSION_CLASS in [x.strip() for x in ext.split(",")]


def ai_if(template: str, *cols, hint: dict | None = None):
    """Column expression ``ai_if(template, cols...[, map(hint)])`` (after :func:`install`).

    >>> df.filter(ai_if("Is {0} a complaint?", "body", hint={"selectivity": 0.2}))   # doctest: +SKIP
    """
    return _call("ai_if", template, cols, hint)


def ai_score(template: str, *cols, hint: dict | None = None):
    """Column expression ``ai_score(template, cols...[, map(hint)])`` (after :func:`install`).

    >>> df.withColumn("p", ai_score("Is {0} a complaint?", "body"))   # doctest: +SKIP
    """
    return _call("ai_score", template, cols, hint)


def ai_generate(template: str, *cols, hint: dict | None = None):
    """Column expression ``ai_generate(template, cols...[, hint])`` (after :func:`install`): the model's text.
    Hint keys: ``max_tokens`` (default 128), ``stop`` (a string or a list of strings).

    >>> df.withColumn("reply", ai_generate("Write a reply to {0}", "body", hint={"max_tokens": 32}))  # doctest: +SKIP
    """
    return _call("ai_generate", template, cols, hint)


def ai_summarize(col, max_words: int | None = None):
    """Column expression ``ai_summarize(col[, max_words])`` (after :func:`install`); max_words defaults to 50.

    >>> df.withColumn("gist", ai_summarize("body", 20))   # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    return F.call_function("ai_summarize", _col(col), *([F.lit(int(max_words))] if max_words is not None else []))


def ai_extract(col, schema, instruction: str | None = None, hint: dict | None = None):
    """Column expression ``ai_extract(col, schema[, instruction][, hint])`` (after :func:`install`, in a session
    with the extension): a struct of the schema's fields. ``schema`` is a DDL string ('name STRING, age INT'),
    a list of field names (STRING fields) or a pyspark StructType. Hint key: ``max_tokens`` per field (32).

    >>> df.select(ai_extract("body", "name STRING, age INT").alias("who"))   # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    if isinstance(schema, (list, tuple)):
        schema_arg = F.array(*[F.lit(str(x)) for x in schema])
    else:
        schema_arg = F.lit(schema if isinstance(schema, str) else schema.json())
    args = [_col(col), schema_arg] + ([F.lit(instruction)] if instruction is not None else [])
    return F.call_function("ai_extract", *args, *([_hint(hint)] if hint else []))


def ai_classify(col, labels, template: str | None = None):
    """Column expression ``ai_classify([template,] col, array(labels))`` (after :func:`install`).

    >>> df.withColumn("kind", ai_classify("body", ["bug", "praise"]))   # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    arr = F.array(*[F.lit(x) for x in labels])
    args = ([F.lit(template)] if template is not None else []) + [_col(col), arr]
    return F.call_function("ai_classify", *args)


def _call(name: str, template: str, cols, hint):
    from pyspark.sql import functions as F

    if not cols:
        raise TypeError(f"{name} expected at least one document column after the template")
    args = [F.lit(template), *[_col(c) for c in cols]]
    return F.call_function(name, *args, *([_hint(hint)] if hint else []))


def _hint(hint: dict):
    """A hint dict as a map of literals, or a named_struct where a value is a list (``stop``)."""
    from pyspark.sql import functions as F

    if any(isinstance(v, (list, tuple)) for v in hint.values()):
        return F.named_struct(*[x for k, v in hint.items() for x in (
            F.lit(str(k)), F.array(*[F.lit(str(y)) for y in v]) if isinstance(v, (list, tuple)) else F.lit(v))])
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in hint.values())
    return F.create_map(*[F.lit(x) for k, v in hint.items() for x in (str(k), float(v) if numeric else str(v))])


def _col(c):
    from pyspark.sql import functions as F

    return F.col(c) if isinstance(c, str) else c
