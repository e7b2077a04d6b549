"""AI columns for notebooks: :class:`ArrowMapper` for ``df.mapInArrow`` and :func:`with_ai_columns`.

A thin Spark-side wrapper: the columns are parsed and checked on the driver
(the enrichment spec's expressions and parser), plain data travels to the
executors, and each task's batches go through
:func:`gpu_worker.ai_columns.with_columns` with the worker's cached engine
(``quail_spark.executor.get_engine``, the one the SQL functions use for the
same settings). Counters go to the session's metrics folder like the SQL
functions' (:func:`quail_spark.metrics`). Works under Spark Connect: nothing
but plain data and this module's class crosses to the workers.
"""
from __future__ import annotations

from quail_spark import executor
from quail_spark.errors import error_line


class ArrowMapper:
    """A picklable function for ``df.mapInArrow(m, m.schema)`` that adds AI columns.

    Parameters
    ----------
    input_schema : StructType
        The schema of the DataFrame it will map (``df.schema``).
    columns : dict
        Output column name -> one AI call over input columns, as in an enrichment spec (an
        argument that is an expression, ``concat(title, body)``, needs :func:`with_ai_columns`):
        ``"ai_if('Is {0} a complaint?', body)"``, ``"ai_score('Is {0} urgent?', body)"``,
        ``"ai_classify(body, array('bug', 'praise'))"``. The columns' values equal
        ``spark.sql``'s for the same expressions (one prompt rendering, one NULL rule).
    model, device : str
        As in :func:`quail_spark.install` (``device='cuda'`` takes the GPU Spark assigned each task).
    spark : SparkSession, optional
        The session whose metrics folder receives the counters (default: the active session).
    **engine
        Other ``EngineConfig`` fields (``token_budget``, ``on_overflow``, ``seed`` ...).

    Attributes
    ----------
    schema : StructType
        The input columns, then the AI columns in order (boolean, double or string; ``ai_extract``:
        the struct of its schema, a field cut at ``max_tokens`` NULL and named in ``_ai_error``), then
        ``_ai_error`` (string): NULL, or why the row could not be scored (an over-long prompt
        under ``on_overflow='error'``, text that is not UTF-8); the row's neighbours are scored.

    Examples
    --------
    >>> import quail_spark
    >>> df = spark.createDataFrame([(1, "My parcel never arrived!")], "id int, body string")  # doctest: +SKIP
    >>> m = quail_spark.ArrowMapper(df.schema, {"complaint": "ai_if('Is {0} a complaint?', body)"},
    ...                             model="smollm2-135m", device="cpu")            # doctest: +SKIP
    >>> df.mapInArrow(m, m.schema).columns                                        # doctest: +SKIP
    ['id', 'body', 'complaint', '_ai_error']
    """

    def __init__(self, input_schema, columns: dict, model: str = "smollm2-135m", device: str = "cpu", *,
                 spark=None, **engine):
        from pyspark.sql import SparkSession
        from pyspark.sql.types import StringType, StructField, StructType, _parse_datatype_string

        from quail_spark.metrics import session_dir

        spark = spark if spark is not None else SparkSession.getActiveSession()
        self.columns = resolve_inputs(input_schema.names, parse_columns(columns))
        check_inputs(input_schema, self.columns)
        self.engine_conf = executor.engine_conf(model, executor.session_device(spark, device), **engine)
        self.metrics_dir = session_dir(spark) if spark is not None else None
        # ai_extract's timestamps without an offset are read in the session's zone, as from_json does
        self.timezone = spark.conf.get("spark.sql.session.timeZone", "UTC") if spark is not None else "UTC"
        self.schema = StructType([*input_schema.fields,
                                  *[StructField(c.name, _parse_datatype_string(c.result_type)) for c in self.columns],
                                  StructField("_ai_error", StringType())])

    def __call__(self, batches):
        from gpu_worker.ai_columns import with_columns_counted

        from gpu_worker.counters import metered

        from quail_spark.metrics import append, record

        eng = executor.get_engine(self.engine_conf)
        chunks = with_columns_counted(lambda: eng, self.columns, batches, getattr(self, "timezone", "UTC"))
        while True:
            with metered(eng.stats) as m:
                table, got = next(chunks, (None, None))
            if table is None:
                return
            append(self.metrics_dir, record(m, errored_rows=sum(1 for e in got.errors if e)))
            yield from table.to_batches()


