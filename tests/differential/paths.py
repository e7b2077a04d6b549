"""Every path a query can run on, and its rows as a comparable multiset: spark.sql with the quail
rules on and off, QuailSession (Spark's spelling, and the BigQuery or Snowflake spelling where the
query has one), and ArrowMapper / with_ai_columns for a projection of AI columns over one table."""
from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal

RULES = "spark.quail.optimizer.enabled"
MODEL = {"model": "tiny-llama-random", "device": "cpu", "kv_pool_tokens": 4096}
OURS = ("quail", "ai_if", "ai_score", "ai_classify", "ai_filter", "anchor", "template", "hint", "PythonUDF",
        "PYTHON_UDF", "PythonException", "prompt")


def norm(v):
    """A cell as compared: booleans as 0 / 1 (SQLite's), numbers rounded to 6 places."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, float):
        return v if math.isnan(v) else round(v, 6) + 0.0
    return v


def multiset(rows) -> Counter:
    return Counter(tuple(norm(v) for v in r) for r in rows)


def same(a: Counter, b: Counter, counts_only: bool = False) -> bool:
    """Equal multisets (or sizes); floats equal within 1e-5 (the same prompt batched otherwise)."""
    if counts_only:
        return sum(a.values()) == sum(b.values())
    if a == b:
        return True
    ra, rb = sorted(a.elements(), key=row_key), sorted(b.elements(), key=row_key)
    return len(ra) == len(rb) and all(len(x) == len(y) and all(close(u, v) for u, v in zip(x, y))
                                      for x, y in zip(ra, rb))


def row_key(row):
    return tuple((v is None, round(v, 3) if isinstance(v, float) else v if v is not None else 0, str(type(v)))
                 for v in row)


def close(u, v) -> bool:
    if isinstance(u, float) and isinstance(v, (int, float)) or isinstance(v, float) and isinstance(u, (int, float)):
        return abs(u - v) <= 1e-5
    return u == v


def whose(message: str) -> str:
    """'ours' when a refusal comes from quail-spark (its rules, functions or front end), else 'spark'."""
    return "ours" if any(m in message for m in OURS) else "spark"


def first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


class Paths:
    """The paths of one SparkSession with the random model installed."""

    def __init__(self, spark):
        import quail_spark

        from .tables import register_spark

        self.spark = spark
        register_spark(spark)
        quail_spark.install(spark, **MODEL)
        self.qs = quail_spark.QuailSession(spark, **MODEL)

    def run(self, q) -> dict:
        """path name -> Counter of rows, or the refusal's text (a str)."""
        out = {"rules_on": self._sql(q.text("spark"), True), "rules_off": self._sql(q.text("spark"), False),
               "quail_session": self._guard(lambda: self.qs.sql(q.text("spark")).collect(progress=False))}
        for spelling, name in (("bq", "quail_session_bigquery"), ("sf", "quail_session_snowflake")):
            text = q.text(spelling)
            if text is not None and text != q.text("spark"):
                out[name] = self._guard(lambda t=text: self.qs.sql(t).collect(progress=False))
                break  # one foreign spelling per query
        form = q.mapper_form()
        if form is not None:
            out["with_ai_columns"] = self._guard(lambda: self._mapper(*form))
        return out

    def _sql(self, text: str, rules: bool):
        self.spark.conf.set(RULES, "true" if rules else "false")
        try:
            return self._guard(lambda: self.spark.sql(text).collect())
        finally:
            self.spark.conf.set(RULES, "true")

    def _mapper(self, table: str, items):
        import quail_spark

        ai = {name: text for name, text, is_ai in items if is_ai}
        df = quail_spark.with_ai_columns(self.spark.table(table), ai, **MODEL)
        from pyspark.sql import functions as F

        return df.select(*[F.col(name if is_ai else text).alias(name) for name, text, is_ai in items]).collect()

    @staticmethod
    def _guard(fn):
        try:
            return multiset(fn())
        except Exception as e:  # noqa: BLE001 - a refusal is a result here, compared across paths
            return first_line(e)
