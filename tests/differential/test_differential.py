"""Differential tests: seeded random AI-SQL queries (grammar.py) give the rows a SQLite oracle gives
(oracle.py: the relational part SQLite's, each AI value the engine's for that row's prompt) on every
path (paths.py: rules on and off, QuailSession in Spark's and BigQuery / Snowflake spellings,
with_ai_columns). A new failure is shrunk and its minimal query is the failure message.

CI checks a fixed small set (SEEDS x QUERIES); ``pytest tests/differential --seeds N [--queries M]``
or ``python -m tests.differential.run --seeds N --queries M`` checks more."""
from __future__ import annotations

import pytest

from .check import check, shrink
from .grammar import Gen
from .known import KNOWN

SEEDS, QUERIES = (0, 1), 3
REQUIRED = {  # the grammar's shapes a run of the fixed seeds' grammar (not executed) must produce
    "logic_not@where", "logic_or@where", "logic_case@where", "tmpl_col@on:outer", "tmpl_col@sub",
    "anchor_alias@on:inner", "anchor_col@on:outer", "ai_join@on:inner", "ai_join@on:outer", "ai_join@on:semi",
    "between@on:inner", "score_cmp@where", "exists@sub", "not_exists@sub", "in@sub", "in2@sub", "group",
    "window_rank@select", "window_sum@select", "union", "cte", "limit", "limit_unordered", "classify@select",
    "nested@on:outer", "doc_over_both@on:inner", "nan_bound@on:inner", "three_inner", "projection",
    "generate@select", "summarize@select", "extract@select", "generate@where", "extract@where", "decode@projection",
}


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        seeds = metafunc.config.getoption("--seeds")
        n = metafunc.config.getoption("--queries") or (QUERIES if seeds is None else 50)
        cases = [(seed, i) for seed in (SEEDS if seeds is None else range(seeds)) for i in range(n)]
        metafunc.parametrize("case", cases, ids=[f"seed{s}-q{i}" for s, i in cases])


def queries(seed: int, n: int) -> list:
    gen = Gen(seed)
    return [gen.query() for _ in range(n)]


@pytest.fixture(scope="module")
def oracle():
    from gpu_worker import Engine, EngineConfig

    from .oracle import Oracle

    return Oracle(Engine(EngineConfig(model="tiny-llama-random", device="cpu")))


@pytest.fixture(scope="module")
def paths(spark):
    import quail_spark

    from .paths import Paths

    yield Paths(spark)
    quail_spark.install(spark, model="smollm2-135m", device="cpu")  # the other tests' model again


def test_the_grammar_covers_the_shapes():
    tags = set().union(*(q.shape for seed in range(5) for q in queries(seed, 200)))
    assert REQUIRED <= tags, f"shapes the grammar did not produce: {sorted(REQUIRED - tags)}"


def test_the_same_seed_gives_the_same_queries():
    assert [q.text("spark") for q in queries(3, 20)] == [q.text("spark") for q in queries(3, 20)]
    assert [q.text("spark") for q in queries(3, 20)] != [q.text("spark") for q in queries(4, 20)]


def test_the_oracle_answers_yes_no_and_null(oracle):
    rows = oracle.rows("SELECT d.id, ai_if('Is {0} a complaint?', d.body), ai_if('Does {0} mention {1}?', d.body, "
                       "t.term, map('anchor_arg', 1)) FROM d d CROSS JOIN t t")
    assert {r[1] for r in rows} == {0, 1, None} and {r[2] for r in rows} == {0, 1, None}, rows


def test_the_oracle_places_the_anchor(oracle):
    """The anchor hint changes the prompt, so the oracle must read it (a margin differs)."""
    sql = "SELECT ai_score('Does {0} mention {1}?', d.body, t.term, map('anchor_arg', %d)) FROM d d, t t " \
          "WHERE d.id = 1 AND t.tid = 10"
    assert oracle.rows(sql % 0) != oracle.rows(sql % 1)


def test_same_rows_as_the_oracle_on_every_path(oracle, paths, case):
    seed, i = case
    q = queries(seed, i + 1)[i]
    out = check(oracle, paths, q)
    if out.kind == "wrong":
        small, got = shrink(oracle, paths, q, out, budget_s=120)
        pytest.fail("minimal failing query:\n" + got.message(small) + "\n(generated: " + q.text("spark") + ")")
    assert out.kind in ("agreed", "refused", "tie") or out.kind.removeprefix("known:") in KNOWN, out.kind
