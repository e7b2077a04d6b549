"""ArrowMapper and with_ai_columns: the values of spark.sql for the same expressions, on a table with
NULL, blank, over-long and undecodable rows (the last two get _ai_error, their neighbours are scored),
on local[2] and under Spark Connect; counters in quail_spark.metrics; the SQL functions' engines."""
from __future__ import annotations

import re

import pytest

import mapper_queries as mq  # noqa: E402  (beside this file, like spark_fixtures)

NAMES = list(mq.COLUMNS)


@pytest.fixture(scope="module")
def classic(spark, connect_results):
    return mq.run(spark)  # (the Connect session's subprocess runs meanwhile)


def check(got: dict) -> None:
    assert got["schema"] == got["df_schema"] == ["id", "body", "topic", *NAMES, "_ai_error"]
    assert got["mapped"] == got["with_ai_columns"]
    sql = {r[0]: r[1:] for r in got["sql"]}
    for row in got["mapped"]:
        key, values, error = row[0], row[2:-1], row[-1]
        if key in mq.BAD:
            assert values == [None] * len(NAMES)
            why = "prompt too long: 3\\d\\d tokens, the model's context holds 128" if key == 6 else \
                "undecodable text in column 'body'"
            assert [part.split(": ", 1)[0] for part in error.split("; ")] == NAMES, error
            assert all(re.search(why, part) for part in error.split("; ")), error
        else:
            assert error is None, (key, error)
            want = sql[key]
            assert values[0::2] == want[0::2], key  # ai_if and ai_classify: equal
            # the same prompt in another batch: float32 summation order differs with the packing (~1e-6)
            assert values[1] == pytest.approx(want[1], abs=1e-5) if want[1] is not None else values[1] is None
    by_id = {r[0]: r[2:-1] for r in got["mapped"]}
    assert by_id[3] == by_id[4] == [None] * len(NAMES)  # NULL and blank documents: NULL, no error
    assert by_id[8][:3] != [None] * 3 and by_id[8][3] is None  # a NULL second document: that call only
    assert {v[0] for v in by_id.values()} == {True, False, None}  # margins of both signs
    assert {v[3] for v in by_id.values()} == {True, False, None}
    assert {v[2] for v in by_id.values()} == {"bug", "praise", None}
    assert got["metrics"]["errored_rows"] == 2 and got["metrics"]["requested_tokens"] > 0


def test_values_equal_spark_sql_and_bad_rows_get_ai_error(classic):
    check(classic)


def test_under_spark_connect_as_in_the_classic_session(classic, connect_results):
    got = connect_results()["mapper"]  # (conftest.py: one Connect session for this file and test_connect.py)
    check(got)
    assert got["mapped"] == classic["mapped"]


def test_smollm2_values_equal_spark_sql(spark):
    import quail_spark

    smol = {"model": "smollm2-135m", "device": "cpu"}
    quail_spark.install(spark, **smol)
    cols = {"complaint": "ai_if('Is {0} a complaint?', body)", "p": "ai_score('Is {0} about a pet?', body)"}
    df = spark.createDataFrame([(1, "My parcel never arrived and the shop ignores me."),
                                (2, "Our old dog sleeps by the window."), (3, None)], "id int, body string")
    df.createOrReplaceTempView("smol_notes")
    got = sorted(quail_spark.with_ai_columns(df, cols, **smol).collect())
    want = sorted(spark.sql(f"SELECT id, body, {', '.join(f'{e} AS {n}' for n, e in cols.items())} "
                            "FROM smol_notes").collect())
    assert [(r.id, r.complaint, r._ai_error) for r in got] == [(r.id, r.complaint, None) for r in want]
    assert [r.p for r in got] == pytest.approx([r.p for r in want], abs=1e-5) and got[2].p is None


def test_the_sql_functions_engine_is_reused(spark):
    """One engine per worker for the same settings: ai_if of spark.sql, then ArrowMapper, in one worker."""
    import quail_spark
    from gpu_worker import EngineConfig

    conf = {**mq.TINY, "seed": 3}
    quail_spark.install(spark, **conf)
    df = spark.createDataFrame([(1, "a red apple")], "id int, body string").coalesce(1)
    df.createOrReplaceTempView("one_note")
    spark.sql("SELECT ai_if('Is {0} food?', body) FROM one_note").collect()
    quail_spark.with_ai_columns(df, {"food": "ai_if('Is {0} food?', body)"}, **conf).collect()

    def keys(_):  # one task, run by the idle worker of the two jobs above (workers are reused)
        import pyarrow as pa

        import gpu_worker

        yield pa.RecordBatch.from_arrays([pa.array(list(gpu_worker._ENGINES), pa.string())], names=["k"])

    found = {r.k for r in spark.range(0, 1, 1, 1).mapInArrow(keys, "k string").collect()}
    same = [k for k in found if "('seed', 3)" in k]
    assert same == [EngineConfig(**conf).key()], found  # the two paths built one engine, not two


