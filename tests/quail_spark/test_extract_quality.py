"""Extraction quality (quail_spark.extract_quality): normalization, exact match, token F1 and cut fields,
checked by hand on small cases; the labelled set's labels are true for its texts."""
from __future__ import annotations

import datetime as dt
import json
import os
import re

import pytest

from quail_spark.extract_quality import cut_fields, field_metrics, label_columns, normalize, token_f1

SET = os.path.join(os.path.dirname(__file__), "..", "data", "extract.jsonl")


@pytest.mark.parametrize("a, b", [
    ("  Maria   LOPEZ ", "maria lopez"), ("1,250", 1250), (1250, 1250.0), ("1250.50", 1250.5),
    ("March 14, 2021", "2021-03-14"), ("14 March 2021", dt.date(2021, 3, 14)), ("Mar. 14, 2021", "2021-03-14"),
    (dt.date(2021, 3, 14), "2021-03-14"), (True, "TRUE"), (["A", " b"], ["a", "B"]), (None, None)])
def test_equal_after_normalizing(a, b):
    assert normalize(a) == normalize(b)


@pytest.mark.parametrize("a, b", [("Porto", "Lisbon"), ("34", 35), ("2021-03-14", "2021-03-15"), ("", None),
                                  ("Maria", "Maria Lopez"), (["a", "b"], ["b", "a"])])
def test_different_after_normalizing(a, b):
    assert normalize(a) != normalize(b)


def test_numbers_and_words_stay_text():
    assert normalize("Porto 2021") == "porto 2021"  # no month name: not a date
    assert normalize("34 chairs") == "34 chairs"     # more than a number: text


def test_token_f1_by_hand():
    assert token_f1(normalize("Maria Lopez"), normalize("Maria Lopez")) == 1.0
    assert token_f1(normalize("Maria"), normalize("Maria Lopez")) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert token_f1(None, None) == 1.0 and token_f1(None, "x") == 0.0 and token_f1("x", None) == 0.0
    assert token_f1(normalize(1250.0), normalize("1,250")) == 1.0
    assert token_f1(normalize("a a b"), normalize("a b b")) == pytest.approx(2 / 3)


def test_field_metrics_count_nulls_as_answers():
    m = field_metrics(["Porto", None, "lyon", None, "Osaka"], ["porto", None, "Lyon", "Turin", "Kyoto"],
                      [False, False, False, True, False])
    assert m == {"n": 5, "exact_match": 3 / 5, "f1": 3 / 5, "label_nulls": 1, "value_nulls": 2, "cut": 1}


def test_cut_fields_read_from_the_error():
    err = "rec: field 'age' cut at max_tokens 8; rec: field 'city' cut at max_tokens 8; other: prompt too long"
    assert cut_fields(err, "rec") == {"age", "city"}
    assert cut_fields(err, "other") == set() and cut_fields(None, "rec") == set()


def test_label_columns_of_each_form():
    from quail_spark.enrich.spec import SpecError

    cols = ["text", "name", "age", "who"]
    assert label_columns(None, ["name", "age"], cols, "q") == {"name": "`name`", "age": "`age`"}
    assert label_columns({"name": "who"}, ["name", "age"], cols, "q") == {"name": "`who`", "age": "`age`"}
    assert label_columns("truth", ["name"], cols, "q") == {"name": "`truth`.`name`"}
    with pytest.raises(SpecError, match="no label column for field 'city'"):
        label_columns(None, ["name", "city"], cols, "q")
    with pytest.raises(SpecError, match=r"field\(s\) \['town'\]"):
        label_columns({"town": "text"}, ["name"], cols, "q")


def test_labelled_set_labels_are_in_their_texts():
    rows = [json.loads(line) for line in open(SET)]
    assert len(rows) >= 150 and len({r["id"] for r in rows}) == len(rows)
    for f in ("name", "age", "city", "date", "amount"):
        assert 0 < sum(r[f] is None for r in rows) < len(rows), f  # every field both given and missing
    for r in rows:
        t = r["text"]
        assert r["name"] is None or r["name"] in t, r
        assert r["city"] is None or r["city"] in t, r
        assert r["age"] is None or re.search(rf"\b{r['age']}\b", t), r
        assert r["amount"] is None or f"{r['amount']:,.2f}".removesuffix(".00") in t or \
            f"{r['amount']:.2f}".removesuffix(".00") in t, r
        if r["date"] is not None:
            y, m, d = map(int, r["date"].split("-"))
            day = dt.date(y, m, d)
            forms = [r["date"], f"{day:%B} {d}, {y}", f"{d} {day:%B} {y}", f"of {day:%B} {y}", f"{day:%b}. {d}, {y}"]
            assert any(x in t for x in forms), r


def test_evaluate_scores_an_extract_question_against_the_labels(spark):
    """Through evaluate (with_ai_columns, a seeded random model): each field's figures are those of its
    values and the file's labels, cut fields counted from _ai_error, NULL labels kept as answers."""
    import quail_spark

    rows = [json.loads(line) for line in open(SET)][:8]
    expr = "ai_extract(text, 'name STRING, age INT, date DATE', map('max_tokens', 12))"
    ev = quail_spark.evaluate(spark.read.json(SET).where("id <= 8"), {"record": {"date": "date"}},
                              {"record": expr}, model="tiny-llama-random", seed=1, spark=spark)
    r, s = ev.results[0], ev.scores["record"]
    assert (r["kind"], r["n"], list(r["fields"])) == ("extract", 8, ["name", "age", "date"])
    for f, m in r["fields"].items():
        assert sorted(map(str, s[f"label_{f}"])) == sorted(str(x[f]) for x in rows)  # None reads as 'None'
        assert m["label_nulls"] == sum(x[f] is None for x in rows)
        assert m["cut"] == sum(f"record: field '{f}' cut at max_tokens 12" in (e or "") for e in s["_ai_error"])
        same = sum(normalize(v) == normalize(lab) for v, lab in zip(s[f], s[f"label_{f}"]))
        assert m["exact_match"] == same / 8
    assert r["cut_rows"] == sum("cut at max_tokens" in (e or "") for e in s["_ai_error"]) > 0
    assert r["errored_rows"] == r["null_results"] == 0
    assert "record" in str(ev) and "exact_match" in str(ev)


def test_shipped_eval_spec_loads():
    from quail_spark.eval_command import load

    spec = load(os.path.join(os.path.dirname(SET), "extract_eval.json"))
    assert spec["label"] == {} and "ai_extract(text" in spec["columns"]["record"]
