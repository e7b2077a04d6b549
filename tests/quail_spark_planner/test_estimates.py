"""Estimates a user can trust: planner inputs measured on a bounded sample of a file source read without
ANALYZE, the prompt frame counted by the model's tokenizer, the engine's measured rates; explain(analyze=True)
beside the run's actuals; qs.estimate; the per-query token budget (refused before work, stopped while running).
Tiny random model (the SmolLM2 tokenizer: token counts are real, answers are not)."""
from __future__ import annotations

import json
import time

import pytest

from quail_spark import QuailSession
from quail_spark.explain import planned_calls, plan_text
from quail_spark.metrics import spans

WORDS = "the parcel arrived late and the box was torn open on one side".split()


def _text(i: int) -> str:
    n = 8 + (i * 7) % 40  # 8 to 47 words: a real spread of lengths
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n)) + f" (note {i})."


@pytest.fixture(scope="module")
def qs(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("estimates")
    notes = [(i, _text(i), "a" if i % 3 == 0 else "b") for i in range(60)]
    spark.createDataFrame(notes, "id int, body string, kind string").coalesce(1).write.parquet(str(d / "notes"))
    spark.createDataFrame([(i, t) for i, t in enumerate(["late", "torn", "box"])], "tid int, term string") \
        .coalesce(1).write.parquet(str(d / "terms"))
    spark.read.parquet(str(d / "notes")).createOrReplaceTempView("est_notes")
    spark.read.parquet(str(d / "terms")).createOrReplaceTempView("est_terms")
    session = QuailSession(spark, model="tiny-llama-random", device="cpu", kv_pool_tokens=8192)
    yield session
    spark.conf.unset("spark.quail.maxTokensPerQuery")


FILTER = "SELECT id FROM est_notes WHERE kind = 'a' AND ai_if('Is {0} about a delivery?', body)"


def _spec(spark, sql: str, kind: str) -> dict:
    return next(s for k, s in planned_calls(plan_text(spark.sql(sql))) if k == kind)


def test_rows_and_document_lengths_come_from_a_sample_of_the_file(qs):
    spec = _spec(qs.spark, FILTER, "chain")
    assert spec["rows"] == 20  # 60 rows in the file (fewer than the sample's limit: exact), kind = 'a' keeps 20
    assert spec["rows_source"].startswith("sample of 60 rows") and spec["tokens_source"].startswith("sample of 60 rows")
    from gpu_worker import weights

    t = weights.load_tokenizer(weights.resolve("tiny-llama-random"))  # the tokenizer's count of the kept rows
    true = [len(t.encode(_text(i), add_special_tokens=False)) for i in range(0, 60, 3)]
    assert spec["doc_tokens"] == pytest.approx(sum(true) / len(true), rel=0.25)


def test_a_dataframe_of_python_rows_is_sampled_too(qs):
    """A DataFrame made from a Python list (an RDD: no statistics, no file) is sampled as a file is; past the
    sample's limit its rows are the RDD's count. Written short side first, the join anchors the long notes."""
    spark = qs.spark
    notes = [(i, _text(i), "a" if i % 3 == 0 else "b") for i in range(60)]
    spark.createDataFrame(notes, "id int, body string, kind string").createOrReplaceTempView("py_notes")
    spark.createDataFrame([(0, "late"), (1, "torn"), (2, "box")], "tid int, term string") \
        .createOrReplaceTempView("py_terms")
    spark.conf.set("spark.quail.sample.rows", "25")
    try:
        spec = _spec(spark, FILTER.replace("est_notes", "py_notes"), "chain")
        join = _spec(spark, "SELECT n.id, t.tid FROM py_terms t JOIN py_notes n "
                            "ON ai_if('Is {0} mentioned in {1}?', t.term, n.body)", "join")
    finally:
        spark.conf.unset("spark.quail.sample.rows")
    assert spec["rows_source"].startswith("sample of 25 rows") and spec["tokens_source"].startswith("sample of 25")
    assert spec["rows"] == pytest.approx(20, rel=0.35)  # 60 rows counted, kind = 'a' kept in the sample's share
    assert join["anchor"] == "n.body" and join["why"] == "cost model"
    assert {s["column"]: s["rows"] for s in join["sides"]} == {"t.term": 3, "n.body": 60}


def test_a_document_made_of_columns_is_sampled_too(qs):
    """A document that is an expression of columns (a cast, a concat) is measured on the sample as a column is,
    not priced at the 300-token default."""
    plain = _spec(qs.spark, "SELECT id FROM est_notes WHERE ai_if('Is {0} late?', body)", "chain")
    joined = _spec(qs.spark, "SELECT id FROM est_notes WHERE ai_if('Is {0} late?', concat(kind, ': ', body))", "chain")
    number = _spec(qs.spark, "SELECT id FROM est_notes WHERE ai_if('Is {0} odd?', CAST(id AS STRING))", "chain")
    for spec in (plain, joined, number):
        assert spec["tokens_source"].startswith("sample of 60 rows"), spec
    assert plain["doc_tokens"] + 1 <= joined["doc_tokens"] <= plain["doc_tokens"] + 6  # "a: " or "b: " more
    assert number["doc_tokens"] <= 4  # 0 to 59: a digit or two


def test_a_second_plan_reads_the_cached_sample(qs):
    _spec(qs.spark, FILTER, "chain")
    assert _spec(qs.spark, FILTER, "chain")["rows_source"] == "sample of 60 rows, cached"


def test_requested_tokens_are_within_one_and_a_half_times_the_run(qs):
    q = qs.sql(FILTER)
    est = q.estimate()
    q.collect(progress=False)
    ratio = est["requested_tokens"] / q.report["requested_tokens"]
    assert 1 / 1.5 <= ratio <= 1.5, (est, q.report)


def test_the_long_side_anchors_a_join_written_short_side_first(qs):
    spec = _spec(qs.spark, "SELECT n.id, t.tid FROM est_notes n JOIN est_terms t "
                           "ON ai_if('Is {0} mentioned in {1}?', t.term, n.body)", "join")
    assert spec["anchor"] == "n.body" and spec["why"] == "cost model"
    assert {s["column"]: s["rows"] for s in spec["sides"]} == {"t.term": 3, "n.body": 60}


def test_the_wall_divides_each_operator_by_the_tasks_that_run_it_at_once(qs):
    """The session runs two tasks at once (local[2]): an operator over two partitions is estimated at half
    its engine seconds, one over a single file split (a coalesced file, or a repartition to one) at all of
    them, and the explain text says so."""
    spread = qs.sql(FILTER.replace("FROM est_notes", "FROM (SELECT * FROM est_notes DISTRIBUTE BY id % 2)"))
    (two,) = spread.estimate()["operators"]
    (one,) = qs.estimate(FILTER)["operators"]
    assert (two["tasks"], one["tasks"]) == (2, 1)
    assert two["seconds"] == pytest.approx(two["engine_seconds"] / 2) and one["seconds"] == one["engine_seconds"]
    assert two["engine_seconds"] == pytest.approx(one["engine_seconds"], rel=1e-6)  # one model, one work
    assert "on 2 tasks at once" in spread.explain(print_it=False)
    assert "tasks at once" not in qs.sql(FILTER).explain(print_it=False)
    partners = qs.sql("SELECT n.id, t.tid FROM (SELECT * FROM est_notes DISTRIBUTE BY id % 2) n JOIN est_terms t "
                      "ON ai_if('Is {0} mentioned in {1}?', t.term, n.body)").estimate()["operators"]
    assert [o["tasks"] for o in partners] == [2]  # the streamed side's partitions, not the broadcast one's


def test_explain_analyze_prints_each_operator_beside_its_actual(qs):
    q = qs.sql(FILTER)
    text = q.explain(print_it=False, analyze=True)
    (op,) = q.estimate()["operators"]
    actual = q.report["ops"][op["op"]]
    assert actual["rows_in"] == 20 and actual["requested_tokens"] > 0
    line = next(x for x in text.splitlines() if op["op"] in x and " | " in x)
    assert f"20 / {actual['rows_in']}" in line and f"/ {actual['requested_tokens']:,}" in line
    assert 0 < actual["wall_s"] <= q.report["wall_s"] and "AI operators' wall" in text


def test_an_operators_wall_is_its_own_runs(qs):
    """The operator's wall spans the batches of the action that reported it: run again (the same operator
    id, its prompts now cached), it is no longer than the second action, though the first run's lines stay in
    the session's metrics files."""
    q = qs.sql(FILTER)
    (op,) = q.estimate()["operators"]
    q.collect(progress=False)
    time.sleep(2.0)
    q.collect(progress=False)
    assert spans(qs.spark, {})[op["op"]] >= 2.0  # both runs' lines are in the files
    assert 0 < q.report["ops"][op["op"]]["wall_s"] <= q.report["wall_s"]


def test_an_estimate_made_before_the_run_names_the_operators_the_run_reports(qs, tmp_path):
    """On a source no plan has sampled yet, the estimate's plan scans the sample and the run's plan reads it
    cached (another rows_source text): the operator ids still line up."""
    qs.spark.read.parquet(qs.spark.table("est_notes").inputFiles()[0]).coalesce(1).write.parquet(str(tmp_path / "n"))
    qs.spark.read.parquet(str(tmp_path / "n")).createOrReplaceTempView("est_fresh")
    q = qs.sql(FILTER.replace("est_notes", "est_fresh"))
    (op,) = q.estimate()["operators"]
    q.collect(progress=False)
    assert q.report["ops"][op["op"]]["rows_in"] == 20
    # the estimate's plan was the first on this source (a scan); later plans read the cached sample
    assert _spec(qs.spark, FILTER.replace("est_notes", "est_fresh"), "chain")["rows_source"].endswith("cached")


def test_a_query_over_its_budget_is_refused_before_any_ai_work(qs):
    import quail_spark

    est = qs.estimate(FILTER)
    before = quail_spark.metrics(qs.spark)["requested_tokens"]
    qs.spark.conf.set("spark.quail.maxTokensPerQuery", str(int(est["requested_tokens"] / 2)))
    try:
        with pytest.raises(Exception, match=r"estimated to request [\d,]+ tokens, more than "
                                            r"spark.quail.maxTokensPerQuery="):
            qs.sql(FILTER).collect(progress=False)
    finally:
        qs.spark.conf.unset("spark.quail.maxTokensPerQuery")
    assert quail_spark.metrics(qs.spark)["requested_tokens"] == before


def test_a_query_passing_its_budget_while_running_is_stopped(qs):
    # a tokens hint far below the truth: the estimate fits the budget, the run does not
    sql = "SELECT id FROM est_notes WHERE ai_if('Is {0} torn?', body, map('tokens', 1))"
    est = qs.estimate(sql)
    qs.spark.conf.set("spark.quail.maxTokensPerQuery", str(int(est["requested_tokens"] * 1.2) + 1))
    try:
        with pytest.raises(Exception, match=r"the query was stopped: its AI operators requested [\d,]+ tokens"):
            qs.sql(sql).collect(progress=False)
    finally:
        qs.spark.conf.unset("spark.quail.maxTokensPerQuery")


def test_the_engine_measures_its_rates_once_and_caches_them(tmp_path):
    from gpu_worker import Engine, EngineConfig, rates, weights

    cfg = EngineConfig(model="tiny-llama-random", device="cpu", kv_pool_tokens=2048, cache_dir=str(tmp_path),
                       tokenizer=str(weights.resolve("smollm2-135m").tokenizer_folder))
    Engine(cfg)
    fig = rates.cached(tmp_path, "tiny-llama-random", "cpu", "float32")
    assert fig["rate"] > 0 and fig["attn_rate"] > 0 and len(fig["tokens_per_s"]) == 2 and fig["prompt_s"] >= 0
    stored = json.loads(rates.path(tmp_path, "tiny-llama-random").read_text())
    Engine(cfg)
    assert json.loads(rates.path(tmp_path, "tiny-llama-random").read_text()) == stored  # read, not measured again


def test_engines_loading_at_once_measure_the_rates_once(tmp_path, monkeypatch):
    """Two engines of one machine reaching the measurement together (two tasks' first loads): one measures, the
    other waits for its figure and reads it (two measurements at once would slow each other)."""
    import threading

    from gpu_worker import Engine, EngineConfig, rates, weights

    eng = Engine(EngineConfig(model="tiny-llama-random", device="cpu", kv_pool_tokens=2048, measure_rate=False,
                              tokenizer=str(weights.resolve("smollm2-135m").tokenizer_folder)))
    calls, real = [], rates._measure
    monkeypatch.setattr(rates, "_measure", lambda *a: calls.append(1) or real(*a))
    got = []
    threads = [threading.Thread(target=lambda: got.append(rates.measure(eng, tmp_path, "k"))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got[0] == got[1] and got[0]["rate"] > 0


def test_rates_measured_at_other_prompt_lengths_are_measured_again(tmp_path):
    """A rates file from an earlier method (the CPU's rates fitted at 32 and 128 tokens a prompt) is not read
    as this method's figure: the engine measures again at its own lengths and replaces it."""
    from gpu_worker import Engine, EngineConfig, rates, weights

    cfg = EngineConfig(model="tiny-llama-random", device="cpu", kv_pool_tokens=2048, cache_dir=str(tmp_path),
                       tokenizer=str(weights.resolve("smollm2-135m").tokenizer_folder))
    stale = {"rate": 1.0, "attn_rate": 1.0, "prompt_tokens": [32, 128], "tokens_per_s": [1, 1]}
    rates.path(tmp_path, "tiny-llama-random").parent.mkdir(parents=True)
    rates.path(tmp_path, "tiny-llama-random").write_text(json.dumps({"cpu/float32": stale}))
    Engine(cfg)
    fig = rates.cached(tmp_path, "tiny-llama-random", "cpu", "float32")
    assert fig["prompt_tokens"] == list(rates.SIZES["cpu"][:2]) and fig["rate"] > 1.0


def test_the_rates_fit_recovers_each_term():
    """t = fresh * a + pairs * b + prompts * c over three calls gives a, b and c back; a term the times do not
    show (negative in the exact solution) is dropped and the others fitted again."""
    from gpu_worker import rates

    a, b, c = 2e-3, 1e-6, 5e-3
    calls = [(512, 20_000, 8), (512, 130_000, 1), (600, 40_000, 48)]
    got = rates._fit([(f, p, n, f * a + p * b + n * c) for f, p, n in calls])
    assert got == pytest.approx((a, b, c), rel=1e-6)
    got = rates._fit([(f, p, n, f * a + p * b - n * c) for f, p, n in calls])
    assert got[2] == 0 and got[0] > 0 and got[1] >= 0
    assert rates._fit([(f, p, n, f * a + p * b) for f, p, n in calls[:2]]) == pytest.approx((a, b, 0), abs=1e-12)


def test_an_engine_whose_prompts_are_short_loads_and_keeps_the_figure_it_finds(tmp_path):
    """max_prompt_tokens below the measuring lengths: the engine loads (before, its timing prompts overflowed
    it whenever no figure was cached), and where a figure at the standard lengths is cached it is read, not
    replaced by one timed on shorter prompts."""
    import dataclasses

    from gpu_worker import Engine, EngineConfig, rates, weights

    cfg = EngineConfig(model="tiny-llama-random", device="cpu", kv_pool_tokens=2048, cache_dir=str(tmp_path / "a"),
                       tokenizer=str(weights.resolve("smollm2-135m").tokenizer_folder), max_prompt_tokens=80)
    assert Engine(cfg).rates is None  # nothing cached, prompts too short to time: the preset prices it
    assert rates.cached(tmp_path / "a", "tiny-llama-random", "cpu", "float32") is None
    wide = dataclasses.replace(cfg, cache_dir=str(tmp_path / "b"), max_prompt_tokens=None)
    Engine(wide)
    stored = rates.path(tmp_path / "b", "tiny-llama-random").read_text()
    Engine(dataclasses.replace(wide, max_prompt_tokens=80))
    assert rates.path(tmp_path / "b", "tiny-llama-random").read_text() == stored


def test_rates_are_measured_within_a_short_context_at_the_gpus_sizes(tmp_path, monkeypatch):
    """The GPU's prompt lengths (512 and 4,096 tokens, capped at half the model's context) on a model of
    2,048 positions: every prompt fits, and a text asked for n tokens has about n, whatever the digits of
    its seed (a tokenizer may split each digit off)."""
    from gpu_worker import Engine, EngineConfig, rates, weights

    monkeypatch.setitem(rates.SIZES, "cpu", (512, 4096, 4096, 0))
    cfg = EngineConfig(model="tiny-llama-random", device="cpu", kv_pool_tokens=8192, cache_dir=str(tmp_path),
                       tokenizer=str(weights.resolve("smollm2-135m").tokenizer_folder))
    eng = Engine(cfg)
    assert eng.rt.max_position == 2048
    fig = rates.cached(tmp_path, "tiny-llama-random", "cpu", "float32")
    assert fig["prompt_tokens"] == [256, 1024] and fig["rate"] > 0
    for n, seed in ((256, 7), (1024, 11_024), (1024, 123_456)):
        assert abs(len(eng.doc_ids(rates._text(eng, n, seed))) - n) <= 0.02 * n
