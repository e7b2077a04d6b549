"""QuailSession: AI-SQL planned by the optimizer and run as Spark DataFrame operations.

``QuailSession.sql(text)`` parses the query against the session's tables
(temp views and catalog tables), checks it (unknown columns, non-string
documents, template mismatches and unsupported SQL fail here, before any Spark
job), optimizes it with the rules, and lowers it to a lazy DataFrame. The
returned :class:`Query` explains itself, runs, and reports what the engines
on the executors computed (gathered through a Spark accumulator that every
task adds its engine counters and stage counts to).
"""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path

from quail_spark import executor
from quail_spark.lowering import CHUNK_ROWS_KEY, MAX_PARTNERS_KEY, Lowering

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
COUNTERS = ("requested_tokens", "fresh_tokens", "reused_tokens", "kv_regret_tokens",
            "forward_passes", "requests")
_views = itertools.count(1)


@dataclass(frozen=True)
class Settings:
    """Execution settings: QuailSession(settings={key: value}), else the Spark conf
    ``spark.<key>`` or ``<key>`` (``spark.`` keys pass spark-submit without a warning)."""

    max_partner_rows: int = 10000
    chunk_rows: int = 256

    @classmethod
    def read(cls, spark, overrides: dict | None = None) -> "Settings":
        over = dict(overrides or {})
        unknown = sorted(set(over) - {MAX_PARTNERS_KEY, CHUNK_ROWS_KEY})
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown}; expected {MAX_PARTNERS_KEY!r}, {CHUNK_ROWS_KEY!r}")

        def get(key, default):
            value = over.get(key, spark.conf.get("spark." + key, spark.conf.get(key, str(default))))
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"setting {key!r}: expected a positive integer, got {value!r}") from None
            if value < 1:
                raise ValueError(f"setting {key!r}: expected a positive integer, got {value}")
            return value

        return cls(get(MAX_PARTNERS_KEY, cls.max_partner_rows), get(CHUNK_ROWS_KEY, cls.chunk_rows))


class QuailSession:
    """Plans and runs AI-SQL on a SparkSession.

    Parameters
    ----------
    spark : SparkSession
    model, device : str
        Engine model and device ('cpu', 'cuda' for the GPU Spark assigns each task, 'auto').
    settings : dict, optional
        ``quail.join.maxPartnerRows`` (default 10000), ``quail.batch.rows`` (rows per
        engine call, default 256); else the Spark conf keys of these names, with or without
        a "spark." prefix.
    **engine_conf
        Other ``gpu_worker.EngineConfig`` fields.

    Examples
    --------
    >>> qs = QuailSession(spark)                                                  # doctest: +SKIP
    >>> q = qs.sql("SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body)")  # doctest: +SKIP
    >>> text = q.explain()                                                        # doctest: +SKIP
    >>> rows = q.collect()                                                        # doctest: +SKIP
    >>> q.report["fresh_tokens"] <= q.report["requested_tokens"]                  # doctest: +SKIP
    True
    """

    def __init__(self, spark, model: str = "smollm2-135m", device: str = "cpu",
                 settings: dict | None = None, **engine_conf):
        from quail_spark.spark_catalog import SparkCatalog

        self.spark = spark
        self.engine_conf = executor.engine_conf(model, device, **engine_conf)
        self.settings = Settings.read(spark, settings)
        self.catalog = SparkCatalog(spark, model)
        self.model, self.device = model, device

    def sql(self, text: str) -> "Query":
        """Parse, check, optimize and lower ``text``; nothing runs yet."""
        from quail_spark.parser import parse
        from quail_spark.rules import Context, optimize

        logical = parse(text, self.catalog)  # raises before any job
        ctx = Context(self.catalog, cost_model_for(self.model, self.device))
        return Query(self, text, optimize(logical, ctx), ctx)

    # ------------------------------------------------------------- DataFrame API

    def ai_filter(self, df, template: str, *cols: str, selectivity: float | None = None) -> "Query":
        """Rows of ``df`` for which ``template`` over ``cols`` is TRUE.

        >>> qs.ai_filter(df, "Is {0} a complaint?", "body").to_df()   # doctest: +SKIP
        """
        view = self._view(df)
        return self.sql(f"SELECT * FROM {view} WHERE {_call('ai_if', template, cols, selectivity)}")

    def ai_score(self, df, template: str, *cols: str, alias: str = "score") -> "Query":
        """``df`` with a column ``alias`` = P(TRUE) of ``template``."""
        view = self._view(df)
        return self.sql(f"SELECT *, {_call('ai_score', template, cols)} AS {_ident(alias)} FROM {view}")

    def ai_classify(self, df, col: str, labels, template: str | None = None,
                    alias: str = "label") -> "Query":
        """``df`` with a column ``alias`` holding one of ``labels`` per row."""
        view = self._view(df)
        arr = "array(" + ", ".join(_lit(x) for x in labels) + ")"
        head = f"{_lit(template)}, " if template else ""
        return self.sql(f"SELECT *, ai_classify({head}{_ident(col)}, {arr}) AS {_ident(alias)} FROM {view}")

    def ai_join(self, left, right, template: str, left_col: str, right_col: str,
                anchor: str | None = None) -> "Query":
        """Pairs of rows of ``left`` and ``right`` for which ``template`` is TRUE.

        ``{0}`` is ``left_col``, ``{1}`` is ``right_col``; ``anchor`` ('left' or
        'right') fixes the reused side, else the planner picks it.

        >>> qs.ai_join(reports, terms, "Does {0} mention {1}?", "text", "term").to_df()  # doctest: +SKIP
        """
        lv, rv = self._view(left), self._view(right)
        hint = f", map('anchor', '{'l' if anchor == 'left' else 'r'}')" if anchor else ""
        return self.sql(f"SELECT l.*, r.* FROM {lv} AS l JOIN {rv} AS r ON ai_if({_lit(template)}, "
                        f"l.{_ident(left_col)}, r.{_ident(right_col)}{hint})")

    def _view(self, df) -> str:
        name = f"quail_df_{next(_views)}"
        df.createOrReplaceTempView(name)
        return name


