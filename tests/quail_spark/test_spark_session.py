"""QuailSession end to end on local[2]: the optimised path returns exactly the rows of a
naive evaluation (every (row, predicate) scored alone, no reuse, written order), and its
report shows the work it saved."""
from __future__ import annotations

import numpy as np
import pytest
from spark_fixtures import (NOTES, TERMS, UNCERTAIN, bodies, classify_naive, expected_filter, question,
                            same_rows)

from quail_spark import plan as P

LONG = "Is {0} longer than five words?"      # the model answers yes for most notes
COMPLAINT = "Is {0} a complaint?"            # ... no for most
ANIMAL = "Is {0} about an animal?"           # ... no for most
LABELS = ("shopping", "pets", "sports")


def ids(rows, key="id"):
    return [r[key] for r in rows]


def run(qs, sql):
    q = qs.sql(sql)
    return q, q.collect(summary=False)


# ------------------------------------------------------------------ filters


def test_filter(qs, naive):
    q, rows = run(qs, f"SELECT id FROM notes WHERE ai_if('{LONG}', body)")
    same_rows(ids(rows), *expected_filter(naive, [LONG]))
    assert q.report["stages"][0]["evaluated"] == 7  # the NULL body is not evaluated


def test_badly_ordered_chain_runs_in_rank_order_and_saves_tokens(qs, naive):
    written = [(LONG, 0.9), (COMPLAINT, 0.5), (ANIMAL, 0.1)]  # least selective first
    where = " AND ".join(f"ai_if('{t}', body, map('selectivity', {s}))" for t, s in written)
    q, rows = run(qs, f"SELECT id FROM notes WHERE {where}")
    same_rows(ids(rows), *expected_filter(naive, [t for t, _ in written]))
    stages = q.report["stages"]
    assert [s["label"].split("'")[1] for s in stages] == [ANIMAL, COMPLAINT, LONG]
    assert stages[0]["evaluated"] == 7
    for before, after in zip(stages, stages[1:]):  # short-circuit AND
        assert after["evaluated"] == before["passed"]
    # naive: written order, each (row, predicate) alone until a row fails
    naive_fresh = 0
    for body in (b for b in bodies() if b is not None):
        for t, _ in written:
            naive_fresh += naive.filter_tokens(body, question(t))
            if naive.margins([body], question(t))[body] <= 0:
                break
    assert q.report["fresh_tokens"] <= naive_fresh / 2, (q.report, naive_fresh)
    assert q.report["fresh_tokens"] < q.report["requested_tokens"]


def test_mixed_relational_and_ai_predicates(qs, naive):
    sql = (f"SELECT id, kind FROM notes WHERE year >= 2020 AND ai_if('{LONG}', body) "
           "AND kind IN ('shop', 'life')")
    q, rows = run(qs, sql)
    subset = [n for n in NOTES if n[2] >= 2020 and n[3] in ("shop", "life")]
    same_rows(ids(rows), *expected_filter(naive, [LONG], subset))
    assert q.report["stages"][0]["evaluated"] == sum(n[1] is not None for n in subset)
    assert "filter (Spark)" in q.explain(print_it=False)


def test_limit(qs, naive):
    _, rows = run(qs, f"SELECT id FROM notes WHERE ai_filter('{LONG}', body) LIMIT 2")
    expected, unsure = expected_filter(naive, [LONG])
    assert set(ids(rows)) <= set(expected) | set(unsure)
    assert len(rows) == min(2, len(expected))


@pytest.mark.parametrize("sql", [
    f"SELECT id FROM notes WHERE AI.IF(PROMPT('{ANIMAL}', body))",        # BigQuery
    "SELECT id FROM notes WHERE AI.IF(('Is ', body, ' about an animal?'))",  # BigQuery, concatenated
    f"SELECT id FROM notes WHERE AI_FILTER(PROMPT('{ANIMAL}', body))",      # Snowflake
])
def test_dialect_spellings(qs, naive, sql):
    _, rows = run(qs, sql)
    same_rows(ids(rows), *expected_filter(naive, [ANIMAL]))


