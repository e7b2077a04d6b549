"""quail_spark.metrics and the reductions of the optimizer rules, rules on vs off in one session.

The engine of a Python worker keeps its prefix cache across queries, so the two runs of a
comparison read tables of the same shape with different documents (``batch`` numbers the
documents): neither run finds the other's KV.
"""
from __future__ import annotations

import itertools

import pytest

import quail_spark

SMOL = {"model": "smollm2-135m", "device": "cpu", "kv_pool_tokens": 8192}  # the engine of test_quail_rows
TINY = {"model": "tiny-llama-random", "device": "cpu", "kv_pool_tokens": 1024}  # holds ~3 anchors' KV
BADLY_ORDERED = (  # the most selective predicate (by hint, and by SmolLM2's answers) written last
    "SELECT id FROM {docs} WHERE ai_if('Is {{0}} written in French?', body, map('selectivity', 0.9)) "
    "AND ai_if('Is {{0}} about shopping?', body, map('selectivity', 0.9)) "
    "AND ai_if('Is {{0}} about astronomy?', body, map('selectivity', 0.05))")
JOIN = "SELECT t.tid, r.id FROM terms t JOIN {reports} r ON ai_if('Does {{0}} mention {{1}}?', r.body, t.term)"
NOTE = "Customer note {i}: the order {i} was late, the box was broken and support did not answer."
REPORT = ("Report {i}. The patient, case number {i}, was admitted on day {i} with a persistent cough, "
          "fever and fatigue. " + " ".join(f"Observation {{i}}.{j}: vital signs were recorded, the dose "
                                           f"was adjusted and the nurse noted item {j}." for j in range(12)))
_batches = itertools.count()


def table(spark, template: str, n: int) -> str:
    """A new temp view of ``n`` documents numbered apart from every other view's."""
    b = next(_batches)
    name = f"docs_{b}"
    rows = [(i, template.format(i=1000 * b + i)) for i in range(n)]
    spark.createDataFrame(rows, "id int, body string").createOrReplaceTempView(name)
    return name


def measure(spark, query, on: bool) -> dict:
    """Metrics delta of one query (collected) with the rules on or off."""
    spark.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    before = quail_spark.metrics(spark)
    (spark.sql(query) if isinstance(query, str) else query()).collect()
    after = quail_spark.metrics(spark)
    return {k: after[k] - before[k] for k in after if k not in ("stages", "ops")}  # (ops: per operator)


@pytest.fixture(scope="module")
def session(spark, tables):
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")


def chain_df(spark, docs: str):
    return spark.table(docs).filter(
        quail_spark.ai_if("Is {0} written in French?", "body", hint={"selectivity": 0.9})
        & quail_spark.ai_if("Is {0} about shopping?", "body", hint={"selectivity": 0.9})
        & quail_spark.ai_if("Is {0} about astronomy?", "body", hint={"selectivity": 0.05})).select("id")


def join_df(spark, reports: str):
    t, r = spark.table("terms"), spark.table(reports)
    return t.join(r, quail_spark.ai_if("Does {0} mention {1}?", r.body, t.term)).select(t.tid, r.id)


def query(api: str, spark, sql: str, df_fn, **views):
    return sql.format(**views) if api == "sql" else (lambda: df_fn(spark, *views.values()))


@pytest.mark.parametrize("api", ["sql", "dataframe"])
def test_chain_reduction(session, api):
    quail_spark.install(session, **SMOL)
    off = measure(session, query(api, session, BADLY_ORDERED, chain_df, docs=table(session, NOTE, 12)), False)
    on = measure(session, query(api, session, BADLY_ORDERED, chain_df, docs=table(session, NOTE, 12)), True)
    print(f"\nchain ({api}): off {off}\n  on {on}")
    assert on["requested_tokens"] <= 0.5 * off["requested_tokens"]
    assert on["fresh_tokens"] <= off["fresh_tokens"]


@pytest.mark.parametrize("api", ["sql", "dataframe"])
def test_join_reduction(session, api):
    """Anchors of ~230 tokens, partners of <= 4 tokens; terms first in FROM (pairs in partner order)."""
    quail_spark.install(session, **TINY)
    off = measure(session, query(api, session, JOIN, join_df, reports=table(session, REPORT, 6)), False)
    on = measure(session, query(api, session, JOIN, join_df, reports=table(session, REPORT, 6)), True)
    print(f"\njoin ({api}): off {off}\n  on {on}")
    assert on["fresh_tokens"] <= 0.5 * off["fresh_tokens"]


