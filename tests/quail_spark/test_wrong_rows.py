"""Query shapes that gave wrong rows or failed: each must give the rows an independent SQL engine
gives, with the rules on and off, through spark.sql, the DataFrame API where it can say the query,
and QuailSession.

The independent engine is Python's sqlite3 with the AI functions registered as Python functions
that evaluate each row through gpu_worker.ai_calls (the one renderer, NULL rule and anchor
placement) on a driver-side engine of the same seeded random model (tiny-llama-random, answers of
both signs); the anchor's argument position is the test's own reading of the hint. SQLite has no
NaN (it stores NULL), so the NaN bounds are checked against Spark's order (NaN above every double,
equal to NaN) applied here in Python. Tables are small, with NULL and blank text, duplicate keys
and unicode.
"""
from __future__ import annotations

import sqlite3
from collections import Counter

import pytest

import quail_spark

RULES = "spark.quail.optimizer.enabled"
FAIR = "Is {1} a fair summary of {0}?"  # the random model answers it yes and no on these tables
SIMILAR = "Are {0} and {1} similar?"
SUMMARY = "Is {0} a fair summary of {1}?"

TABLES = {  # name -> (Spark schema, rows)
    "a": ("aid int, ak int, atitle string, abody string", [
        (1, 1, "Parcel", "My parcel was late again and the box was crushed"),
        (2, 1, "Café", "Le café était froid ☕ and the waiter was rude"),
        (3, 2, None, "dog walk"), (4, 2, "", "cat nap in the sun"), (4, 2, "Dup", "cat nap in the sun"),
        (5, 3, "Money", None)]),
    "b": ("bid int, bterm string", [
        (10, "parcel"), (11, None), (12, "  "), (13, "café"), (13, "café"), (14, "a dog in the park")]),
    "c": ("cid int, clabel string, cnote string", [
        (20, "spam", "Buy now!!!"), (21, None, "a note"), (22, "ok", ""), (23, "ünïcode", "a summary of a parcel"),
        (23, "ünïcode", "a summary of a parcel")]),
    "q": ("qid int, qtext2 string", [
        (30, FAIR), (31, None), (32, "  "), (33, SIMILAR), (33, SIMILAR)]),
}


@pytest.fixture(scope="module")
def random_model(spark):
    """The tables as temp views and the AI functions on the seeded random model; SmolLM2 again afterwards."""
    for name, (schema, rows) in TABLES.items():
        spark.createDataFrame(rows, schema).localCheckpoint().repartition(2).createOrReplaceTempView(name)
    qs = quail_spark.QuailSession(spark, model="tiny-llama-random", device="cpu", kv_pool_tokens=4096)
    yield qs
    spark.conf.set(RULES, "true")
    quail_spark.install(spark, model="smollm2-135m", device="cpu")


class Oracle:
    """sqlite3 over the same tables; ai_if / ai_filter / ai_score / ai_classify evaluated per row through
    gpu_worker.ai_calls.

    ``ai_if(template, c0, c1, anchor)``: the optional last integer is the argument placed first.
    ``ai_classify(doc, label0, label1, ...)``: Spark's ``ai_classify(doc, array(label0, label1, ...))``.
    """

    def __init__(self):
        from gpu_worker import Engine, EngineConfig

        from quail_spark.executor import engine_conf

        self.eng = Engine(EngineConfig(**engine_conf("tiny-llama-random", "cpu", kv_pool_tokens=4096)))
        self.cache: dict = {}
        self.db = sqlite3.connect(":memory:")
        for name, (schema, rows) in TABLES.items():
            cols = [c.split()[0] for c in schema.split(", ")]
            self.db.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
            self.db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)
        for fn, kind in (("ai_if", "if"), ("ai_filter", "if"), ("ai_score", "score")):
            self.db.create_function(fn, -1, lambda *args, kind=kind: self.value(kind, *args))
        self.db.create_function("ai_classify", -1, self.label)

    def value(self, kind: str, template, *cols):
        """One row's answer: NULL for a NULL / blank template (as a template column's row gives)."""
        from gpu_worker.ai_calls import Call, evaluate, is_null

        anchor = None
        if cols and isinstance(cols[-1], int):
            *cols, anchor = cols
        if is_null(template):
            return None
        key = (kind, template, tuple(cols), anchor)
        if key not in self.cache:
            call = Call(kind, template, len(cols), anchor=anchor)
            self.cache[key] = evaluate(self.eng, call, [[v] for v in cols])[0]
        return self.cache[key]

    def label(self, doc, *labels):
        """ai_classify's label of one document (NULL for a NULL / blank one)."""
        from gpu_worker.ai_calls import Call, evaluate

        key = ("classify", doc, labels)
        if key not in self.cache:
            self.cache[key] = evaluate(self.eng, Call("classify", "{0}", 1, labels), [[doc]])[0]
        return self.cache[key]

    def rows(self, sql: str) -> Counter:
        return Counter(tuple(r) for r in self.db.execute(sql).fetchall())


