"""quail_spark.metrics and the reductions of the optimizer rules, rules on vs off in one session.

Each measurement starts from a cold engine (``fresh_install``): the engine of a Python worker keeps
its prefix cache across queries, so a second run would otherwise reuse the first one's KV.
"""
from __future__ import annotations

import itertools

import pytest
from pyspark.sql import functions as F

import quail_spark

BADLY_ORDERED = (  # the most selective predicate (by hint, and by SmolLM2's answers) written last
    "SELECT id FROM docs WHERE ai_if('Is {0} written in French?', body, map('selectivity', 0.9)) "
    "AND ai_if('Is {0} about shopping?', body, map('selectivity', 0.9)) "
    "AND ai_if('Is {0} about astronomy?', body, map('selectivity', 0.05))")
JOIN = "SELECT t.tid, r.id FROM terms t JOIN reports r ON ai_if('Does {0} mention {1}?', r.body, t.term)"
_engines = itertools.count()
DOCS = [f"Customer note {i}: the order {i} was late, the box was broken and support did not answer." for i in range(12)]
ANCHOR = ("Report {i}. The patient, case number {i}, was admitted on day {i} with a persistent cough, "
          "fever and fatigue. " + " ".join(f"Observation {{i}}.{j}: vital signs were recorded, the dose "
                                           f"was adjusted and the nurse noted item {j}." for j in range(12)))


def fresh_install(spark, model: str, **conf):
    """install() with an engine configuration no worker has built yet (``max_prompt_tokens`` differs
    and changes no prompt here), so the measurement starts without cached KV."""
    quail_spark.install(spark, model=model, device="cpu", max_prompt_tokens=4000 + next(_engines), **conf)


def measure(spark, query, on: bool) -> tuple[list, dict]:
    """(rows, metrics delta) of one query with the rules on or off."""
    spark.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    before = quail_spark.metrics(spark)
    df = spark.sql(query) if isinstance(query, str) else query()
    rows = sorted(tuple(r) for r in df.collect())
    after = quail_spark.metrics(spark)
    return rows, {k: after[k] - before[k] for k in after if k != "stages"}


@pytest.fixture(scope="module")
def data(spark, tables):
    spark.createDataFrame(list(enumerate(DOCS)), "id int, body string").createOrReplaceTempView("docs")
    reports = [(i, ANCHOR.format(i=i)) for i in range(6)]
    spark.createDataFrame(reports, "id int, body string").createOrReplaceTempView("reports")
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")


def _chain_df(spark):
    return spark.table("docs").filter(
        quail_spark.ai_if("Is {0} written in French?", "body", hint={"selectivity": 0.9})
        & quail_spark.ai_if("Is {0} about shopping?", "body", hint={"selectivity": 0.9})
        & quail_spark.ai_if("Is {0} about astronomy?", "body", hint={"selectivity": 0.05})).select("id")


@pytest.mark.parametrize("api", ["sql", "dataframe"])
def test_chain_reduction(data, api):
    query = BADLY_ORDERED if api == "sql" else (lambda: _chain_df(data))
    fresh_install(data, "smollm2-135m")
    rows_off, off = measure(data, query, on=False)
    fresh_install(data, "smollm2-135m")
    rows_on, on = measure(data, query, on=True)
    print(f"chain ({api}): off {off}\n  on {on}")
    assert rows_on == rows_off
    assert on["requested_tokens"] <= 0.5 * off["requested_tokens"]
    assert on["fresh_tokens"] <= off["fresh_tokens"]


@pytest.mark.parametrize("api", ["sql", "dataframe"])
def test_join_reduction(data, api):
    def join_df():
        t, r = data.table("terms"), data.table("reports")
        return t.join(r, quail_spark.ai_if("Does {0} mention {1}?", r.body, t.term)).select(t.tid, r.id)

    query = JOIN if api == "sql" else join_df
    fresh_install(data, "tiny-llama-random", kv_pool_tokens=1024)
    rows_off, off = measure(data, query, on=False)
    fresh_install(data, "tiny-llama-random", kv_pool_tokens=1024)
    rows_on, on = measure(data, query, on=True)
    print(f"join ({api}): off {off}\n  on {on}")
    assert rows_on == rows_off
    assert on["fresh_tokens"] <= 0.5 * off["fresh_tokens"]


def test_metrics_count_stages_and_requests(data):
    fresh_install(data, "tiny-llama-random")
    before = quail_spark.metrics(data)
    data.sql("SELECT id FROM docs WHERE ai_if('Is {0} late?', body)").collect()
    after = quail_spark.metrics(data)
    stage = after["stages"]["filter: Is the document late?"]
    assert stage["evaluated"] - before["stages"].get("filter: Is the document late?", {}).get("evaluated", 0) == 12
    assert after["requested_tokens"] > before["requested_tokens"] and after["forward_passes"] > before["forward_passes"]


def test_cuda_without_an_assigned_gpu_is_an_error(data):
    quail_spark.install(data, model="tiny-llama-random", device="cuda")
    with pytest.raises(Exception, match=r"assigned this task no GPU"):
        data.sql("SELECT id FROM docs WHERE ai_if('Is {0} late?', body)").collect()
