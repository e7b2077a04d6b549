"""Decode calls as AI columns: ArrowMapper and with_ai_columns give spark.sql's rows for ai_generate,
ai_extract and ai_summarize (NULL, blank and over-long documents; fields cut at max_tokens named in
_ai_error), and an extracted object's values are what Spark's from_json makes of the same JSON."""
from __future__ import annotations

import json
import re

import pytest

TINY = {"model": "tiny-llama-random", "device": "cpu", "seed": 1, "max_prompt_tokens": 128}
SCHEMA = "name STRING, age INT, born DATE, ok BOOLEAN, tags ARRAY<STRING>"
COLUMNS = {"rec": f"ai_extract(body, '{SCHEMA}', map('max_tokens', 12))",
           "reply": "ai_generate('Reply in one line to {0}', body, map('max_tokens', 8))",
           "gist": "ai_summarize(body, 5)"}
ROWS = """VALUES (1, 'Maria Lopez, 34, moved to Porto on 2021-03-14 and paid 1,250 EUR.'),
  (2, 'Jonas Berg lives in Lyon.'), (3, CAST(NULL AS STRING)), (4, '   '),
  (5, repeat('word ', 300)), (6, 'Refund of 80 dollars issued to Aiko Tanaka on May 2, 2020.') AS t(id, body)"""
LONG = 5


# ------------------------------------------------------------ JSON -> Arrow, as from_json reads it

OBJECTS = [
    {"name": "Ann", "age": 34, "big": 2 ** 40, "small": 300, "when": "2021-03-14", "at": "2021-03-14T10:20:30",
     "at_z": "2021-03-14T10:20:30+02:00", "x": 2.5, "f": 1, "ok": True, "tags": ["a", None, "b"],
     "inner": {"k": "v", "n": 7}},
    {"name": None, "age": 2 ** 33, "big": -5, "small": -129, "when": "2021-02-30", "at": None, "at_z": None,
     "x": 3, "f": None, "ok": False, "tags": [], "inner": None},
    {"name": "O'Brien \u00e9", "age": None, "big": None, "small": 5, "when": None, "at": "1999-12-31T23:59:59",
     "at_z": "2000-01-01T00:00:00Z", "x": None, "f": 0.5, "ok": None, "tags": None, "inner": {"k": None, "n": None}},
]
TYPES = ("name STRING, age INT, big BIGINT, small TINYINT, when DATE, at TIMESTAMP, at_z TIMESTAMP, x DOUBLE, "
         "f FLOAT, ok BOOLEAN, tags ARRAY<STRING>, inner STRUCT<k: STRING, n: SMALLINT>")