@pytest.fixture(scope="module")
def oracle(random_model):
    return Oracle()


def spark_rows(spark, sql: str, on: bool) -> Counter:
    spark.conf.set(RULES, str(on).lower())
    try:
        return Counter(tuple(r) for r in spark.sql(sql).collect())
    finally:
        spark.conf.set(RULES, "true")


def df_rows(spark, df_of, on: bool) -> Counter:
    spark.conf.set(RULES, str(on).lower())
    try:
        return Counter(tuple(r) for r in df_of().collect())
    finally:
        spark.conf.set(RULES, "true")


def check_paths(spark, qs, sql: str, want: Counter, df_of=None) -> None:
    """The rows of ``sql`` with the rules on, off, through QuailSession (and the DataFrame ``df_of()``
    with the rules on and off) are ``want``."""
    got = {"rules on": spark_rows(spark, sql, True), "rules off": spark_rows(spark, sql, False),
           "QuailSession": Counter(tuple(r) for r in qs.sql(sql).collect())}
    if df_of is not None:
        got.update({"DataFrame, rules on": df_rows(spark, df_of, True),
                    "DataFrame, rules off": df_rows(spark, df_of, False)})
    for path, rows in got.items():
        assert rows == want, f"{path}: {sorted(rows.items(), key=str)} vs the oracle {sorted(want.items(), key=str)}"


def test_the_random_model_says_yes_and_no(oracle):
    got = oracle.rows(f"SELECT ai_if('{FAIR}', abody, bterm) FROM a CROSS JOIN b")
    assert got[(1,)] >= 2 and got[(0,)] >= 2 and got[(None,)] >= 1, got


# 1. the anchor hint of a call whose template is a column, in an EXISTS / outer / semi join
ANCHOR_OF_ROW_TEMPLATE = ("SELECT v.qid FROM b x CROSS JOIN q v WHERE EXISTS (SELECT 1 FROM b y "
                          "WHERE ai_if(v.qtext2, x.bterm, y.bterm, map('anchor', 'y')))")


def test_exists_with_a_template_column_keeps_the_anchor_hint(spark, random_model, oracle):
    def sqlite(anchor: str) -> str:
        return ("SELECT v.qid FROM b x CROSS JOIN q v WHERE EXISTS (SELECT 1 FROM b y "
                f"WHERE ai_if(v.qtext2, x.bterm, y.bterm{anchor}))")

    want = oracle.rows(sqlite(", 1"))
    assert want != oracle.rows(sqlite("")), "the anchor must change the answers, or the test proves nothing"
    check_paths(spark, random_model, ANCHOR_OF_ROW_TEMPLATE, want)


