"""Errors: raised by the planner before any job, naming the culprit."""

import pytest

from quail_spark.errors import (AmbiguousColumn, DocumentTypeError, HintError, QuailPlanError,
                                TemplateError, UnknownColumn, UnknownTable, UnsupportedSQL)
from quail_spark.parser import parse
from quail_spark.rules import optimize

from .golden import CATALOG, CTX


def error(sql, kind=QuailPlanError, optimise=False) -> str:
    with pytest.raises(kind) as info:
        plan = parse(sql, CATALOG)
        if optimise:
            optimize(plan, CTX)
    assert isinstance(info.value, ValueError)
    return str(info.value)


def test_unknown_column_is_named_with_what_exists():
    msg = error("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', body)", UnknownColumn)
    assert "'body'" in msg and "reviews.text" in msg


def test_unknown_qualified_column():
    msg = error("SELECT r.id FROM reviews r WHERE p.name = 'x'", UnknownColumn)
    assert "'p.name'" in msg


def test_unknown_table_lists_the_tables():
    msg = error("SELECT id FROM review", UnknownTable)
    assert "'review'" in msg and "reviews" in msg and "terms" in msg


def test_ambiguous_column():
    msg = error("SELECT id FROM reviews r, products p", AmbiguousColumn)
    assert "'id'" in msg and "r.id" in msg and "p.id" in msg


def test_non_string_document_column_names_column_and_type():
    msg = error("SELECT id FROM reviews WHERE ai_if('Is {0} high?', stars)", DocumentTypeError)
    assert "'reviews.stars'" in msg and "'int'" in msg and "ai_if" in msg
    msg = error("SELECT ai_score('Is {0} cheap?', price) FROM products", DocumentTypeError)
    assert "'products.price'" in msg and "'double'" in msg


def test_placeholder_without_argument():
    msg = error("SELECT id FROM reviews WHERE ai_if('Is {0} about {1}?', text)", TemplateError)
    assert "{1}" in msg and "1 were given" in msg and "reviews.text" in msg


def test_argument_without_placeholder():
    msg = error("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text, title)", TemplateError)
    assert "argument 1 (reviews.title)" in msg and "{1}" in msg


def test_template_without_a_column():
    msg = error("SELECT id FROM reviews WHERE ai_if('Is the sky blue?')", TemplateError)
    assert "column" in msg


@pytest.mark.parametrize("sql, construct", [
    ("SELECT stars FROM reviews GROUP BY stars", "GROUP BY"),
    ("SELECT stars FROM reviews HAVING stars > 1", "HAVING"),
    ("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text) OR ai_if('Is {0} sad?', text)",
     "OR involving an AI predicate"),
    ("SELECT id FROM reviews WHERE stars = 1 OR ai_if('Is {0} sad?', text)", "OR involving an AI predicate"),
    ("SELECT id FROM reviews WHERE stars = 1 OR stars = 2", "OR"),
    ("SELECT r.id FROM reviews r LEFT JOIN products p ON r.product_id = p.id", "LEFT JOIN"),
    ("SELECT r.id FROM reviews r RIGHT JOIN products p ON r.product_id = p.id", "RIGHT JOIN"),
    ("SELECT r.id FROM reviews r FULL OUTER JOIN products p ON r.product_id = p.id", "FULL JOIN"),
    ("SELECT r.id FROM reports r LEFT JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term)",
     "LEFT JOIN"),
    ("SELECT r.id FROM reviews r JOIN products p USING (id)", "JOIN ... USING"),
    ("SELECT id FROM (SELECT id FROM reviews) s", "subquery"),
    ("SELECT id FROM reviews WHERE id IN (SELECT id FROM terms)", "subquery"),
    ("SELECT id FROM reviews UNION SELECT id FROM terms", "UNION"),
    ("SELECT DISTINCT id FROM reviews", "DISTINCT"),
    ("SELECT count(*) FROM reviews", "aggregate function"),
    ("SELECT id, row_number() OVER (ORDER BY id) FROM reviews", "window function"),
    ("WITH x AS (SELECT id FROM reviews) SELECT id FROM x", "WITH"),
    ("SELECT id FROM reviews LIMIT 3 OFFSET 2", "OFFSET"),
    ("INSERT INTO reviews VALUES (1)", "statement INSERT"),
    ("SELECT id FROM reviews; SELECT id FROM terms", "several statements"),
    ("SELECT id FROM reviews WHERE", "does not parse"),
    ("SELECT ai_if('Is {0} rude?', text) FROM reviews", "ai_if in the SELECT list"),
    ("SELECT id FROM reviews WHERE ai_score('Is {0} rude?', text) > 0.5", "ai_score inside a WHERE"),
    ("SELECT id FROM reviews WHERE NOT ai_if('Is {0} rude?', text)", "ai_if inside a WHERE"),
    ("SELECT id + 1 FROM reviews", "SELECT item ADD"),
    ("SELECT 1", "SELECT without FROM"),
    ("SELECT id FROM reviews WHERE lower(title) = 'x'", "expression LOWER"),
    ("SELECT r.id FROM reports r, terms t, reviews v WHERE "
     "ai_if('Do {0}, {1} and {2} agree?', r.text, t.term, v.text)", "ai_if over more than two tables"),
    ("SELECT r.id FROM reviews r, products p WHERE ai_if('Is {0} {1} a {2}?', r.title, r.text, p.name)",
     "several columns of one table"),
    ("SELECT ai_score('Is {0} a {1}?', r.text, p.name) FROM reviews r, products p", "ai_score over two tables"),
])
def test_unsupported_sql_names_the_construct(sql, construct):
    msg = error(sql, UnsupportedSQL)
    assert construct in msg


def test_two_ai_predicates_between_the_same_tables_are_refused_when_planning():
    msg = error("SELECT r.id FROM reports r, terms t WHERE ai_if('Is {0} about {1}?', r.text, t.term) "
                "AND ai_if('Does {0} deny {1}?', r.text, t.term)", UnsupportedSQL, optimise=True)
    assert "several AI predicates between the same tables" in msg


@pytest.mark.parametrize("hint, words", [
    ("map('selectivity', 1.5)", ["'selectivity'", "1.5"]),
    ("map('selectivity', 'high')", ["'selectivity'", "'high'"]),
    ("map('anchor', 'x')", ["'anchor'", "'x'", "['r', 't']"]),
    ("map('speed', 2)", ["'speed'", "unknown hint"]),
])
def test_bad_hints(hint, words):
    msg = error(f"SELECT r.id FROM reports r JOIN terms t ON ai_if('Is {{0}} about {{1}}?', r.text, t.term, "
                f"{hint})", HintError)
    assert all(w in msg for w in words), msg


def test_classify_needs_labels():
    assert "categories" in error("SELECT ai_classify(text) FROM reviews")
    assert "labels" in error("SELECT ai_classify('Mood of {0}', text) FROM reviews", TemplateError)