class Query:
    """An optimized, lowered AI-SQL query; lazy until :meth:`collect` or the DataFrame runs."""

    def __init__(self, session: QuailSession, text: str, plan, ctx):
        self.session, self.text, self.plan, self.ctx = session, text, plan, ctx
        sc = session.spark.sparkContext
        self._acc = sc.accumulator(executor.ReportParam().zero(None), executor.ReportParam())
        self._lowering = Lowering(session.spark, session.engine_conf, session.settings, self._acc)
        self._df = self._lowering.lower(plan)
        self._wall = None

    def explain(self, print_it: bool = True) -> str:
        """Logical plan with estimates, filter order, join anchors, totals, then the Spark steps."""
        from quail_spark.explain import explain_logical

        text = explain_logical(self.plan, self.ctx) + "\n" + self._lowering.describe()
        if print_it:
            print(text)
        return text

    def to_df(self):
        """The lazy Spark DataFrame of the query."""
        return self._df

    def collect(self, summary: bool = True) -> list:
        """Run the query; rows as a list of Row. Resets and fills :attr:`report`."""
        self._acc.value = executor.ReportParam().zero(None)
        t0 = time.time()
        rows = self._df.collect()
        self._wall = time.time() - t0
        if summary:
            print(self.summary())
        return rows

    @property
    def report(self) -> dict:
        """What the engines computed in the runs so far (since the last :meth:`collect`).

        Keys: requested_tokens, fresh_tokens, reused_tokens, kv_regret_tokens,
        forward_passes, requests, engine_s (engine seconds summed over tasks),
        wall_s (driver wall clock of :meth:`collect`, else engine_s), tasks, and
        stages = [{op, label, evaluated, passed, selectivity}] in evaluation order.
        """
        acc = self._acc.value or {}
        counters = acc.get("counters", {})
        out = {k: int(counters.get(k, 0)) for k in COUNTERS}
        out["engine_s"] = float(counters.get("wall_s", 0.0))
        out["wall_s"] = self._wall if self._wall is not None else out["engine_s"]
        out["tasks"] = acc.get("tasks", 0)
        out["stages"] = []
        for s in self._lowering.stages:
            got = acc.get("stages", {}).get(s["id"], {"evaluated": 0, "passed": 0})
            ev, ok = got["evaluated"], got["passed"]
            out["stages"].append({"op": s["op"], "label": s["label"], "evaluated": ev, "passed": ok,
                                  "selectivity": ok / ev if ev else None})
        return out

    def summary(self) -> str:
        """One paragraph: tokens, reuse, time, and each AI stage's rows."""
        r = self.report
        req, fresh = r["requested_tokens"], r["fresh_tokens"]
        share = f"{1 - fresh / req:.0%} reused" if req else "nothing requested"
        lines = [f"quail report: {req:,} tokens requested, {fresh:,} computed ({share}), "
                 f"KV regret {r['kv_regret_tokens']:,}; {r['forward_passes']} forward passes in "
                 f"{r['tasks']} tasks; engine {r['engine_s']:.2f} s, wall {r['wall_s']:.2f} s"]
        for i, s in enumerate(r["stages"], 1):
            sel = "-" if s["selectivity"] is None else f"{s['selectivity']:.2f}"
            lines.append(f"  {i}. {s['op']:8s} {s['label']}: evaluated {s['evaluated']}, "
                         f"passed {s['passed']} (selectivity {sel})")
        return "\n".join(lines)


# ------------------------------------------------------------- helpers


def cost_model_for(model: str, device: str):
    """The planner's cost model for an engine model and device (shape read from the engine's
    presets when the planner does not know the model)."""
    from quail_spark.cost import RATES, CostModel, ModelShape, cost_model

    key = "cpu" if device == "cpu" else "cuda"
    try:
        return cost_model(model, key)
    except ValueError:
        pass
    from gpu_worker.config import RANDOM_SHAPES

    m = RANDOM_SHAPES.get(model)
    if m is None:
        return cost_model("smollm2-135m", key)
    shape = ModelShape(model, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                       m.intermediate_size, m.vocab_size)
    return CostModel(shape, RATES["cpu" if key == "cpu" else "h200"])


from quail_spark.presets import load_preset  # noqa: E402,F401  (moved to quail_spark/presets.py)


def _lit(text: str) -> str:
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _call(fn: str, template: str, cols, selectivity=None) -> str:
    if not cols:
        raise TypeError(f"{fn} expected at least one column after the template")
    hint = f", map('selectivity', {float(selectivity)!r})" if selectivity is not None else ""
    return f"{fn}({_lit(template)}, {', '.join(_ident(c) for c in cols)}{hint})"