def test_left_join_with_a_template_column_matches_the_inner_join(spark, random_model, oracle):
    on = "ai_if(v.qtext2, x.bterm, y.bterm, map('anchor', 'y'))"
    left = f"SELECT x.bid, v.qid, y.bid FROM b x CROSS JOIN q v LEFT JOIN b y ON {on}"
    semi = f"SELECT x.bid, v.qid FROM b x CROSS JOIN q v LEFT SEMI JOIN b y ON {on}"
    pairs = oracle.rows("SELECT x.bid, v.qid, y.bid FROM b x CROSS JOIN q v JOIN b y "
                        "ON ai_if(v.qtext2, x.bterm, y.bterm, 1)")
    want_left = Counter(pairs)
    for x in TABLES["b"][1]:
        for v in TABLES["q"][1]:
            unmatched = sum(n for (xb, qv, _), n in pairs.items() if (xb, qv) == (x[0], v[0])) == 0
            want_left[(x[0], v[0], None)] += 1 if unmatched else 0
    want_left = +want_left
    inner = f"SELECT x.bid, v.qid, y.bid FROM b x CROSS JOIN q v JOIN b y ON {on}"
    check_paths(spark, random_model, inner, pairs)
    check_paths(spark, random_model, left, want_left)
    check_paths(spark, random_model, semi, oracle.rows(
        "SELECT x.bid, v.qid FROM b x CROSS JOIN q v WHERE EXISTS (SELECT 1 FROM b y "
        "WHERE ai_if(v.qtext2, x.bterm, y.bterm, 1))"))


# 2. a NaN bound on an inner AI join's score comparison: Spark orders NaN above every double
SCORE = f"ai_score('{FAIR}', y.cnote, x.atitle || ': ' || x.abody)"
NAN = "CAST('NaN' AS DOUBLE)"


@pytest.mark.parametrize("cond, keep", [
    (f"{SCORE} <= {NAN}", lambda s: True),
    (f"{SCORE} < {NAN}", lambda s: True),
    (f"{SCORE} > {NAN}", lambda s: False),
    (f"{SCORE} >= {NAN}", lambda s: False),
    (f"{NAN} > {SCORE}", lambda s: True),
    (f"{SCORE} BETWEEN 0.3 AND {NAN}", lambda s: s >= 0.3),
    (f"{SCORE} BETWEEN {NAN} AND 1", lambda s: False),
])
def test_nan_bound_on_an_ai_join_score(spark, random_model, oracle, cond, keep):
    want = Counter()
    for x in TABLES["a"][1]:
        for y in TABLES["c"][1]:
            doc = None if x[2] is None or x[3] is None else f"{x[2]}: {x[3]}"
            s = oracle.value("score", FAIR, y[2], doc)
            want[(x[0], y[0])] += 1 if s is not None and keep(s) else 0
    want = +want
    check_paths(spark, random_model, f"SELECT x.aid, y.cid FROM a x JOIN c y ON {cond}", want)


def test_nan_bound_in_outer_joins_and_fused_calls(spark, random_model, oracle):
    """The other score comparisons of the rules (quail_match_score's in a semi join, quail_eval's of
    several calls over one document) keep Spark's order too: every score is below NaN."""
    def score(x, y):
        doc = None if x[2] is None or x[3] is None else f"{x[2]}: {x[3]}"
        return oracle.value("score", FAIR, y[2], doc)

    a, c = TABLES["a"][1], TABLES["c"][1]
    semi = Counter((x[0],) for x in a if any(score(x, y) is not None for y in c))
    check_paths(spark, random_model, f"SELECT x.aid FROM a x LEFT SEMI JOIN c y ON {SCORE} < {NAN}", semi)
    assert semi and semi != Counter((x[0],) for x in a), semi  # the NULL rule drops some rows
    check_paths(spark, random_model, f"SELECT x.aid FROM a x LEFT ANTI JOIN c y ON {SCORE} >= {NAN}",
                Counter((x[0],) for x in a))
    spam = "ai_if('Is {0} spam?', abody)"
    fused = Counter((x[0],) for x in a if x[3] is not None and x[3].strip())  # score < NaN for every document
    check_paths(spark, random_model, f"SELECT aid FROM a WHERE ai_score('Is {{0}} rude?', abody) < {NAN} OR {spam}",
                fused)
    check_paths(spark, random_model, f"SELECT aid, ai_score('Is {{0}} rude?', abody) >= {NAN} AS f, {spam} AS s "
                "FROM a WHERE abody IS NOT NULL",
                Counter((x[0], False, oracle.value("if", "Is {0} spam?", x[3])) for x in a if x[3] is not None))


