"""ArrowMapper, with_ai_columns and spark.sql over one table, in a classic or a Spark Connect session.

Used by test_arrow_mapper.py in this process (classic) and in the Connect subprocess of
connect_queries.py (``builder.remote``); also runnable alone: ``python tests/quail_spark/mapper_queries.py``
prints one JSON line.
"""
from __future__ import annotations

import os
import sys

# a seeded random model answers both ways; a small context makes row 6 over-long under on_overflow='error'
TINY = {"model": "tiny-llama-random", "device": "cpu", "seed": 1, "max_prompt_tokens": 128}
COLUMNS = {"complaint": "ai_if('Is {0} a complaint?', body)",
           "urgency": "ai_score('Does {0} need an answer today?', body)",
           "label": "ai_classify(body, array('bug', 'praise'))",
           "mentions": "ai_if('Does {0} mention {1}?', body, topic)"}
ROWS = """VALUES (1, 'The parcel arrived broken and nobody answers my emails.', 'parcel'),
  (2, 'We took a lovely long walk in the park with our old dog.', 'dog'),
  (3, CAST(NULL AS STRING), 'cat'), (4, '   ', 'rain'),
  (5, 'Refund me now, this blender broke after two days.', 'kitchen'),
  (6, repeat('word ', 300), 'word'), (7, CAST(unhex('FF61') AS STRING), 'bytes'),
  (8, 'I love this phone, the battery lasts for days.', CAST(NULL AS STRING)),
  (9, 'The cat sleeps all afternoon on the warm sofa.', 'cat'),
  (10, 'Python lists are mutable sequences of objects.', 'code') AS t(id, body, topic)"""
BAD = (6, 7)  # over-long prompt; text that is not UTF-8: spark.sql fails on them, ArrowMapper names them


def table(spark):
    return spark.sql(f"SELECT * FROM {ROWS}").repartition(2, "id")


def run(spark) -> dict:
    """Rows (sorted by id) of mapInArrow(ArrowMapper), with_ai_columns and spark.sql, and metrics."""
    import quail_spark

    quail_spark.install(spark, **TINY)
    df = table(spark)
    before = quail_spark.metrics(spark)
    m = quail_spark.ArrowMapper(df.schema, COLUMNS, **TINY)
    mapped = _rows(df.mapInArrow(m, m.schema))
    after = quail_spark.metrics(spark)
    with_cols = _rows(quail_spark.with_ai_columns(df, COLUMNS, **TINY))
    df.where(f"id NOT IN {BAD}").createOrReplaceTempView("m_notes")
    sql = _rows(spark.sql(f"SELECT id, {', '.join(f'{e} AS {n}' for n, e in COLUMNS.items())} FROM m_notes"))
    return {"schema": m.schema.fieldNames(), "df_schema": df.mapInArrow(m, m.schema).columns,
            "mapped": mapped, "with_ai_columns": with_cols, "sql": sql,
            "metrics": {k: after[k] - before[k] for k in ("requested_tokens", "errored_rows")}}


def _rows(df) -> list:
    """Rows without the document column (a Connect client cannot decode row 7's text)."""
    return sorted([list(r) for r in df.drop("body").collect()], key=lambda r: r[0])


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import connect_queries

    connect_queries.main(run)