def with_ai_columns(df, columns: dict, model: str = "smollm2-135m", device: str = "cpu", **engine):
    """``df`` with AI columns and ``_ai_error`` appended: ``df.mapInArrow`` over an :class:`ArrowMapper`.

    Parameters and the output's columns are those of :class:`ArrowMapper`.

    Examples
    --------
    >>> import quail_spark
    >>> out = quail_spark.with_ai_columns(df, {"urgency": "ai_score('Does {0} need an answer today?', body)",
    ...                                        "label": "ai_classify(body, array('bug', 'praise'))"},
    ...                                   model="smollm2-135m", device="cpu")   # doctest: +SKIP
    >>> out.select("id", "urgency", "label", "_ai_error").show()               # doctest: +SKIP
    """
    parsed = parse_columns(columns)
    wide = with_derived(df, parsed)  # expression arguments computed by Spark, dropped again after
    m = ArrowMapper(wide.schema, parsed, model, device, spark=df.sparkSession, **engine)
    out = wide.mapInArrow(m, m.schema)
    extra = [n for n in wide.columns if n not in df.columns]
    return out.drop(*extra) if extra else out


def with_derived(df, columns):
    """``df`` with a column per distinct expression argument of ``columns`` (``AIColumn.derived``),
    computed by Spark (its functions, its NULL semantics): what ``spark.sql`` hands the same call.
    An argument Spark cannot resolve, or whose value is not text, raises ValueError naming it."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    new = {}
    for c in columns:
        for name, sql in c.derived:
            if name in new or name in df.columns:
                continue
            try:
                dtype = df.select(F.expr(sql)).schema.fields[0].dataType  # analysed here: errors name the column
            except AnalysisException as e:
                raise ValueError(f"column {c.name!r}: argument {sql!r} does not resolve against the input: "
                                 f"{error_line(e)}") from None
            if not isinstance(dtype, (StringType, BinaryType)):
                raise TypeError(f"column {c.name!r}: argument {sql!r} is {dtype.simpleString()}; a document must "
                                f"be a string: cast it (CAST({sql} AS STRING))")
            new[name] = F.expr(sql).alias(name)
    return df.select("*", *new.values()) if new else df


def parse_columns(columns) -> tuple:
    """The AIColumns of ``{name: expression}`` (the enrichment spec's parser); AIColumns already parsed
    (``with_ai_columns`` hands its own to ArrowMapper) come back as they are."""
    from quail_spark.columns import AIColumn, parse_column

    if isinstance(columns, tuple) and columns and all(isinstance(c, AIColumn) for c in columns):
        return columns
    if not isinstance(columns, dict) or not columns:
        raise ValueError(f"columns: expected {{name: AI call expression}} with at least one entry, got {columns!r}")
    return tuple(parse_column(name, expr) for name, expr in columns.items())


def resolve_name(names, name: str, what: str) -> str:
    """``name`` as ``names`` spell it, ignoring case as Spark's analyzer does: the exact name, else the one
    name equal to it ignoring case; none: ``name`` as it is (the caller names it missing); several: ValueError.

    >>> resolve_name(["id", "Body"], "body", "column 'c'")
    'Body'
    """
    if name in names:
        return name
    hits = [n for n in names if n.lower() == name.lower()]
    if len(hits) > 1:
        raise ValueError(f"{what}: {name!r} is ambiguous: the input has {hits} (names that differ only in case)")
    return hits[0] if hits else name


def resolve_inputs(names, columns) -> tuple:
    """``columns`` with their input columns spelled as in ``names`` (see :func:`resolve_name`)."""
    import dataclasses

    return tuple(dataclasses.replace(c, inputs=tuple(resolve_name(names, x, f"column {c.name!r}")
                                                     for x in c.inputs)) for c in columns)


def check_inputs(schema, columns) -> None:
    """Each AI column's documents are text columns of ``schema``; its name is new (ignoring case)."""
    from pyspark.sql.types import BinaryType, StringType

    from quail_spark.columns import name_clash

    types = {f.name: f.dataType for f in schema.fields}
    if any(n.lower() == "_ai_error" for n in types):
        raise ValueError("the input already has an '_ai_error' column (from an earlier with_ai_columns or "
                         "ArrowMapper?): add every AI column in one call, or rename or drop it first")
    clash = name_clash([c.name for c in columns], (*types, "_ai_error"))
    if clash:
        raise ValueError(f"column {clash[0]!r}: the name is taken by {clash[1]!r} (names ignore case; input "
                         f"columns {sorted(types)}, the AI columns, '_ai_error')")
    for c in columns:
        for name, sql in c.derived:
            if name not in types:
                raise ValueError(f"column {c.name!r}: argument {sql!r} is an expression; ArrowMapper maps the "
                                 "batches as they come: use quail_spark.with_ai_columns (Spark computes it) "
                                 f"or add it as a column first (df.withColumn('doc', F.expr({sql!r})))")
        for x in c.inputs:
            if x not in types:
                raise ValueError(f"column {c.name!r}: input column {x!r} is not in the input schema "
                                 f"(columns {sorted(types)})")
            if not isinstance(types[x], (StringType, BinaryType)):
                raise TypeError(f"column {c.name!r}: input column {x!r} is {types[x].simpleString()}; a document "
                                f"must be a string: cast it first (df.withColumn({x!r}, df[{x!r}].cast('string')))")