def test_nan_bounds_keep_some_pairs_and_drop_others(oracle):
    """The scores fall on both sides of 0.3, so BETWEEN 0.3 AND NaN keeps some pairs and not all."""
    scores = [oracle.value("score", FAIR, y[2], f"{x[2]}: {x[3]}") for x in TABLES["a"][1] for y in TABLES["c"][1]
              if x[2] is not None and x[3] is not None]
    kept = [s for s in scores if s is not None]
    assert any(s >= 0.3 for s in kept) and any(s < 0.3 for s in kept), kept


# 3. an AI call nested in an argument of another, reading the partner side, in an outer / semi ON or EXISTS
NESTED = (f"ai_filter('{FAIR}', x.abody, CASE WHEN ai_if('Is {{0}} spam?', y.clabel) THEN y.clabel ELSE NULL END)")
NESTED_SQLITE = NESTED  # the same text in SQLite


@pytest.mark.parametrize("name, sql, sqlite", [
    ("left_semi", f"SELECT x.ak FROM a x LEFT SEMI JOIN c y ON {NESTED}",
     f"SELECT x.ak FROM a x WHERE EXISTS (SELECT 1 FROM c y WHERE {NESTED_SQLITE})"),
    ("left_anti", f"SELECT x.ak FROM a x LEFT ANTI JOIN c y ON {NESTED}",
     f"SELECT x.ak FROM a x WHERE NOT EXISTS (SELECT 1 FROM c y WHERE {NESTED_SQLITE})"),
    ("exists", f"SELECT x.aid FROM a x WHERE EXISTS (SELECT 1 FROM c y WHERE {NESTED})",
     f"SELECT x.aid FROM a x WHERE EXISTS (SELECT 1 FROM c y WHERE {NESTED_SQLITE})"),
    ("in", f"SELECT x.aid FROM a x WHERE x.ak IN (SELECT y.cid - 19 FROM c y WHERE {NESTED})",
     f"SELECT x.aid FROM a x WHERE x.ak IN (SELECT y.cid - 19 FROM c y WHERE {NESTED_SQLITE})"),
    ("left", f"SELECT x.aid, y.cid FROM a x LEFT JOIN c y ON {NESTED}",
     f"SELECT x.aid, y.cid FROM a x LEFT JOIN c y ON {NESTED_SQLITE}"),
])
def test_nested_ai_call_reading_the_partner(spark, random_model, oracle, name, sql, sqlite):
    want = oracle.rows(sqlite)
    df_of = None
    if name == "left_semi":
        def df_of():
            x, y = spark.table("a").alias("x"), spark.table("c").alias("y")
            inner = quail_spark.ai_if("Is {0} spam?", "y.clabel")
            from pyspark.sql import functions as F
            arg = F.when(inner, F.col("y.clabel"))
            cond = quail_spark.ai_if(FAIR, "x.abody", arg)
            return x.join(y, cond, "left_semi").select("x.ak")
    check_paths(spark, random_model, sql, want, df_of)


def test_nested_call_answers_both_ways(oracle):
    got = oracle.rows(f"SELECT {NESTED_SQLITE} FROM a x CROSS JOIN c y")
    assert got[(1,)] >= 1 and got[(0,)] >= 1, got


# an ai_classify (which no pair evaluation answers) over one side of a correlated NOT IN / IN or an outer ON:
# a column of that side, one label per row; over both sides, refused naming it
LABEL = "ai_classify(y.cnote, array('spam', 'a summary'))"
OF_LABEL = f"ai_filter('{FAIR}', x.abody, {LABEL})"


def sqlite_text(sql: str) -> str:
    """The query in SQLite's spelling: ai_classify's labels as its last arguments."""
    return sql.replace("array('spam', 'a summary')", "'spam', 'a summary'") \
        .replace("array('parcel', 'café', 'dog')", "'parcel', 'café', 'dog'")


