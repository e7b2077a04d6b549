"""What the cost model's plans save, measured by quail_spark.metrics on a seeded random model.

The engine of a Python worker keeps its prefix cache across queries, so every measured query
reads documents no earlier query of the session saw (``fresh_docs`` numbers them apart).
"""
from __future__ import annotations

import itertools

import pytest

import quail_spark
from quail_spark.explain import planned_calls, plan_text
from spark_fixtures import TERMS

TINY = {"model": "tiny-llama-random", "device": "cpu", "kv_pool_tokens": 8192}
REPORT = ("Report {i}. The patient, case number {i}, was admitted on day {i} with a persistent cough, "
          "fever and fatigue. " + " ".join(f"Observation {{i}}.{j}: vital signs were recorded, the dose "
                                           f"was adjusted and the nurse noted item {j}." for j in range(10)))
SHORT_FIRST = "SELECT n.id, t.tid FROM {notes} n JOIN {terms} t ON ai_if('Is {{0}} mentioned in {{1}}?', t.term, n.body{hint})"
LONG_FIRST = "SELECT n.id, t.tid FROM {notes} n JOIN {terms} t ON ai_if('Does {{0}} mention {{1}}?', n.body, t.term{hint})"
# the expensive (long reports x terms), unselective join written first; the cheap, selective one second
THREE_WAY = ("SELECT n.id, t.tid, c.cid FROM {notes} n "
             "JOIN terms t ON ai_if('Does {{0}} mention {{1}}?', n.body, t.term, map('selectivity', 0.9)) "
             "JOIN cats c ON ai_if('Is {{0}} a kind of {{1}}?', t.term, c.cat, map('selectivity', 0.1))")
_batches = itertools.count(1)


@pytest.fixture(scope="module")
def session(spark, tables):
    quail_spark.install(spark, **TINY)
    yield spark
    spark.conf.set("spark.quail.optimizer.enabled", "true")


def fresh_docs(spark, n: int, tmp_path=None) -> tuple[str, str]:
    """(notes, terms) of reports and terms no earlier query saw; with ``tmp_path`` catalog tables
    with column statistics (ANALYZE TABLE), else temp views (no statistics)."""
    b = next(_batches)
    notes = spark.createDataFrame([(i, REPORT.format(i=100_000 * b + i)) for i in range(n)], "id int, body string")
    terms = spark.createDataFrame([(tid, f"{term} {b}") for tid, term, _ in TERMS], "tid int, term string")
    names = (f"pm_notes_{b}", f"pm_terms_{b}")
    for df, name, col in ((notes, names[0], "body"), (terms, names[1], "term")):
        if tmp_path is None:
            df.createOrReplaceTempView(name)
        else:
            df.write.option("path", str(tmp_path / name)).saveAsTable(name)
            spark.sql(f"ANALYZE TABLE {name} COMPUTE STATISTICS FOR COLUMNS {col}")
    return names


def measure(spark, sql: str, on: bool = True) -> dict:
    spark.conf.set("spark.quail.optimizer.enabled", str(on).lower())
    before = quail_spark.metrics(spark)
    rows = spark.sql(sql).collect()
    after = quail_spark.metrics(spark)
    return {"rows": len(rows), **{k: after[k] - before[k] for k in ("requested_tokens", "fresh_tokens")}}


@pytest.mark.parametrize("source", ["statistics", "hint"])
def test_a_join_spelled_short_side_first_computes_what_the_long_side_first_does(session, tmp_path, source):
    """The renderer puts the longer value first in both spellings; the cost model, from ANALYZE's
    avgLen or from tokens hints, makes the reports the anchor (streamed, sorted by), terms broadcast."""
    hints = {"statistics": ("", ""), "hint": (", map('tokens', 3, 'tokens_1', 200)", ", map('tokens', 200, 'tokens_1', 3)")}
    got = {}
    for name, sql, hint in (("short", SHORT_FIRST, hints[source][0]), ("long", LONG_FIRST, hints[source][1])):
        notes, terms = fresh_docs(session, 10, tmp_path if source == "statistics" else None)
        query = sql.format(notes=notes, terms=terms, hint=hint)
        (_, spec), = planned_calls(plan_text(session.sql(query), "extended"))
        assert spec["anchor"] == "n.body" and spec["why"] == "cost model", spec
        assert {s["tokens_source"] for s in spec["sides"]} == {source}
        got[name] = measure(session, query)
    print(f"\njoin spelled short side first {got['short']}, long side first {got['long']}")
    assert got["short"]["fresh_tokens"] <= 1.3 * got["long"]["fresh_tokens"]


def test_a_three_way_query_runs_its_selective_ai_join_first(session):
    """Written: reports x terms (every pair a long prompt; the model answers yes to nearly all),
    then x cats. Planned: terms x cats first (short prompts; the model answers yes to 1 pair in 8),
    then the survivors x reports."""
    got = {on: measure(session, THREE_WAY.format(notes=fresh_docs(session, 6)[0]), on) for on in (False, True)}
    print(f"\nthree-way: rules off {got[False]}, on {got[True]}")
    assert got[True]["rows"] > 0 and got[False]["rows"] > 0  # both predicates pass some pairs
    assert got[True]["requested_tokens"] <= 0.6 * got[False]["requested_tokens"]


