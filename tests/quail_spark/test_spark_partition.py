"""Executor-side pieces without Spark: the body of ArrowMapper / with_ai_columns and of the enrichment
job (gpu_worker.ai_columns) on a small random-weight engine, device binding, engine settings and the
SQL function bodies' type checks."""
from __future__ import annotations

import pyarrow as pa
import pytest

from gpu_worker import ai_columns as cols
from gpu_worker.ai_calls import Call, evaluate
from quail_spark import executor

DOCS = ["a red apple on the table", None, "the train left the station late", "two cats and a dog", "  ",
        "rain all day long", "word " * 200, "a tall glass of cold milk"]
TOPICS = ["fruit", "cats", "trains", None, "dogs", "weather", "words", "milk"]
COLUMNS = (cols.AIColumn("food", "", Call("if", "Is {0} about food?", 1), ("body",)),
           cols.AIColumn("p", "", Call("score", "Is {0} about animals?", 1), ("body",)),
           cols.AIColumn("kind", "", Call("classify", "{0}", 1, ("x", "y")), ("body",)),
           cols.AIColumn("about", "", Call("if", "Is {0} about {1}?", 2), ("body", "topic")))


@pytest.fixture(scope="module")
def tiny():
    from gpu_worker import Engine, EngineConfig

    # seed 1 answers both ways; 96 tokens make row 6 too long under on_overflow='error'
    return Engine(EngineConfig(model="tiny-llama-random", device="cpu", seed=1, max_prompt_tokens=96))


def batches(rows: int = 3):
    return pa.table({"id": list(range(len(DOCS))), "body": DOCS, "topic": TOPICS}).to_batches(max_chunksize=rows)


def test_chunks_gather_small_batches():
    assert [t.num_rows for t in cols.chunks(batches(2), 5, 0)] == [6, 2]
    assert [t.num_rows for t in cols.chunks(batches(2), 2, 0)] == [2, 2, 2, 2]
    assert [t.num_rows for t in cols.chunks(batches(2))] == [8]  # defaults: >= 256 rows and 1 MiB


def test_with_columns_equals_the_one_evaluation_and_names_the_row_it_cannot_score(tiny):
    out = pa.Table.from_batches(list(cols.with_columns(lambda: tiny, COLUMNS, batches())))
    assert out.column_names == ["id", "body", "topic", "food", "p", "kind", "about", "_ai_error"]
    assert out.column("id").to_pylist() == list(range(len(DOCS)))  # every row, in order
    ok = [r for r in range(len(DOCS)) if r != 6]
    for c in COLUMNS:
        values = [[(DOCS, TOPICS)[("body", "topic").index(x)][r] for r in ok] for x in c.inputs]
        want = evaluate(tiny, c.call, values)
        got = [out.column(c.name)[r].as_py() for r in ok]
        assert got == (pytest.approx(want, abs=1e-6) if c.call.kind == "score" else want), c.name
    errors = out.column("_ai_error").to_pylist()
    assert [r for r, e in enumerate(errors) if e] == [6]
    assert [e.split(":")[0] for e in errors[6].split("; ")] == ["food", "p", "kind", "about"]
    assert "prompt too long" in errors[6] and out.column("food")[6].as_py() is None
    assert {out.column("food")[r].as_py() for r in ok} == {True, False, None}  # both answers, NULL rows


def test_need_masks_and_undecodable_text(tiny):
    table = pa.table({"body": pa.array([b"a red apple", b"\xff\xfe bad", b"rain"], pa.binary())})
    col = cols.AIColumn("food", "", Call("if", "Is {0} about food?", 1), ("body",))
    got = cols.evaluate_batch(lambda: tiny, [col], table, need=[[True, True, False]])
    assert got.values[0][2] is None and got.values[0][0] is not None  # row 2 not asked
    assert got.errors == [[], ["food: undecodable text in column 'body' (invalid start byte at byte 0)"], []]
    assert got.failed == [{1}] and got.counters["requested_tokens"] > 0


def test_a_failing_engine_raises_or_becomes_each_rows_reason():
    def broken():
        raise RuntimeError("no device")

    table = pa.table({"body": ["a", None]})
    col = cols.AIColumn("c", "", Call("if", "Is {0} ok?", 1), ("body",))
    with pytest.raises(RuntimeError, match="no device"):
        cols.evaluate_batch(broken, [col], table)
    got = cols.evaluate_batch(broken, [col], table, on_failure=lambda e: f"failed: {e}")
    assert got.errors == [["c: failed: no device"], []]  # the NULL row needs no engine


def test_device_binding_without_a_task():
    assert executor.task_device("cpu") == "cpu" and executor.task_device("cuda:1") == "cuda:1"
    import torch

    assert executor.task_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


def test_cuda_in_local_mode_is_the_machines_gpu(spark):
    # local mode has no resource scheduling: no task is ever assigned a GPU
    assert executor.session_device(spark, "cuda") == "cuda:0"
    assert executor.session_device(spark, "cpu") == "cpu" and executor.session_device(spark, "auto") == "auto"


def test_engine_conf_is_checked_on_the_driver():
    assert executor.engine_conf("tiny-llama-random", "cpu", token_budget=64)["token_budget"] == 64
    with pytest.raises(ValueError, match="token_budget"):
        executor.engine_conf(token_budget=1)


def test_sql_function_bodies_refuse_a_non_string_document():
    """The Arrow UDF bodies check types too (a session without the extension's check rule reaches them)."""
    with pytest.raises(TypeError, match=r"ai_if: argument 2 is a document and must be a string column, got int64"):
        executor._check_strings("ai_if", pa.array(["Is {0} old?"]), [pa.array([1])])
    # a template read from a column: NULL or blank in a row gives NULL there (the NULL rule), the rest grouped
    groups = executor._parsed("ai_if", [pa.array([None, " ", "Is {0} old?", "Is {0} new?", "Is {0} old?"]),
                                        pa.array(["a", "b", "c", "d", "e"])])
    assert [(c.template, rows, vals) for c, rows, vals in groups] == [
        ("Is {0} old?", [2, 4], [["c", "e"]]), ("Is {0} new?", [3], [["d"]])]
    with pytest.raises(ValueError, match=r"ai_if: row 1 of an Arrow batch of partition 0 .*\{1\}"):
        executor._parsed("ai_if", [pa.array(["Is {0} old?", "Is {0} like {1}?"]), pa.array(["a", "b"])])
    executor._check_strings("ai_if", pa.array(["Is {0} old?"]), [pa.array([None], pa.null()), pa.array(["x"])])