def test_struct_values_equal_from_json_of_the_same_json(spark):
    """Each object through spark_value into the Arrow struct (mapInArrow) against from_json of its text."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructType

    from gpu_worker.ai_columns import arrow_type, spark_value

    st = StructType.fromDDL(TYPES)
    schema = st.jsonValue()
    assert arrow_type(schema) == to_arrow_type(st, timezone="UTC")  # the type pyspark gives the struct
    tz = spark.conf.get("spark.sql.session.timeZone")
    df = spark.createDataFrame([(i, json.dumps(o)) for i, o in enumerate(OBJECTS)], "id int, js string")

    def convert(batches):
        for b in batches:
            vals = [spark_value(json.loads(s), schema, tz) for s in b.column("js").to_pylist()]
            yield pa.RecordBatch.from_arrays([b.column("id"), pa.array(vals, arrow_type(schema))], ["id", "v"])

    got = df.mapInArrow(convert, StructType.fromDDL(f"id int, v struct<{TYPES}>")).orderBy("id").collect()
    want = df.select("id", F.from_json("js", st).alias("v")).orderBy("id").collect()
    assert got == want
    assert want[1].v.age is None and want[1].v.when is None and want[0].v.tags == ["a", None, "b"]


# ------------------------------------------------------------ the three paths over one table


@pytest.fixture(scope="module")
def paths(spark):
    import quail_spark

    quail_spark.install(spark, **TINY)
    df = spark.sql(f"SELECT * FROM {ROWS}").repartition(2, "id")
    m = quail_spark.ArrowMapper(df.schema, COLUMNS, **TINY)
    mapped = df.mapInArrow(m, m.schema)
    df.where(f"id != {LONG}").createOrReplaceTempView("decode_notes")
    sql = spark.sql(f"SELECT id, {', '.join(f'{e} AS {n}' for n, e in COLUMNS.items())} FROM decode_notes")
    return {"schema": m.schema, "mapped": rows(mapped), "with": rows(quail_spark.with_ai_columns(df, COLUMNS, **TINY)),
            "sql": rows(sql), "sql_schema": sql.schema}


def rows(df) -> dict:
    return {r["id"]: r.asDict(recursive=True) for r in df.collect()}


def test_schema_is_spark_sqls(paths):
    from pyspark.sql.types import StructType

    schema = paths["schema"]
    assert schema.fieldNames() == ["id", "body", "rec", "reply", "gist", "_ai_error"]
    assert schema["rec"].dataType == StructType.fromDDL(SCHEMA)
    for name in COLUMNS:
        assert schema[name].dataType == paths["sql_schema"][name].dataType, name


def test_values_equal_spark_sql(paths):
    assert paths["mapped"] == paths["with"]
    for key, want in paths["sql"].items():
        got = paths["mapped"][key]
        assert {n: got[n] for n in COLUMNS} == {n: want[n] for n in COLUMNS}, key
    texts = [r["reply"] for k, r in paths["mapped"].items() if k in (1, 2, 6)]
    assert all(isinstance(t, str) for t in texts)  # generated text on every document row


def test_null_blank_and_over_long_documents(paths):
    got = paths["mapped"]
    for key in (3, 4):  # the NULL rule: no prompt, NULL, no error
        assert [got[key][n] for n in (*COLUMNS, "_ai_error")] == [None] * 4, key
    assert [got[LONG][n] for n in COLUMNS] == [None] * 3
    parts = got[LONG]["_ai_error"].split("; ")
    assert [p.split(": ", 1)[0] for p in parts] == list(COLUMNS), parts
    assert all(re.search(r"prompt too long: \d+ tokens, the model's context holds 128", p) for p in parts)


def test_cut_fields_are_null_and_named(paths):
    """With 12 tokens a field, the random model runs out on some fields (its strings go on): those are
    NULL and each is named in _ai_error; the fields it finished keep their values."""
    cut, done = set(), set()
    for key in (1, 2, 6):
        r = paths["mapped"][key]
        named = re.findall(r"rec: field '(\w+)' cut at max_tokens 12", r["_ai_error"] or "")
        assert (r["_ai_error"] or "").count("rec: ") == len(named), r["_ai_error"]
        assert all(r["rec"][f] is None for f in named), (key, named, r["rec"])
        cut |= set(named)
        done |= {f for f, v in r["rec"].items() if v is not None}
    assert cut and done, (cut, done)  # both paths reached


def test_smollm2_extract_equals_spark_sql(spark):
    import quail_spark

    smol = {"model": "smollm2-135m", "device": "cpu"}
    quail_spark.install(spark, **smol)
    cols = {"who": "ai_extract(body, 'name STRING, age INT, city STRING')"}
    df = spark.createDataFrame([(1, "Maria Lopez, 34, moved to Porto last spring."),
                                (2, "Jonas Berg is 51 and lives in Lyon."), (3, None)], "id int, body string")
    df.createOrReplaceTempView("smol_people")
    got = rows(quail_spark.with_ai_columns(df, cols, **smol))
    want = rows(spark.sql(f"SELECT id, {cols['who']} AS who FROM smol_people"))
    assert {k: r["who"] for k, r in got.items()} == {k: r["who"] for k, r in want.items()}
    assert any(v is not None for k in (1, 2) for v in got[k]["who"].values())  # some answer finished and parsed
    assert got[3]["who"] is None and got[3]["_ai_error"] is None
