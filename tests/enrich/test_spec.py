"""Spec loading and validation: every rejection names the key or column at fault."""
import json

import pytest

from quail_spark.enrich import SpecError, load_spec, parse_spec

BASE = {"input": "a.parquet", "output": "b.parquet", "key": "id",
        "columns": {"c": "ai_if('Is {0} late?', body)"}}


def test_unknown_key_is_rejected_by_name():
    with pytest.raises(SpecError, match=r"unknown spec key\(s\) \['colums'\]"):
        parse_spec({**BASE, "colums": {}})


@pytest.mark.parametrize("expr, why", [
    ("upper(body)", "expected one AI call"),
    ("ai_if('Is {0} late?', 'a constant')", "is not an input column or an expression over the row's"),
    ("ai_if('Is {0} late?', max(body))", "no constants alone, aggregates"),
    ("ai_if('Is {0} late?', body) AND lang = 'en'", "expected one AI call"),
    ("ai_if('Is {0} {1} late?', body)", r"placeholder \{1\} expected an argument"),
    ("ai_classify(body, array('only'))", "at least 2 labels"),
    ("ai_if('Is {0} late?', t.body)", "is not an input column"),
])
def test_a_column_that_is_not_one_ai_call_is_rejected_by_name(expr, why):
    with pytest.raises(SpecError, match=f"column 'bad'.*{why}"):
        parse_spec({**BASE, "columns": {"bad": expr}})


def test_calls_parse_to_the_shared_call_shapes():
    spec = parse_spec({**BASE, "columns": {
        "a": "ai_classify(body, array('bug', 'praise'))",
        "b": "ai_classify('Which team owns {0}?', body, array('web', 'db'))",
        "c": "ai_score('Does {0} answer {1}?', q, a, map('selectivity', 0.2))",
        "d": "ai_filter('Is {0} late?', body)"}})
    a, b, c, d = spec.columns
    assert (a.call.kind, a.call.template, a.call.labels, a.inputs) == ("classify", "{0}", ("bug", "praise"), ("body",))
    assert (b.call.template, b.result_type) == ("Which team owns {0}?", "string")
    assert (c.call.kind, c.call.n_cols, c.inputs, c.result_type) == ("score", 2, ("q", "a"), "double")
    assert (d.call.kind, d.result_type) == ("if", "boolean")
    assert spec.referenced == ("body", "q", "a")


def test_an_expression_argument_reads_a_column_spark_computes():
    spec = parse_spec({**BASE, "columns": {
        "a": "ai_if('Is {0} late?', concat(title, ' ', body))",
        "b": "ai_score('Does {0} answer {1}?', concat(title, ' ', body), upper(q))",
        "c": "ai_if('Is {0} late?', body)"}})
    a, b, c = spec.columns
    assert a.derived == ((a.inputs[0], "CONCAT(title, ' ', body)"),) and a.inputs[0].startswith("__doc_")
    assert b.inputs[0] == a.inputs[0] and b.derived[1] == (b.inputs[1], "UPPER(q)")  # one column per text
    assert c.derived == () and c.inputs == ("body",)
    assert spec.referenced == (a.inputs[0], b.inputs[1], "body")


def test_column_hash_follows_the_call_and_value_settings_only():
    one = parse_spec(BASE)
    assert one.column_hash(one.columns[0]) == parse_spec({**BASE, "engine": {"token_budget": 64}}).column_hash(
        one.columns[0])
    other = parse_spec({**BASE, "engine": {"on_overflow": "truncate"}})
    assert one.column_hash(one.columns[0]) != other.column_hash(other.columns[0])
    assert one.spec_hash() != other.spec_hash()


def test_bad_engine_settings_and_reserved_names():
    with pytest.raises(SpecError, match="engine.*token_budgit"):
        parse_spec({**BASE, "engine": {"token_budgit": 64}})
    with pytest.raises(SpecError, match="spec key 'model': model 'smolm2' is neither a preset"):
        parse_spec({**BASE, "model": "smolm2"})  # a misspelled preset: refused before any work
    with pytest.raises(SpecError, match="spec key 'device': device 'tpu'"):
        parse_spec({**BASE, "device": "tpu"})
    with pytest.raises(SpecError, match="column '_ai_error'"):
        parse_spec({**BASE, "columns": {"_ai_error": "ai_if('Is {0} late?', body)"}})
    # Spark's column names ignore case: a column named like the key, '_ai_error' or another column
    for cols in ({"ID": "ai_if('Is {0} late?', body)"}, {"_AI_Error": "ai_if('Is {0} late?', body)"},
                 {"c": "ai_if('Is {0} late?', body)", "C": "ai_if('Is {0} early?', body)"}):
        with pytest.raises(SpecError, match=f"column {list(cols)[-1]!r}: the name is taken by"):
            parse_spec({**BASE, "columns": cols})
    with pytest.raises(SpecError, match=r"missing \['key'\]"):
        parse_spec({k: v for k, v in BASE.items() if k != "key"})


def test_json_and_yaml_files(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(BASE))
    assert load_spec(tmp_path / "s.json").path("a.parquet") == str(tmp_path / "a.parquet")
    yaml = pytest.importorskip("yaml")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(BASE))
    assert load_spec(tmp_path / "s.yaml").columns == load_spec(tmp_path / "s.json").columns
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(tmp_path / "bad.json")
    (tmp_path / "bad.yaml").write_text("input: a.parquet\ncolumns: {c: 'ai_if(x)'\n")
    with pytest.raises(SpecError, match="bad.yaml: not valid YAML .*line 3"):
        load_spec(tmp_path / "bad.yaml")