# ------------------------------------------------------------------ columns


def test_score(qs, naive):
    _, rows = run(qs, f"SELECT id, body, ai_score('{COMPLAINT}', body) AS p FROM notes WHERE kind = 'shop'")
    margins = naive.margins(bodies(), question(COMPLAINT))
    assert sorted(ids(rows)) == [n[0] for n in NOTES if n[3] == "shop"]
    for r in rows:
        assert r.p == pytest.approx(1 / (1 + np.exp(-margins[r.body])), abs=1e-3)


def test_top_k_by_score(qs, naive):
    k = 3
    _, rows = run(qs, f"SELECT id FROM notes ORDER BY ai_score('{LONG}', body) DESC LIMIT {k}")
    margins = naive.margins(bodies(), question(LONG))
    by_id = {n[0]: margins[n[1]] for n in NOTES if n[1] is not None}
    kth = sorted(by_id.values(), reverse=True)[k - 1]
    assert len(rows) == k
    assert all(by_id[i] >= kth - UNCERTAIN for i in ids(rows))           # nothing clearly below
    assert {i for i, m in by_id.items() if m > kth + UNCERTAIN} <= set(ids(rows))  # nor missing


def test_classify(qs, naive):
    _, rows = run(qs, f"SELECT id, body, ai_classify(body, array{LABELS}) AS c FROM notes")
    ref = classify_naive(naive, bodies(), LABELS)
    for r in rows:
        assert r.c is None if r.body is None else (ref[r.body][1] < UNCERTAIN or r.c == ref[r.body][0]), r


def test_chain_then_classify_and_score_in_one_pass(qs, naive):
    sql = (f"SELECT id, body, ai_classify('Which topic fits {{0}}?', body, array{LABELS}) AS c, "
           f"ai_score('{COMPLAINT}', body) AS p FROM notes WHERE ai_if('{LONG}', body)")
    q, rows = run(qs, sql)
    same_rows(ids(rows), *expected_filter(naive, [LONG]))
    ref = classify_naive(naive, bodies(), LABELS, question("Which topic fits {0}?"))
    margins = naive.margins(bodies(), question(COMPLAINT))
    for r in rows:
        assert ref[r.body][1] < UNCERTAIN or r.c == ref[r.body][0]
        assert r.p == pytest.approx(1 / (1 + np.exp(-margins[r.body])), abs=1e-3)
    assert q.explain(print_it=False).count("mapInArrow") == 1  # chain and columns fused
    assert [s["op"] for s in q.report["stages"]] == ["filter", "classify", "score"]


# ------------------------------------------------------------------ joins


def naive_join(naive, q, notes, terms):
    """Matching (note id, term id) pairs and uncertain ones, with the plan's anchor choice."""
    join = next(n for n in P.walk(q.plan) if isinstance(n, P.AIJoin))
    note_anchor = P.anchor_column(join).name == "body"
    text = P.join_question_text(join)
    a_rows, p_rows = (notes, terms) if note_anchor else (terms, notes)
    a_col = p_col = 1  # body of a note, term of a term
    m = naive.join_margins([r[a_col] for r in a_rows], [r[p_col] for r in p_rows], text)
    ok, unsure, tokens = [], [], 0
    for a in a_rows:
        for p in p_rows:
            if a[a_col] is None or p[p_col] is None:
                continue
            pair = (a[0], p[0]) if note_anchor else (p[0], a[0])
            v = m[(a[a_col], p[p_col])]
            ok += [pair] * (v > 0)
            unsure += [pair] * (abs(v) < UNCERTAIN)
            tokens += naive.join_tokens(a[a_col], p[p_col], text)
    return ok, unsure, tokens


def test_join_reuses_anchors(qs, naive):
    sql = ("SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term) "
           "WHERE n.year >= 2021")
    q, rows = run(qs, sql)
    notes = [n for n in NOTES if n[2] >= 2021]
    ok, unsure, naive_tokens = naive_join(naive, q, notes, TERMS)
    same_rows([(r.id, r.tid) for r in rows], ok, unsure)
    assert q.report["fresh_tokens"] <= naive_tokens / 5, (q.report, naive_tokens)
    assert "== AI join anchors ==" in q.explain(print_it=False)


