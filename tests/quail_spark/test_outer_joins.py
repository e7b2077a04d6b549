"""Outer, semi and anti AI joins (rules QuailOuterJoin, QuailAiSubquery): LEFT / RIGHT / FULL OUTER
joins with ai_if in ON, LEFT SEMI / ANTI joins, EXISTS / NOT EXISTS / IN / NOT IN subqueries
correlated through ai_if. Spark alone refuses them (PYTHON_UDF_IN_ON_CLAUSE); they must give the
same rows with the rules on, off and through QuailSession, and the rows SQL's semantics give over
the engine's answer on each pair (an independent reference: ai_if evaluated in a plain SELECT over
the cross product, the joins done here in Python).

A seeded random model (tiny-llama-random) answers yes and no, so the comparisons are not vacuous.
The tables hold duplicate rows, NULL / empty / whitespace-only documents, NULL keys and keys
without partners; empty sides come from a filter that keeps nothing.
"""
from __future__ import annotations

from collections import Counter

import pytest

import quail_spark

RULES = "spark.quail.optimizer.enabled"
MENTION = "Does {0} mention {1}?"
AI = f"ai_if('{MENTION}', a.body, t.term)"

A_ROWS = [  # id, body, k
    (1, "My parcel was late", 1), (1, "My parcel was late", 1), (2, None, 1), (3, "dog walk", 2),
    (4, "cat nap", None), (5, "", 2), (6, "parcel late", 3), (7, "Refund me now", 5),
]
T_ROWS = [  # kid, term, k, n
    (10, "a parcel", 1, 1), (11, None, 1, 1), (12, "a dog", 3, 9), (13, "cat", 3, 2), (14, "weather", 1, 3),
    (14, "weather", 1, 3), (15, "  ", 2, 1), (16, "money", None, 1), (17, "a kitchen", 4, 1),
]

# name -> (SQL, expected rows from (a rows, t rows, match(a, t)))
QUERIES = {
    "left": f"SELECT a.id, t.kid FROM a LEFT JOIN t ON {AI}",
    "left_equality_and_relational": f"SELECT a.id, t.kid FROM a LEFT JOIN t ON a.k = t.k AND t.n <= a.id AND {AI}",
    "right": f"SELECT a.id, t.kid FROM a RIGHT JOIN t ON {AI} AND t.kid > 11",
    "full": f"SELECT a.id, t.kid FROM a FULL JOIN t ON a.k = t.k AND {AI}",
    "left_semi": f"SELECT a.id FROM a LEFT SEMI JOIN t ON {AI}",
    "left_anti": f"SELECT a.id FROM a LEFT ANTI JOIN t ON a.k = t.k AND {AI}",
    "exists": f"SELECT a.id FROM a WHERE EXISTS (SELECT 1 FROM t WHERE {AI})",
    "not_exists": f"SELECT a.id FROM a WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.k = a.k AND {AI})",
    "exists_under_or": f"SELECT a.id FROM a WHERE a.id = 4 OR EXISTS (SELECT 1 FROM t WHERE t.kid > 12 AND {AI})",
    "in": f"SELECT a.id FROM a WHERE a.k IN (SELECT t.k FROM t WHERE {AI})",
    "not_in": f"SELECT a.id FROM a WHERE a.k NOT IN (SELECT t.k FROM t WHERE {AI})",
    "left_empty_partner": f"SELECT a.id, t.kid FROM a LEFT JOIN (SELECT * FROM t WHERE kid < 0) t ON {AI}",
    "full_empty_left": f"SELECT a.id, t.kid FROM (SELECT * FROM a WHERE id < 0) a FULL JOIN t ON {AI}",
    "not_exists_empty": f"SELECT a.id FROM a WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.kid < 0 AND {AI})",
    "exists_in_select": f"SELECT a.id, EXISTS (SELECT 1 FROM t WHERE {AI}) AS e FROM a",
    "in_in_select": f"SELECT a.id, a.k IN (SELECT t.k FROM t WHERE {AI}) AS e FROM a",
    "in_two_columns": f"SELECT a.id FROM a WHERE (a.k, a.id) IN (SELECT t.k, t.n FROM t WHERE {AI})",
}


