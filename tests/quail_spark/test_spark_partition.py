"""Executor-side pieces without Spark: documents, chunking, the partition entry points on a
small random-weight engine, device binding, report merging and SQL-function templates."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpu_worker import partition as part
from quail_spark import executor

DOCS = ["a red apple on the table", None, "the train left the station late", "two cats and a dog",
        "rain all day long", "a tall glass of cold milk"]
QUESTIONS = ["Is the document about food?", "Is the document about animals?"]


@pytest.fixture(scope="module")
def tiny():
    from gpu_worker import Engine, EngineConfig

    # seed 1 answers the filters below both ways, so the pipeline keeps some rows and drops some
    return Engine(EngineConfig(model="tiny-llama-random", device="cpu", seed=1, max_prompt_tokens=96))


def pairs_of(out_batches) -> list:
    return sorted((r["id"], r["tid"]) for b in out_batches for r in b.to_pylist())


def batches(rows: int = 2):
    table = pa.table({"id": list(range(len(DOCS))), "body": DOCS})
    return table.to_batches(max_chunksize=rows)


def test_documents_are_name_value_lines():
    table = pa.table({"a": ["x", None, None], "b": ["y", "z", None]})
    assert part.Doc(("a",), ("a",)).texts(table) == ["x", None, None]
    two = part.Doc(("a", "b"), ("title", "body")).texts(table)
    assert two[:2] == ["title: x\nbody: y", "title: \nbody: z"]
    assert two[2] is None  # every column NULL: no document
    assert part.Doc(("a",), ("a",)).texts(table, [2, 0]) == [None, "x"]


def test_chunks_gather_small_batches():
    sizes = [t.num_rows for t in part.chunks(batches(2), 5)]
    assert sizes == [6] and [t.num_rows for t in part.chunks(batches(2), 2, 0)] == [2, 2, 2]


def test_pipeline_is_the_chain_then_columns(tiny):
    spec = part.PipelineSpec(
        predicates=tuple(part.Predicate(part.Doc(("body",), ("body",)), q, f"s{i}") for i, q in enumerate(QUESTIONS)),
        columns=(part.AddColumn("score", "p", part.Doc(("body",), ("body",)), QUESTIONS[0], "s9"),
                 part.AddColumn("classify", "c", part.Doc(("body",), ("body",)), "", "s8", ("x", "y"))),
        chunk_rows=3)
    rec = part.Recorder()
    out = pa.Table.from_batches(list(part.run_pipeline(tiny, batches(), spec, rec)))
    m = tiny.filter(DOCS, QUESTIONS)
    want = [i for i in range(len(DOCS)) if DOCS[i] is not None and (m[i] > 0).all()]
    assert out.column("id").to_pylist() == want and 0 < len(want) < 5
    assert np.allclose(out.column("p").to_numpy(), 1 / (1 + np.exp(-m[want, 0])), atol=1e-4)
    assert set(out.column("c").to_pylist()) <= {"x", "y"}
    assert rec.stages["s0"]["evaluated"] == 5 and rec.stages["s1"]["evaluated"] == rec.stages["s0"]["passed"]
    assert rec.counters["requested_tokens"] > rec.counters["fresh_tokens"] > 0


def test_pipeline_limit_stops_early(tiny):
    spec = part.PipelineSpec(columns=(part.AddColumn("score", "p", part.Doc(("body",), ("body",)),
                                                     QUESTIONS[0], "s1"),), chunk_rows=2, limit=3)
    rec = part.Recorder()
    out = pa.Table.from_batches(list(part.run_pipeline(tiny, batches(), spec, rec)))
    assert out.num_rows == 3 and rec.stages["s1"]["evaluated"] <= 4


def test_cross_join_and_pair_join_agree_with_the_engine(naive):
    eng = naive.eng  # SmolLM2: the random models answer every pair alike
    anchors = ["The parcel arrived broken and nobody at the shop answers my emails.",
               "Refund me now, this blender broke after two days and is junk."]
    terms = ["a dog", "a phone", "football", "a kitchen"]
    q = "Does DOCUMENT 1 mention DOCUMENT 2?"
    partners = pa.array([{"tid": i + 1, "term": t} for i, t in enumerate(terms)])
    table = pa.table({"id": [1, 3], "body": anchors,
                      "ps": pa.array([partners.to_pylist()] * 2, pa.list_(partners.type))})
    spec = part.JoinSpec(part.Doc(("body",), ("body",)), part.Doc(("term",), ("term",)), q, "j", partners="ps")
    rec = part.Recorder()
    cross = pairs_of(part.run_join_cross(eng, table.to_batches(1), spec, rec))
    m = eng.join(anchors, terms, q)
    want = sorted(([1, 3][a], p + 1) for a, p in zip(*np.nonzero(m > 0)))
    assert cross == want and 0 < len(want) < 8, f"expected answers of both kinds, margins {m}"
    assert rec.stages["j"] == {"evaluated": 8, "passed": len(want)}
    pairs = pa.table({"id": [1] * 4 + [3] * 4, "body": [anchors[0]] * 4 + [anchors[1]] * 4,
                      "tid": [1, 2, 3, 4] * 2, "term": terms * 2})
    assert pairs_of(part.run_join_pairs(eng, pairs.to_batches(3), spec, part.Recorder())) == want


def test_too_many_partners_names_the_setting(tiny):
    partners = [{"term": str(i)} for i in range(3)]
    anchors = pa.table({"body": ["a"], "ps": [partners]})
    spec = part.JoinSpec(part.Doc(("body",), ("body",)), part.Doc(("term",), ("term",)), "q?", "j",
                         partners="ps", max_partners=2)
    with pytest.raises(part.RowError, match="quail.join.maxPartnerRows"):
        list(part.run_join_cross(tiny, anchors.to_batches(), spec, part.Recorder()))


def test_prompt_too_long_names_column_and_row(tiny):
    spec = part.PipelineSpec(predicates=(part.Predicate(part.Doc(("body",), ("body",)), QUESTIONS[0], "s"),))
    table = pa.table({"body": ["short", "word " * 200]})
    with pytest.raises(part.RowError, match=r"document column 'body', row 1 .*'word word"):
        list(part.run_pipeline(tiny, table.to_batches(), spec, part.Recorder(), lambda i: f"row {i}"))


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
    with pytest.raises(ValueError, match=r"the template is NULL in 1 row"):
        executor._check_strings("ai_if", pa.array([None], pa.string()), [pa.array(["text"])])
    executor._check_strings("ai_if", pa.array(["Is {0} old?"]), [pa.array([None], pa.null()), pa.array(["x"])])
