"""Dialect front end: BigQuery and Snowflake spellings become our Spark SQL calls; Spark SQL
passes through unchanged; the AI calls of a query (templates, columns, labels, hints)."""
import doctest

import pytest

import quail_spark.dialect
from gpu_worker.ai_calls import Call
from quail_spark.dialect import to_spark
from quail_spark.errors import HintError, TemplateError, UnsupportedSQL

OURS = ("SELECT r.id, ai_classify(r.text, array('urgent', 'routine')) AS c FROM reports r "
        "JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term) "
        "WHERE ai_if('Is {0} a case report?', r.text) AND r.year > 2020")
BIGQUERY = ("SELECT r.id, AI.CLASSIFY(r.text, categories => ['urgent', 'routine']) AS c FROM reports r "
            "JOIN terms t ON AI.IF(PROMPT('Is {0} about {1}?', r.text, t.term)) "
            "WHERE AI.IF(('Is ', r.text, ' a case report?'), connection_id => 'us.conn') AND r.year > 2020")
SNOWFLAKE = ("SELECT r.id, AI_CLASSIFY(r.text, ['urgent', 'routine']) AS c FROM reports r "
             "JOIN terms t ON AI_FILTER(PROMPT('Is {0} about {1}?', r.text, t.term)) "
             "WHERE AI_FILTER(PROMPT('Is {0} a case report?', r.text)) AND r.year > 2020")
SPARK_OF_OURS = ("SELECT r.id, ai_classify(r.text, ARRAY('urgent', 'routine')) AS c FROM reports AS r "
                 "JOIN terms AS t ON ai_if('Is {0} about {1}?', r.text, t.term) "
                 "WHERE ai_if('Is {0} a case report?', r.text) AND r.year > 2020")


def test_docstring_examples():
    result = doctest.testmod(quail_spark.dialect)
    assert result.failed == 0 and result.attempted > 0


def test_spark_sql_passes_through_unchanged():
    text, calls = to_spark(OURS)
    assert text == OURS
    assert calls == (Call.of("ai_classify", "{0}", ("r.text",), ("urgent", "routine")),
                     Call.of("ai_if", "Is {0} about {1}?", ("r.text", "t.term")),
                     Call.of("ai_if", "Is {0} a case report?", ("r.text",)))


def test_three_spellings_give_the_same_spark_sql():
    ours = to_spark(OURS)[1]
    for sql in (BIGQUERY, SNOWFLAKE):
        text, calls = to_spark(sql)
        assert text == SPARK_OF_OURS
        assert calls == ours


def test_explicit_dialect_and_detection_agree():
    assert to_spark(BIGQUERY, "bigquery") == to_spark(BIGQUERY)
    assert to_spark(SNOWFLAKE, "snowflake") == to_spark(SNOWFLAKE)
    with pytest.raises(ValueError, match="unknown dialect 'mysql'"):
        to_spark(OURS, "mysql")


def test_bigquery_score_and_named_prompt():
    ours = "SELECT id, ai_score('Is {0} kind?', text) AS s FROM reviews"
    assert to_spark("SELECT id, AI.SCORE(('Is ', text, ' kind?')) AS s FROM reviews")[0] == ours
    assert to_spark("SELECT id, AI.SCORE(prompt => ('Is ', text, ' kind?'), connection_id => 'c') AS s "
                    "FROM reviews")[0] == ours


def test_hints_in_every_spelling():
    spark = to_spark("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text, map('selectivity', 0.3))")
    snow = to_spark("SELECT id FROM reviews WHERE AI_FILTER(PROMPT('Is {0} rude?', text), "
                    "OBJECT_CONSTRUCT('selectivity', 0.3))")
    assert spark[1] == snow[1] == (Call.of("ai_if", "Is {0} rude?", ("text",), (), (("selectivity", 0.3),)),)
    assert snow[0] == "SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text, MAP('selectivity', 0.3))"


def test_mixed_hints_become_a_named_struct():
    text, calls = to_spark("SELECT r.id FROM reports r JOIN terms t ON AI_FILTER(PROMPT('Is {0} about {1}?', "
                           "r.text, t.term), OBJECT_CONSTRUCT('selectivity', 0.2, 'anchor', 't'))")
    assert "named_struct('selectivity', 0.2, 'anchor', 't')" in text
    again = to_spark(text)[1]
    assert again == calls and calls[0].hints == (("selectivity", 0.2), ("anchor", "t"))