def test_metrics_count_stages_and_requests(session):
    quail_spark.install(session, **TINY)
    docs = table(session, NOTE, 12)
    before = quail_spark.metrics(session)
    session.sql(f"SELECT id FROM {docs} WHERE ai_if('Is {{0}} late?', body)").collect()
    after = quail_spark.metrics(session)
    name = "filter: Is the document late?"
    assert after["stages"][name]["evaluated"] - before["stages"].get(name, {}).get("evaluated", 0) == 12
    assert after["requested_tokens"] > before["requested_tokens"] and after["forward_passes"] > before["forward_passes"]


def test_cuda_without_an_assigned_gpu_is_an_error(session):
    """Inside a Spark task that was assigned no GPU, 'cuda' names the missing resource."""
    from quail_spark import executor

    def probe(batches):
        for b in batches:
            executor.task_device("cuda")
            yield b

    with pytest.raises(Exception, match=r"assigned this task no GPU"):
        session.range(1).mapInArrow(probe, "id long").collect()


@pytest.mark.parametrize("on", [True, False])
def test_truncated_rows_reach_the_metrics(session, on):
    """on_overflow='truncate' keeps every row and counts each cut document in quail_spark.metrics."""
    quail_spark.install(session, **TINY, max_prompt_tokens=80, on_overflow="truncate")
    docs = table(session, NOTE + " More words follow here." * 8, 3)
    before = quail_spark.metrics(session)
    spark_rows = measure(session, f"SELECT id, ai_score('Is {{0}} late?', body) AS p FROM {docs}", on)
    assert spark_rows["truncated_rows"] == 3
    got = session.sql(f"SELECT count(ai_score('Is {{0}} late?', body)) FROM {docs}").first()[0]
    assert got == 3 and quail_spark.metrics(session)["truncated_rows"] - before["truncated_rows"] >= 6


THREE_CALLS = ("SELECT id, ai_if('Is {{0}} about a cough?', body) AS a, ai_score('Was {{0}} written by a nurse?', "
               "body) AS s, ai_score('Does {{0}} mention a dose?', body) AS d FROM {docs}")
ONE_CALL = "SELECT id, ai_score('Was {{0}} written by a nurse?', body) AS s FROM {docs}"


def test_three_calls_over_one_document_compute_it_once(session):
    """Three AI calls of a SELECT over one document compute <= 1.35x the fresh tokens of one call
    (each query over documents no earlier query saw). A pool of ~2 documents' KV: without the
    rule each call's UDF recomputes the batch's documents."""
    quail_spark.install(session, **{**TINY, "kv_pool_tokens": 512})
    one = measure(session, ONE_CALL.format(docs=table(session, REPORT, 8)), True)
    three = measure(session, THREE_CALLS.format(docs=table(session, REPORT, 8)), True)
    off = measure(session, THREE_CALLS.format(docs=table(session, REPORT, 8)), False)
    print(f"\nfresh tokens: one call {one['fresh_tokens']}, three calls {three['fresh_tokens']} "
          f"(rules off {off['fresh_tokens']})")
    assert three["fresh_tokens"] <= 1.35 * one["fresh_tokens"]
    assert off["fresh_tokens"] > 1.35 * one["fresh_tokens"]  # the rule, not the cache, keeps it low


def test_a_failed_collect_reports_the_work_done_before_it(session):
    """QuailSession's report after a collect that failed in a task (one over-long row) is the metrics
    difference around it, the rows scored before the failure included, not 'has not run yet'."""
    qs = quail_spark.QuailSession(session, **TINY, max_prompt_tokens=80)
    rows = [(i, NOTE.format(i=i)) for i in range(5)] + [(9, "word " * 200)]
    session.createDataFrame(rows, "id int, body string").repartition(1).createOrReplaceTempView("one_too_long")
    q = qs.sql("SELECT id FROM one_too_long WHERE ai_if('Is {0} late?', body)")
    with pytest.raises(Exception, match="prompt has"):
        q.collect(progress=False)
    assert q.report["requested_tokens"] > 0 and "has not run" not in q.summary()
