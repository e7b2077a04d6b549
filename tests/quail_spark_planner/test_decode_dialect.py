"""The decode calls in the front end's spellings (sqlglot): ours, BigQuery's AI.GENERATE and Snowflake's
AI_COMPLETE / AI_EXTRACT become ai_generate / ai_extract / ai_summarize Calls and Spark SQL text."""
from __future__ import annotations

import json

import pytest

from quail_spark.dialect import parse_call, to_spark
from quail_spark.errors import HintError, TemplateError


def fields(call) -> dict:
    return {f["name"]: f["type"] for f in json.loads(call.schema)["fields"]}


def test_snowflake_ai_complete_is_ai_generate_of_the_installed_model():
    text, (call,) = to_spark("SELECT AI_COMPLETE('smollm2-135m', PROMPT('Reply to {0}', body), "
                             "OBJECT_CONSTRUCT('max_tokens', 16)) AS r FROM t", model="smollm2-135m")
    assert text == "SELECT ai_generate('Reply to {0}', body, MAP('max_tokens', 16)) AS r FROM t"
    assert (call.kind, call.template, call.max_tokens, call.output_tokens) == ("generate", "Reply to {0}", 16, 16)
    text, (call,) = to_spark("SELECT AI_COMPLETE('smollm2-135m', body) FROM t", model="smollm2-135m")
    assert text == "SELECT ai_generate('{0}', body) FROM t" and call.question == "Respond to the document."
    with pytest.raises(TemplateError, match="'llama3.1-70b'.*installed model is 'smollm2-135m'"):
        to_spark("SELECT AI_COMPLETE('llama3.1-70b', body) FROM t", model="smollm2-135m")


def test_snowflake_ai_extract_formats():
    text, (call,) = to_spark("SELECT AI_EXTRACT(body, ['name', 'city']) AS p FROM t")
    assert text == "SELECT ai_extract(body, '`name` string, `city` string') AS p FROM t"
    assert fields(call) == {"name": "string", "city": "string"} and call.output_tokens == 32
    _, (call,) = to_spark("SELECT AI_EXTRACT(body, {'name': 'Who wrote it?', 'city': 'Where?'}) FROM t")
    assert fields(call) == {"name": "string", "city": "string"}
    assert call.instruction == "name: Who wrote it?\ncity: Where?"
    _, (call,) = to_spark("SELECT AI_EXTRACT(text => body, responseFormat => {'schema': {'type': 'object', "
                          "'properties': {'age': {'type': 'integer'}, 'tags': {'type': 'array', 'items': "
                          "{'type': 'string'}}}}}) FROM t")
    assert fields(call) == {"age": "long", "tags": {"type": "array", "elementType": "string", "containsNull": True}}
    assert call.result_type == "struct<`age`:bigint,`tags`:array<string>>"


def test_bigquery_ai_generate_with_and_without_output_schema(spark):
    text, (call,) = to_spark("SELECT AI.GENERATE(PROMPT('Reply to {0}', body)) FROM t")
    assert text == "SELECT ai_generate('Reply to {0}', body) FROM t" and call.kind == "generate"
    text, (call,) = to_spark("SELECT AI.GENERATE(('Who wrote ', body, '?'), output_schema => "
                             "'name STRING, age INT64, born DATE') AS p FROM t")
    assert text == ("SELECT ai_extract(body, '`name` string, `age` bigint, `born` date', 'Who wrote the document?')"
                    " AS p FROM t")
    assert call.kind == "extract" and fields(call) == {"name": "string", "age": "long", "born": "date"}


def test_parse_call_reads_each_decode_function(spark):
    call, _ = parse_call("ai_extract(body, 'name STRING, tags ARRAY<STRING>', 'The author', map('max_tokens', 8))")
    assert (call.args, call.instruction, call.max_tokens, call.output_tokens) == (("body",), "The author", 8, 8)
    assert fields(call)["tags"]["type"] == "array"
    call, _ = parse_call("ai_summarize(body, 20)")
    assert (call.kind, call.max_words, call.question) == ("summarize", 20, "Summarize the document in at most 20 words.")
    call, _ = parse_call("ai_generate('Reply to {0} about {1}', body, topic, named_struct('stop', array('.', '!')))")
    assert (call.n_cols, call.stop, call.output_tokens) == (2, (".", "!"), 128)


@pytest.mark.parametrize("expr, error, words", [
    ("ai_extract(body, 'name STRNG')", TemplateError, ["ai_extract", "'name STRNG'", "parse"]),
    ("ai_extract(body, 'm MAP<STRING, INT>')", TemplateError, ["ai_extract", "'m'", "map"]),
    ("ai_generate('Say {0}', body, map('selectivity', 0.2))", HintError, ["selectivity", "ai_generate"]),
    ("ai_if('Is {0} ok?', body, map('max_tokens', 4))", HintError, ["max_tokens", "ai_if"]),
    ("ai_generate('Say {0}', body, map('max_tokens', 0))", HintError, ["max_tokens", "whole number"]),
    ("ai_summarize(body, 5, 6)", TemplateError, ["ai_summarize"]),
])
def test_a_bad_decode_call_is_refused_naming_it(spark, expr, error, words):
    with pytest.raises(error) as e:
        parse_call(expr)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_bigquery_map_hint_is_kept():
    """BigQuery reads map('k', v) as MAP(keys, values): the hint rides along (it was dropped before)."""
    text, (call,) = to_spark("SELECT AI.GENERATE(PROMPT('Reply to {0}', body), map('max_tokens', 6)) FROM t")
    assert text == "SELECT ai_generate('Reply to {0}', body, MAP('max_tokens', 6)) FROM t" and call.max_tokens == 6
    _, (call,) = to_spark("SELECT id FROM t WHERE AI.IF(PROMPT('Is {0} ok?', body), map('selectivity', 0.2))")
    assert call.hint("selectivity") == 0.2