def test_all_of_spark_sql_around_the_calls_is_kept():
    sql = ("WITH x AS (SELECT * FROM notes) SELECT kind, count(*) FROM x WHERE AI_FILTER(PROMPT("
           "'Is {0} ok?', body)) OR year > 2020 GROUP BY kind HAVING count(*) > 1 "
           "UNION SELECT kind, 0 FROM notes WHERE id IN (SELECT id FROM notes WHERE year < 2000)")
    text, calls = to_spark(sql)
    assert text == ("WITH x AS (SELECT * FROM notes) SELECT kind, COUNT(*) FROM x WHERE ai_if('Is {0} ok?', "
                    "body) OR year > 2020 GROUP BY kind HAVING COUNT(*) > 1 UNION SELECT kind, 0 FROM notes "
                    "WHERE id IN (SELECT id FROM notes WHERE year < 2000)")
    assert [c.template for c in calls] == ["Is {0} ok?"]


def test_ai_if_inside_a_string_is_text_not_a_call():
    text, calls = to_spark("SELECT id FROM reviews WHERE ai_if('Is {0} about AI.IF(x)?', text)")
    assert calls[0].template == "Is {0} about AI.IF(x)?"
    assert text == "SELECT id FROM reviews WHERE ai_if('Is {0} about AI.IF(x)?', text)"


def test_brackets_outside_ai_classify_are_spark_sql():
    sql = "SELECT ai_if('Is {0} ok?', body) AS ok, tags[0] FROM notes"
    assert to_spark(sql)[0] == sql
    assert to_spark("SELECT AI_CLASSIFY(body, ['a', 'b']), tags[0] FROM notes")[0] == (
        "SELECT ai_classify(body, ARRAY('a', 'b')), tags[0] FROM notes")


def test_text_spark_cannot_parse_is_left_to_spark():
    assert to_spark("SELECT id FROM reviews WHERE")[0] == "SELECT id FROM reviews WHERE"


def test_a_template_read_from_a_column_is_spark_sql_as_written():
    """ai_if(q.question, n.body): each row's question is rendered by the executor; no Call to check.
    The BigQuery and Snowflake spellings need a text template (their translation is a Call)."""
    sql = ("SELECT n.id FROM notes n CROSS JOIN qs q WHERE ai_if(q.question, n.body) "
           "AND ai_if('Is {0} rude?', n.body) AND ai_score(concat('Is {0} about ', q.topic, '?'), n.body) > 0.5")
    text, calls = to_spark(sql)
    assert text == sql and calls == (Call.of("ai_if", "Is {0} rude?", ("n.body",)),)
    with pytest.raises(TemplateError, match="expected a template text first"):
        to_spark("SELECT id FROM notes n CROSS JOIN qs q WHERE AI.IF(PROMPT(q.question, n.body))")


@pytest.mark.parametrize("sql, error, words", [
    ("SELECT id FROM reviews WHERE ai_if('Is {0} like {1}?', text)", TemplateError, ["{1}", "1 were given"]),
    ("SELECT id FROM reviews WHERE ai_if('Is it rude?', text)", TemplateError, ["placeholder {0}"]),
    ("SELECT id FROM reviews WHERE ai_if('Is the sky blue?')", TemplateError, ["column"]),
    ("SELECT AI.CLASSIFY(text, connection_id => 'c') FROM reviews", TemplateError, ["labels"]),
    ("SELECT id FROM reviews WHERE AI.IF(PROMPT('Is {0} ok?', text), colour => 'red')", UnsupportedSQL,
     ["colour"]),
    ("SELECT r.id FROM reports r JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term, "
     "map('selectivity', 1.5))", HintError, ["'selectivity'", "1.5"]),
    ("SELECT r.id FROM reports r JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term, "
     "map('anchor', 'x'))", HintError, ["'anchor'", "'x'", "['r', 't']"]),
    ("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text, map('speed', 2))", HintError, ["unknown hint"]),
    ("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text, map('tokens', -3))", HintError,
     ["'tokens'", "positive", "-3"]),
    ("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text, map('selectivity', 'high'))", HintError,
     ["'selectivity'", "'high'"]),
    ("SELECT ai_classify(text, array('a', NULL)) FROM reviews", TemplateError, ["label 2 is NULL"]),
])
def test_errors_name_what_is_wrong(sql, error, words):
    with pytest.raises(error) as info:
        to_spark(sql)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_tokens_hints_and_numeric_text_are_accepted():
    """The hints Spark's check accepts (tokens for {0}, tokens_1 for {1}; a selectivity written as text
    that reads as a number) pass the front end too, as numbers."""
    _, calls = to_spark("SELECT r.id FROM reports r JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term, "
                        "map('tokens', 300, 'tokens_1', 4, 'selectivity', '0.3'))")
    assert calls[0].hints == (("tokens", 300.0), ("tokens_1", 4.0), ("selectivity", 0.3)), calls