def test_join_with_ai_filters_on_both_sides(qs, naive):
    sql = ("SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Is {0} about {1}?', n.body, t.term) "
           f"WHERE n.year >= 2022 AND ai_if('{LONG}', n.body) AND t.tid <= 4 "
           "AND ai_if('Is {0} longer than five words?', t.term)")
    q, rows = run(qs, sql)
    notes = [n for n in NOTES if n[2] >= 2022]
    terms = [t for t in TERMS if t[0] <= 4]
    notes_ok, notes_unsure = expected_filter(naive, [LONG], notes)
    terms_m = naive.margins([t[1] for t in terms], question(LONG))
    terms_ok = [t for t in terms if terms_m[t[1]] > 0]
    ok, unsure, _ = naive_join(naive, q, [n for n in notes if n[0] in notes_ok], terms_ok)
    unsure += [(n, t[0]) for n in notes_unsure for t in terms]
    unsure += [(n[0], t[0]) for n in notes for t in terms if abs(terms_m[t[1]]) < UNCERTAIN]
    same_rows([(r.id, r.tid) for r in rows], ok, unsure)
    assert [s["op"] for s in q.report["stages"]].count("filter") == 2


def test_join_with_relational_condition_evaluates_only_candidate_pairs(qs, naive):
    sql = ("SELECT n.id, t.tid FROM notes n JOIN terms t ON n.kind = t.kind "
           "AND ai_if('Does {0} mention {1}?', n.body, t.term)")
    q, rows = run(qs, sql)
    ok, unsure, candidates = [], [], 0
    for kind in {n[3] for n in NOTES}:  # the naive side scores only pairs of one kind
        notes, terms = [n for n in NOTES if n[3] == kind], [t for t in TERMS if t[2] == kind]
        if notes and terms:
            k_ok, k_unsure, _ = naive_join(naive, q, notes, terms)
            ok, unsure = ok + k_ok, unsure + k_unsure
            candidates += sum(n[1] is not None for n in notes) * len(terms)
    same_rows([(r.id, r.tid) for r in rows], ok, unsure)
    assert q.report["stages"][-1]["evaluated"] == candidates


# ------------------------------------------------------------------ DataFrame API, laziness


def test_dataframe_api(spark, qs, naive):
    notes = spark.table("notes").where("year >= 2021")
    rows = qs.ai_filter(notes, LONG, "body").collect(summary=False)
    same_rows(ids(rows), *expected_filter(naive, [LONG], [n for n in NOTES if n[2] >= 2021]))
    q = qs.ai_join(notes.select("id", "body"), spark.table("terms").select("tid", "term"),
                   "Does {0} mention {1}?", "body", "term")
    pairs = [(r.id, r.tid) for r in q.collect(summary=False)]
    ok, unsure, _ = naive_join(naive, q, [n for n in NOTES if n[2] >= 2021], TERMS)
    same_rows(pairs, ok, unsure)
    scored = qs.ai_score(notes, COMPLAINT, "body", alias="p").to_df().columns
    assert scored == ["id", "body", "year", "kind", "p"]


def test_query_is_lazy_and_report_prints(spark, qs, capsys):
    sql = f"SELECT id FROM notes WHERE ai_if('{LONG}', body)"
    qs.sql(sql)  # table statistics are measured once
    sc = spark.sparkContext
    sc.setJobGroup("quail-lazy", "laziness check")
    try:
        q = qs.sql(sql)
        df = q.to_df()
        assert sc.statusTracker().getJobIdsForGroup("quail-lazy") == []
        text = q.explain()
        q.collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    out = capsys.readouterr().out
    assert "== Logical plan ==" in out and "== Physical plan (Spark) ==" in out and "mapInArrow" in text
    assert "quail report:" in out and "tokens requested" in out
    assert df.columns == ["id"]
    assert q.report["requested_tokens"] > 0 and q.report["tasks"] >= 1