def test_a_filter_on_an_ai_column_evaluates_the_call_once(session):
    """withColumn("s", ai_score(...)).where("s > x"): Spark would write the alias out into the
    filter and run the call again in the projection; with the rules on it runs once, on the rows the
    relational conjunct keeps (the tokens of one evaluation of those rows), and gives the rows it
    gives with the rules off."""
    notes, _ = fresh_docs(session, 6)
    score = "ai_score('Is {0} about a cough?', body)"
    once = f"SELECT id, {score} AS s FROM {notes} WHERE id > 1"
    nested = f"SELECT * FROM (SELECT id, {score} AS s FROM {notes}) WHERE s > -1 AND id > 1"
    got, base = measure(session, nested), measure(session, once)
    assert got["rows"] > 0 and got["requested_tokens"] == base["requested_tokens"] > 0
    chained = session.table(notes).selectExpr("id", f"{score} AS s").where("s > -1").where("id > 1")
    before = quail_spark.metrics(session)
    rows = chained.collect()
    assert quail_spark.metrics(session)["requested_tokens"] - before["requested_tokens"] == base["requested_tokens"]
    session.conf.set("spark.quail.optimizer.enabled", "false")
    try:
        off = sorted((r.id, round(r.s, 4)) for r in session.sql(nested).collect())
    finally:
        session.conf.set("spark.quail.optimizer.enabled", "true")
    assert off == sorted((r.id, round(r.s, 4)) for r in rows)


def test_explain_prices_each_reordered_join_at_the_pairs_the_order_priced(session):
    """The joins of a reordered three-way query are priced at the survivor-thinned pairs the order was
    chosen with: their costs add up to the chosen order's, and explain's total is that figure."""
    import re

    from quail_spark.explain import explain_plan, plan_text

    text = explain_plan(plan_text(session.sql(THREE_WAY.format(notes="notes"))))
    chosen = float(re.search(r"chosen: .* cost (\S+) s", text).group(1))
    total = float(re.search(r"the planned AI calls: .* SoL (\S+) s", text).group(1))
    assert text.count("pairs (join order, survivor-thinned)") == 2
    assert total == pytest.approx(chosen, rel=0.01)


def test_rows_the_driver_holds_give_the_cost_model_their_lengths(session):
    """A VALUES list (a LocalRelation, as Spark Connect's createDataFrame makes too) has no statistics: the
    cost model measures its documents, so the join written short side first anchors the long reports."""
    reports = ", ".join(f"({i}, '{REPORT.format(i=i)}')" for i in range(4))
    session.sql(f"CREATE OR REPLACE TEMP VIEW local_notes AS SELECT * FROM VALUES {reports} AS v(id, body)")
    session.sql("CREATE OR REPLACE TEMP VIEW local_terms AS SELECT * FROM VALUES (1, 'cough'), (2, 'rash') AS v(tid, term)")
    query = SHORT_FIRST.format(notes="local_notes", terms="local_terms", hint="")
    (_, spec), = planned_calls(plan_text(session.sql(query), "extended"))
    assert spec["anchor"] == "n.body" and spec["why"] == "cost model", spec
    assert [s["tokens_source"] for s in spec["sides"]] == ["in-memory rows"] * 2
    from quail_spark.calibration import pieces

    body = next(s for s in spec["sides"] if s["column"] == "n.body")  # word pieces x the tokenizer's tokens per piece
    per_piece = float(session.conf.get("spark.quail.model.tokens_per_piece"))
    assert body["tokens"] == pytest.approx(sum(len(pieces(REPORT.format(i=i))) for i in range(4)) / 4 * per_piece,
                                           rel=0.01)


def test_parquet_files_without_statistics_anchor_the_long_side_by_a_sample(session, tmp_path):
    """Parquet files read without ANALYZE: the planner samples them for rows and document lengths, so the
    cost model anchors the long reports whichever column the template names first, and both spellings
    compute about the same."""
    got = {}
    for name, sql in (("short", SHORT_FIRST), ("long", LONG_FIRST)):
        notes, terms = fresh_docs(session, 10)
        paths = {}
        for view in (notes, terms):
            paths[view] = str(tmp_path / view)
            session.table(view).write.parquet(paths[view])
            session.read.parquet(paths[view]).createOrReplaceTempView(view)
        query = sql.format(notes=notes, terms=terms, hint="")
        (_, spec), = planned_calls(plan_text(session.sql(query), "extended"))
        assert spec["anchor"] == "n.body" and spec["why"] == "cost model", spec
        assert all(s["tokens_source"].startswith("sample of ") for s in spec["sides"]), spec
        got[name] = measure(session, query)
    assert got["short"]["fresh_tokens"] <= 1.3 * got["long"]["fresh_tokens"], got