def expected(name: str, match) -> Counter:
    """The rows of QUERIES[name] by SQL's semantics, given ``match(a, t)`` for the AI predicate."""
    A, T = A_ROWS, T_ROWS
    on = {
        "left": lambda a, t: match(a, t),
        "left_equality_and_relational": lambda a, t: a[2] is not None and a[2] == t[2] and t[3] <= a[0]
        and match(a, t),
        "right": lambda a, t: match(a, t) and t[0] > 11,
        "full": lambda a, t: a[2] is not None and a[2] == t[2] and match(a, t),
        "left_semi": match, "exists": match,
        "left_anti": lambda a, t: a[2] is not None and a[2] == t[2] and match(a, t),
        "not_exists": lambda a, t: a[2] is not None and a[2] == t[2] and match(a, t),
        "exists_under_or": lambda a, t: t[0] > 12 and match(a, t),
        "in": match, "not_in": match,
        "left_empty_partner": lambda a, t: False, "full_empty_left": match, "not_exists_empty": lambda a, t: False,
        "exists_in_select": match, "in_in_select": match, "in_two_columns": match,
    }[name]
    if name == "left_empty_partner":
        T = []
    if name == "full_empty_left":
        A = []
    rows = []
    if name in ("left", "left_equality_and_relational", "full", "left_empty_partner", "full_empty_left"):
        for a in A:
            hits = [t for t in T if on(a, t)]
            rows += [(a[0], t[0]) for t in hits] or [(a[0], None)]
        if name.startswith("full"):
            rows += [(None, t[0]) for t in T if not any(on(a, t) for a in A)]
    elif name == "right":
        for t in T:
            hits = [a for a in A if on(a, t)]
            rows += [(a[0], t[0]) for a in hits] or [(None, t[0])]
    elif name in ("left_semi", "exists"):
        rows = [(a[0],) for a in A if any(on(a, t) for t in T)]
    elif name in ("left_anti", "not_exists", "not_exists_empty"):
        rows = [(a[0],) for a in A if not any(on(a, t) for t in T)]
    elif name == "exists_in_select":
        rows = [(a[0], any(on(a, t) for t in T)) for a in A]
    elif name == "in_in_select":  # three-valued IN as a column: TRUE, FALSE or NULL
        for a in A:
            ks = [t[2] for t in T if on(a, t)]
            found = a[2] is not None and a[2] in ks
            rows.append((a[0], True if found else None if ks and (a[2] is None or None in ks) else False))
    elif name == "in_two_columns":  # kept when some matched (t.k, t.n) equals (a.k, a.id)
        rows = [(a[0],) for a in A if any(on(a, t) and t[2] == a[2] and t[3] == a[0] for t in T)]
    elif name == "exists_under_or":
        rows = [(a[0],) for a in A if a[0] == 4 or any(on(a, t) for t in T)]
    else:  # IN / NOT IN over the matched t.k, three-valued: NULL when no equal value and a NULL is involved
        for a in A:
            ks = [t[2] for t in T if on(a, t)]
            found = a[2] is not None and a[2] in ks
            unknown = not found and bool(ks) and (a[2] is None or None in ks)
            keep = found if name == "in" else (not found and not unknown)
            rows += [(a[0],)] if keep else []
    return Counter(rows)


@pytest.fixture(scope="module")
def random_model(spark):
    """The AI functions on a seeded random model (margins of both signs); SmolLM2 again afterwards."""
    spark.createDataFrame(A_ROWS, "id int, body string, k int").localCheckpoint().createOrReplaceTempView("a")
    spark.createDataFrame(T_ROWS, "kid int, term string, k int, n int").localCheckpoint().repartition(2) \
        .createOrReplaceTempView("t")
    qs = quail_spark.QuailSession(spark, model="tiny-llama-random", device="cpu", kv_pool_tokens=4096)
    yield qs
    spark.conf.set(RULES, "true")
    quail_spark.install(spark, model="smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def pair_answers(spark, random_model) -> dict:
    """(body, term) -> the engine's ai_if answer, from a plain SELECT over the cross product."""
    spark.conf.set(RULES, "false")
    rows = spark.sql(f"SELECT a.body, t.term, {AI} AS m FROM (SELECT DISTINCT body FROM a) a "
                     "CROSS JOIN (SELECT DISTINCT term FROM t) t").collect()
    spark.conf.set(RULES, "true")
    return {(r.body, r.term): r.m for r in rows}


def rows(spark, sql: str, on: bool) -> Counter:
    spark.conf.set(RULES, str(on).lower())
    try:
        return Counter(tuple(r) for r in spark.sql(sql).collect())
    finally:
        spark.conf.set(RULES, "true")


def test_the_random_model_says_yes_and_no(pair_answers):
    answers = Counter(pair_answers.values())
    assert answers[True] >= 3 and answers[False] >= 3 and answers[None] >= 1, answers


@pytest.mark.parametrize("name", list(QUERIES))
def test_rows_on_every_path_match_sql_semantics(spark, random_model, pair_answers, name):
    sql = QUERIES[name]
    want = expected(name, lambda a, t: pair_answers[(a[1], t[1])] is True)
    on, off = rows(spark, sql, True), rows(spark, sql, False)
    ours = Counter(tuple(r) for r in random_model.sql(sql).collect())
    assert on == want, f"{name}: rules on {sorted(on.items(), key=str)} vs SQL semantics {sorted(want.items(), key=str)}"
    assert off == on, f"{name}: rules off {sorted(off.items(), key=str)} vs on {sorted(on.items(), key=str)}"
    assert ours == on, f"{name}: QuailSession {sorted(ours.items(), key=str)} vs spark.sql {sorted(on.items(), key=str)}"


def test_the_expected_rows_depend_on_the_answers(pair_answers):
    """The reference is not trivially satisfied: other answers would give other rows."""
    for name in ("left", "right", "full", "exists", "not_exists", "in", "not_in"):
        assert expected(name, lambda a, t: pair_answers[(a[1], t[1])] is True) != expected(name, lambda a, t: False)


def test_an_inner_ai_join_is_left_to_the_join_rule(spark, random_model):
    from quail_spark.explain import plan_text

    sql = f"SELECT a.id, t.kid FROM a JOIN t ON {AI}"
    assert "quail_match" not in plan_text(spark.sql(sql))
    assert "quail_match" in plan_text(spark.sql(QUERIES["left"]))