@pytest.mark.parametrize("name, sql", [
    ("not_in_select", f"SELECT x.aid, x.ak + 1 NOT IN (SELECT NULLIF(y.cid - 19, 4) FROM c y WHERE {OF_LABEL}) FROM a x"),
    ("not_in_where", f"SELECT x.aid FROM a x WHERE x.ak NOT IN (SELECT y.cid - 19 FROM c y WHERE {OF_LABEL} "
                     "AND y.cid - 19 = x.ak)"),
    ("in_select", f"SELECT x.aid, x.ak + 1 IN (SELECT NULLIF(y.cid - 19, 4) FROM c y WHERE {OF_LABEL}) FROM a x"),
    ("left_preserved_side", f"SELECT x.aid, y.bid FROM a x LEFT JOIN b y ON ai_score('{SIMILAR}', y.bterm, "
                            "ai_classify(x.abody, array('parcel', 'café', 'dog'))) < 0.5"),
])
def test_classify_over_one_side_of_an_outer_or_correlated_condition(spark, random_model, oracle, name, sql):
    want = oracle.rows(sqlite_text(sql))
    assert len({r[-1] for r in want}) > 1, f"one answer for every row: the test proves nothing: {want}"
    check_paths(spark, random_model, sql, want)


def test_classify_over_both_sides_is_refused_naming_it(spark, random_model):
    sql = (f"SELECT x.aid FROM a x WHERE EXISTS (SELECT 1 FROM c y WHERE ai_filter('{FAIR}', x.abody, "
           "ai_classify(concat(x.atitle, y.cnote), array('spam', 'ok'))))")
    runs = {"rules on": lambda: spark_rows(spark, sql, True), "rules off": lambda: spark_rows(spark, sql, False),
            "QuailSession": lambda: random_model.sql(sql).collect()}
    for path, run in runs.items():
        try:
            got = run()
        except Exception as e:  # noqa: BLE001 - the refusal's text is the check
            got = str(e)
        assert "ai_classify(concat(atitle, cnote), [spam,ok]) reads columns of both sides" in str(got), (path, got)


# 4. three inner joins, one AI join's document an expression over both tables it joins
THREE = "SELECT x.aid, y.bid, z.cid FROM a x JOIN b y ON ai_if('{fair}', x.abody, y.bterm) JOIN c z ON {on}"


@pytest.mark.parametrize("on", [
    "ai_if('{fair}', x.atitle || ' / ' || z.clabel, z.cnote)",
    "ai_score('{fair}', x.atitle || ' / ' || z.clabel, z.cnote) > 0.2",  # keeps rows on these tables
])
def test_three_joins_with_a_document_over_two_tables(spark, random_model, oracle, on):
    sql = THREE.format(fair=FAIR, on=on.format(fair=FAIR))
    want = oracle.rows(sql)
    assert want or "ai_if" in on, "the oracle keeps no row: the test proves nothing"
    check_paths(spark, random_model, sql, want)


# 5. QuailSession accepts the anchor hints spark.sql accepts: a column name, an expression's table alias
@pytest.mark.parametrize("sql, sqlite", [
    (f"SELECT x.aid, y.bid FROM a x JOIN b y ON ai_if('{SIMILAR}', y.bterm, x.abody, map('anchor', 'abody'))",
     f"SELECT x.aid, y.bid FROM a x JOIN b y ON ai_if('{SIMILAR}', y.bterm, x.abody, 1)"),
    (f"SELECT x.aid, y.bid FROM a x JOIN b y ON ai_if('{SUMMARY}', y.bterm, x.atitle || ': ' || x.abody, "
     "map('anchor', 'x'))",
     f"SELECT x.aid, y.bid FROM a x JOIN b y ON ai_if('{SUMMARY}', y.bterm, x.atitle || ': ' || x.abody, 1)"),
])
def test_quail_session_accepts_the_anchor_hints_spark_does(spark, random_model, oracle, sql, sqlite):
    want = oracle.rows(sqlite)
    assert want, "the oracle keeps no row: the test proves nothing"
    check_paths(spark, random_model, sql, want)
