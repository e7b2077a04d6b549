"""A :class:`quail_spark.catalog.Catalog` over the tables and temp views of a SparkSession.

Schemas come from the DataFrame of each table (no job). Row counts are a
``count()`` and mean document tokens come from a small sample tokenized with
the model's own tokenizer (loaded from the converted model cache, no model
weights). Both are computed once per table contents: the cache key includes the
DataFrame's semantic hash, so a replaced temp view is measured again.
"""
from __future__ import annotations

import math

SAMPLE_ROWS = 64
CHARS_PER_TOKEN = 4.0


class SparkCatalog:
    """Tables, schemas and statistics of a SparkSession, for the planner.

    Parameters
    ----------
    spark : SparkSession
    model : str
        Model whose tokenizer counts document tokens.
    sample_rows : int
        Rows sampled per column for mean token counts.

    Examples
    --------
    >>> spark.createDataFrame([(1, "short note")], "id int, body string") \\
    ...     .createOrReplaceTempView("notes")                     # doctest: +SKIP
    >>> cat = SparkCatalog(spark)                                 # doctest: +SKIP
    >>> cat.columns("notes"), cat.row_count("notes")              # doctest: +SKIP
    ({'id': 'int', 'body': 'string'}, 1)
    """

    def __init__(self, spark, model: str = "smollm2-135m", sample_rows: int = SAMPLE_ROWS):
        self.spark = spark
        self.model = model
        self.sample_rows = sample_rows
        self._stats: dict = {}
        self._tokenizer = None

    def tables(self) -> tuple:
        return tuple(t.name for t in self.spark.catalog.listTables())

    def frame(self, table: str):
        """The DataFrame of ``table``; KeyError when it does not exist."""
        from pyspark.errors import AnalysisException

        try:
            return self.spark.table(table)
        except AnalysisException:
            raise KeyError(table) from None

    def columns(self, table: str) -> dict:
        return {f.name: f.dataType.simpleString() for f in self.frame(table).schema.fields}

    def row_count(self, table: str) -> int:
        df = self.frame(table)
        return self._cached(("rows", table, df.semanticHash()), df.count)

    def avg_tokens(self, table: str, column: str) -> float:
        from pyspark.sql import functions as F

        df = self.frame(table)

        def measure() -> float:
            rows = (df.select(F.col(_quote(column)).cast("string").alias("v"))
                    .where(F.col("v").isNotNull()).limit(self.sample_rows).collect())
            texts = [r.v for r in rows]
            if not texts:
                return 1.0
            return max(1.0, sum(self.count_tokens(texts)) / len(texts))

        return self._cached(("tokens", table, column, df.semanticHash()), measure)

    def count_tokens(self, texts: list) -> list:
        """Token counts of ``texts`` with the model's tokenizer (length / 4 if it cannot load)."""
        tok = self.tokenizer()
        if tok is None:
            return [math.ceil(len(t) / CHARS_PER_TOKEN) for t in texts]
        return [len(ids) for ids in tok(list(texts), add_special_tokens=False)["input_ids"]]

    def tokenizer(self):
        if self._tokenizer is None:
            try:
                from gpu_worker import weights

                self._tokenizer = weights.load_tokenizer(weights.resolve(self.model))
            except (OSError, ValueError, ImportError):
                self._tokenizer = False
        return self._tokenizer or None

    def _cached(self, key, compute):
        if key not in self._stats:
            self._stats[key] = compute()
        return self._stats[key]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
