"""QuailSession: a thin front end over Spark SQL with the AI functions installed.

``QuailSession.sql(text)`` translates BigQuery and Snowflake spellings of the
AI functions to ours (:mod:`quail_spark.dialect`) and hands the text to
``spark.sql``: Spark parses, analyzes and plans the query, the Catalyst rules
of the extension rewrite its AI parts (docs/architecture.md). So a query gives
the same rows through ``spark.sql``, the DataFrame API and QuailSession, and
any query Spark SQL accepts works here. Nothing runs before an action.

A :class:`Query` explains itself (Spark's optimized plan plus the estimates the
rules' cost model wrote into it: filter order, join anchors, speed-of-light
cost, :mod:`quail_spark.explain`), runs,
and reports what the engines computed for it: the difference of
``quail_spark.metrics(spark)`` around the action, which needs no driver-side
Python state and so works under Spark Connect too.
"""
from __future__ import annotations

import time

from gpu_worker.ai_calls import Call
from quail_spark.dialect import to_spark



class QuailSession:
    """AI-SQL over a SparkSession: installs the AI functions, translates dialects, explains.

    Parameters
    ----------
    spark : SparkSession
        Classic or Spark Connect; with ``quail_spark.spark_conf()`` in its builder for the
        optimizer rules (without them queries still run, unoptimized).
    model, device : str
        Engine model and device ('cpu', 'cuda' for the GPU Spark assigns each task, 'auto').
    **engine_conf
        Other ``gpu_worker.EngineConfig`` fields.

    The AI functions are registered in the SparkSession, so the engine settings of the
    last QuailSession (or ``install()``) on a SparkSession are those every query of it uses.

    Examples
    --------
    >>> qs = QuailSession(spark)                                                  # doctest: +SKIP
    >>> q = qs.sql("SELECT kind, count(*) AS n FROM notes "
    ...            "WHERE AI.IF(PROMPT('Is {0} a complaint?', body)) GROUP BY kind")  # doctest: +SKIP
    >>> text = q.explain()                                                        # doctest: +SKIP
    >>> rows = q.collect()                                                        # doctest: +SKIP
    >>> q.report["fresh_tokens"] <= q.report["requested_tokens"]                  # doctest: +SKIP
    True
    """

    def __init__(self, spark, model: str = "smollm2-135m", device: str = "cpu", **engine_conf):
        from quail_spark.functions import install

        self.spark = spark
        self.model, self.device = model, device
        self.functions = install(spark, model=model, device=device, **engine_conf)

    def sql(self, text: str, dialect: str | None = None) -> "Query":
        """The query ``text`` (Spark SQL, or ``dialect`` 'bigquery' / 'snowflake'; None detects
        their AI spellings) as a lazy :class:`Query`; Spark analyzes it, no job runs."""
        spark_text, calls = to_spark(text, dialect, model=self.model)
        return Query(self, self.spark.sql(spark_text), calls, spark_text)

    def estimate(self, text: str, dialect: str | None = None) -> dict:
        """What ``self.sql(text)`` would compute, without running it: a dict of rows, requested
        and fresh tokens, seconds, and the same per AI operator (docs/estimates.md)."""
        return self.sql(text, dialect).estimate()

    # ------------------------------------------------------------- DataFrame API

    def ai_filter(self, df, template: str, *cols: str, selectivity: float | None = None) -> "Query":
        """Rows of ``df`` for which ``template`` over ``cols`` is TRUE.

        >>> qs.ai_filter(df, "Is {0} a complaint?", "body").to_df()   # doctest: +SKIP
        """
        from quail_spark.functions import ai_if

        hints = (("selectivity", float(selectivity)),) if selectivity is not None else ()
        call = Call.of("ai_if", template, tuple(cols), (), hints)
        return Query(self, df.filter(ai_if(template, *cols, hint=dict(hints))), (call,))

    def ai_score(self, df, template: str, *cols: str, alias: str = "score") -> "Query":
        """``df`` with a column ``alias`` = P(TRUE) of ``template`` over ``cols``."""
        from quail_spark.functions import ai_score

        call = Call.of("ai_score", template, tuple(cols))
        return Query(self, df.withColumn(alias, ai_score(template, *cols)), (call,))

    def ai_classify(self, df, col: str, labels, template: str | None = None,
                    alias: str = "label") -> "Query":
        """``df`` with a column ``alias`` holding one of ``labels`` per row."""
        from quail_spark.functions import ai_classify

        call = Call.of("ai_classify", template or "{0}", (col,), tuple(labels))
        return Query(self, df.withColumn(alias, ai_classify(col, list(labels), template)), (call,))

    def ai_join(self, left, right, template: str, left_col: str, right_col: str,
                anchor: str | None = None) -> "Query":
        """Pairs of rows of ``left`` (alias ``l``) and ``right`` (alias ``r``) for which
        ``template`` is TRUE; ``{0}`` is ``left_col``, ``{1}`` is ``right_col``. ``anchor``
        ('left' or 'right') fixes the side whose document is computed once, else the
        optimizer picks it.

        >>> qs.ai_join(reports, terms, "Does {0} mention {1}?", "text", "term").to_df()  # doctest: +SKIP
        """
        from pyspark.sql import functions as F

        from quail_spark.functions import ai_if

        if anchor not in (None, "left", "right"):
            raise ValueError(f"anchor: expected 'left', 'right' or None, got {anchor!r}")
        hints = (("anchor", anchor[0]),) if anchor else ()
        cols = (F.col(f"l.{left_col}"), F.col(f"r.{right_col}"))
        cond = ai_if(template, *cols, hint=dict(hints))
        call = Call.of("ai_if", template, (f"l.{left_col}", f"r.{right_col}"), (), hints)
        return Query(self, left.alias("l").join(right.alias("r"), on=cond, how="inner"), (call,))