def test_columns_are_checked_on_the_driver(spark):
    import quail_spark

    df = spark.createDataFrame([(1, "a", 2)], "id int, body string, n int")
    with pytest.raises(ValueError, match="input column 'text' is not in the input schema"):
        quail_spark.ArrowMapper(df.schema, {"c": "ai_if('Is {0} ok?', text)"}, **mq.TINY)
    with pytest.raises(TypeError, match="input column 'n' is int; a document must be a string"):
        quail_spark.ArrowMapper(df.schema, {"c": "ai_if('Is {0} ok?', n)"}, **mq.TINY)
    with pytest.raises(ValueError, match="column 'body': the name is taken"):
        quail_spark.ArrowMapper(df.schema, {"body": "ai_if('Is {0} ok?', body)"}, **mq.TINY)
    with pytest.raises(ValueError, match="column 'BODY': the name is taken by 'body'"):  # names ignore case
        quail_spark.ArrowMapper(df.schema, {"BODY": "ai_if('Is {0} ok?', body)"}, **mq.TINY)
    m = quail_spark.ArrowMapper(df.schema, {"c": "ai_if('Is {0} ok?', BODY)"}, **mq.TINY)  # as spark.sql reads it
    assert m.columns[0].inputs == ("body",)
    two = spark.createDataFrame([(1, "a", "b")], "id int, body string, Body string")
    with pytest.raises(ValueError, match="the input already has an '_ai_error' column"):  # a second with_ai_columns
        quail_spark.ArrowMapper(spark.createDataFrame([(1, "a", None)], "id int, body string, _ai_error string")
                                .schema, {"c": "ai_if('Is {0} ok?', body)"}, **mq.TINY)
    with pytest.raises(ValueError, match="'BODY' is ambiguous"):
        quail_spark.ArrowMapper(two.schema, {"c": "ai_if('Is {0} ok?', BODY)"}, **mq.TINY)
    with pytest.raises(ValueError, match="expected one AI call"):
        quail_spark.ArrowMapper(df.schema, {"c": "upper(body)"}, **mq.TINY)


def test_with_ai_columns_computes_expression_arguments_as_spark_sql_does(spark):
    """concat(...) / lower(...) as documents: with_ai_columns has Spark compute them (the columns it adds
    are dropped again) and gives spark.sql's values; ArrowMapper, which maps batches as they come, says
    to use with_ai_columns; an expression that does not resolve, or is not text, is named."""
    import quail_spark

    quail_spark.install(spark, **mq.TINY)
    df = mq.table(spark).where(f"id NOT IN {mq.BAD}")
    cols = {"c": "ai_if('Is {0} a complaint?', concat(topic, ': ', body))",
            "s": "ai_score('Does {0} mention {1}?', lower(body), topic)"}
    out = quail_spark.with_ai_columns(df, cols, **mq.TINY)
    assert out.columns == ["id", "body", "topic", "c", "s", "_ai_error"]
    got = {r.id: (r.c, r.s) for r in out.collect()}
    df.createOrReplaceTempView("expr_rows")
    want = {r[0]: (r[1], r[2]) for r in spark.sql(f"SELECT id, {cols['c']}, {cols['s']} FROM expr_rows").collect()}
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in want.items()}
    assert {v[0] for v in want.values()} >= {True, False}
    for k, v in want.items():
        assert got[k][1] == pytest.approx(v[1], abs=1e-5) if v[1] is not None else got[k][1] is None

    errors = {r.id: r._ai_error for r in quail_spark.with_ai_columns(  # the bad rows: the expression named
        mq.table(spark), {"c": "ai_if('Is {0} ok?', concat(body, '!'))"}, **mq.TINY).select("id", "_ai_error").collect()}
    assert errors[7].startswith("c: undecodable text in argument \"CONCAT(body, '!')\"") and errors[1] is None, errors
    with pytest.raises(ValueError, match="is an expression; ArrowMapper maps the batches as they come"):
        quail_spark.ArrowMapper(df.schema, cols, **mq.TINY)
    with pytest.raises(ValueError, match=r"argument 'CONCAT\(nope, body\)' does not resolve.*nope"):
        quail_spark.with_ai_columns(df, {"c": "ai_if('Is {0} ok?', concat(nope, body))"}, **mq.TINY)
    with pytest.raises(TypeError, match=r"argument 'LENGTH\(body\)' is int"):
        quail_spark.with_ai_columns(df, {"c": "ai_if('Is {0} ok?', length(body))"}, **mq.TINY)