class Query:
    """A lazy query over the session: Spark's DataFrame plus the AI calls it contains."""

    def __init__(self, session: QuailSession, df, calls=(), text: str | None = None):
        self.session, self.text, self.calls = session, text, tuple(calls)
        self._df = df
        self._report = None
        self._wall = None

    def explain(self, print_it: bool = True, analyze: bool = False) -> str:
        """Spark's optimized plan (with the rules' rewrites) and physical plan, then the estimates
        the plan carries: the AI filter order with ranks, the AI join anchors, their costs and
        the SoL total (the rules' cost model; document tokens from Spark's column statistics,
        a ``tokens`` hint, a bounded sample of a file source, or a default: docs/estimates.md);
        runs no AI work. ``analyze``: runs the query and adds each AI operator's estimate beside
        its actual (rows in and out, tokens requested and fresh, seconds)."""
        from quail_spark.concurrency import tasks_at_once
        from quail_spark.cost import CONF
        from quail_spark.explain import explain_text
        from quail_spark.notebook import Explain, in_kernel

        conf = self.session.spark.conf
        model = f"{conf.get(CONF + 'name', self.session.model)} at {float(conf.get(CONF + 'rate', '0')) / 1e12:g} TFLOP/s"
        text = explain_text(self._df, self.calls, model, tasks_at_once(self._df))
        if analyze:
            from quail_spark.estimates import analyzed

            text += "\n" + analyzed(self)
        text = Explain(text)
        if print_it and in_kernel():
            from IPython.display import display

            display(text)  # HTML: the plans folded, the AI sections as tables
        elif print_it:
            print(text)
        return text

    def estimate(self) -> dict:
        """The plan's estimate without running it: rows, requested and fresh tokens, seconds, per
        operator (:func:`quail_spark.estimates.estimate`)."""
        from quail_spark.estimates import estimate

        return estimate(self._df)

    def to_df(self):
        """The lazy Spark DataFrame of the query."""
        return self._df

    def collect(self, summary: bool = False, progress: bool = True) -> list:
        """Run the query; rows as a list of Row. Sets :attr:`report`; ``summary`` prints it.
        ``progress`` shows the AI work while it runs (:class:`quail_spark.notebook.Progress`)."""
        return self._run(self._df.collect, summary, progress)

    def to_pandas(self, summary: bool = False, progress: bool = True):
        """Run the query; rows as a pandas DataFrame. Sets :attr:`report` as :meth:`collect` does."""
        return self._run(self._df.toPandas, summary, progress)

    def _run(self, action, summary: bool, progress: bool):
        import contextlib

        from quail_spark.metrics import mark, metrics, spans
        from quail_spark.notebook import Progress

        since = mark(self.session.spark)
        t0 = time.time()
        try:
            with Progress(self.session.spark) if progress else contextlib.nullcontext():
                rows = action()
        finally:  # a failed action did work too: its report is what ran before the failure
            self._wall = time.time() - t0
            report = metrics(self.session.spark, since)  # the work written during the action
            report["stages"] = {k: v for k, v in report["stages"].items() if any(v.values())}
            for op, wall in spans(self.session.spark, since).items():  # each operator's own wall
                report.setdefault("ops", {}).setdefault(op, {})["wall_s"] = round(wall, 3)
            self._report = report
        if summary:
            print(self.summary())
        return rows

    @property
    def report(self) -> dict:
        """What the engines computed for the last :meth:`collect`: ``quail_spark.metrics(spark)`` over the
        work written during it (requested_tokens, fresh_tokens,
        reused_tokens, kv_regret_tokens, forward_passes, truncated_rows, errored_rows,
        stages, ``ops``: per AI operator its counters and ``wall_s``, from its first batch's start to
        its last's end) plus ``wall_s`` (the action's). Work of other queries running at the same time in the
        session is counted too; after a collect that failed, the work done before the failure.
        Empty before the first :meth:`collect`. A dict that
        renders as tables in a notebook (:class:`quail_spark.notebook.Report`)."""
        from quail_spark.notebook import Report

        if self._report is None:
            return Report()
        return Report({**self._report, "wall_s": self._wall})

    def summary(self) -> str:
        """One paragraph: tokens, reuse, passes, time."""
        r = self.report
        if not r:
            return "quail report: the query has not run yet (call collect())"
        req, fresh = r.get("requested_tokens", 0), r.get("fresh_tokens", 0)
        share = f"{1 - fresh / req:.0%} reused" if req else "nothing requested"
        return (f"quail report: {req:,} tokens requested, {fresh:,} computed ({share}), "
                f"KV regret {r.get('kv_regret_tokens', 0):,}; {r.get('forward_passes', 0)} forward "
                f"passes; {r.get('truncated_rows', 0)} rows truncated, {r.get('errored_rows', 0)} "
                f"errored; wall {r['wall_s']:.2f} s")
