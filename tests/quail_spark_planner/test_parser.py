"""Parser: every supported construct, the three dialect spellings, and the plans they give."""

import pytest

from quail_spark import plan as P
from quail_spark.parser import parse

from .golden import CATALOG


def tree(sql: str) -> str:
    return P.render_tree(parse(sql, CATALOG))


def where(sql_predicate: str) -> str:
    """The Filter line for ``SELECT id FROM reviews WHERE <predicate>``."""
    return tree(f"SELECT id FROM reviews WHERE {sql_predicate}").splitlines()[1].strip()


@pytest.mark.parametrize("sql, expected", [
    ("id = 3", "Filter reviews.id = 3"),
    ("id <> 3", "Filter reviews.id <> 3"),
    ("id != 3", "Filter reviews.id <> 3"),
    ("stars < 2.5", "Filter reviews.stars < 2.5"),
    ("stars > -1", "Filter reviews.stars > -1"),
    ("stars <= 4", "Filter reviews.stars <= 4"),
    ("stars >= 4", "Filter reviews.stars >= 4"),
    ("title = 'x'", "Filter reviews.title = 'x'"),
    ("stars = product_id", "Filter reviews.stars = reviews.product_id"),
    ("id IN (1, 2)", "Filter reviews.id IN (1, 2)"),
    ("id NOT IN (1, 2)", "Filter reviews.id NOT IN (1, 2)"),
    ("title LIKE 'A%'", "Filter reviews.title LIKE 'A%'"),
    ("title NOT LIKE 'A%'", "Filter reviews.title NOT LIKE 'A%'"),
    ("NOT title LIKE 'A%'", "Filter reviews.title NOT LIKE 'A%'"),
    ("title IS NULL", "Filter reviews.title IS NULL"),
    ("title IS NOT NULL", "Filter reviews.title IS NOT NULL"),
    ("stars BETWEEN 1 AND 3", "Filter reviews.stars BETWEEN 1 AND 3"),
    ("stars NOT BETWEEN 1 AND 3", "Filter reviews.stars NOT BETWEEN 1 AND 3"),
    ("(stars > 1)", "Filter reviews.stars > 1"),
])
def test_relational_predicates(sql, expected):
    assert where(sql) == expected


def test_conjuncts_become_nodes_in_written_order():
    assert tree("SELECT id FROM reviews WHERE stars > 1 AND ai_if('Is {0} rude?', text) "
                "AND (id < 9 AND title IS NULL)") == """\
Project [reviews.id]
  Filter reviews.title IS NULL
    Filter reviews.id < 9
      AIFilter ai_if('Is {0} rude?', reviews.text)
        Filter reviews.stars > 1
          Scan reviews AS reviews [id, text, title, stars]"""


def test_select_list_aliases_and_star():
    assert tree("SELECT r.id AS rid, title, r.* FROM reviews r") == """\
Project [r.id AS rid, r.title, r.id, r.text, r.title, r.stars, r.product_id]
  Scan reviews AS r [id, text, title, stars, product_id]"""
    assert tree("SELECT * FROM terms") == """\
Project [terms.id, terms.term]
  Scan terms AS terms [id, term]"""


def test_scan_columns_are_those_the_query_reads_in_table_order():
    plan = parse("SELECT stars FROM reviews r WHERE ai_if('Is {0} rude?', r.text) ORDER BY r.id", CATALOG)
    scan = next(n for n in P.walk(plan) if isinstance(n, P.Scan))
    assert scan.columns == ("id", "text", "stars")


def test_joins_inner_and_comma():
    assert tree("SELECT r.id FROM reviews AS r INNER JOIN products p ON r.product_id = p.id "
                "AND p.price > 3, terms t") == """\
Project [r.id]
  CrossJoin
    Join ON r.product_id = p.id AND p.price > 3
      Scan reviews AS r [id, product_id]
      Scan products AS p [id, price]
    Scan terms AS t []"""


def test_ai_join_in_on_with_hints():
    plan = parse("SELECT r.id FROM reports r JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term, "
                 "map('selectivity', 0.2, 'anchor', 'r'))", CATALOG)
    f = plan.child
    assert isinstance(f, P.AIFilter)
    assert f.template == P.Template("Is {0} about {1}?", (P.ColumnRef("r", "text"), P.ColumnRef("t", "term")))
    assert f.hints == P.Hints(selectivity=0.2, anchor="r")


def test_ai_filter_is_an_alias_of_ai_if():
    a = parse("SELECT id FROM reviews WHERE ai_filter('Is {0} rude?', text)", CATALOG)
    b = parse("SELECT id FROM reviews WHERE ai_if('Is {0} rude?', text)", CATALOG)
    assert a == b


def test_ai_columns():
    assert tree("SELECT id, ai_score('Is {0} kind?', text) AS kind, ai_classify(text, array('a', 'b')), "
                "ai_classify('Which mood is {0}?', text, array('x', 'y')) AS mood, "
                "ai_score('Is {0} about {1}?', title, 'cats') FROM reviews") == """\
Project [reviews.id, ai_score('Is {0} kind?', reviews.text) AS kind, \
ai_classify('{0}', reviews.text, ['a', 'b']) AS ai_classify, \
ai_classify('Which mood is {0}?', reviews.text, ['x', 'y']) AS mood, \
ai_score('Is {0} about {1}?', reviews.title, 'cats') AS ai_score]
  Scan reviews AS reviews [id, text, title]"""


def test_order_by_score_limit_is_topk_over_the_select_item():
    assert tree("SELECT id, ai_score('Is {0} kind?', text) AS s FROM reviews ORDER BY s DESC LIMIT 3") == """\
TopK 3 [s DESC]
  Project [reviews.id, ai_score('Is {0} kind?', reviews.text) AS s]
    Scan reviews AS reviews [id, text]"""
    # the same score written again in ORDER BY is the same column, computed once
    assert tree("SELECT id, ai_score('Is {0} kind?', text) AS s FROM reviews "
                "ORDER BY ai_score('Is {0} kind?', text) DESC LIMIT 3") == tree(
        "SELECT id, ai_score('Is {0} kind?', text) AS s FROM reviews ORDER BY s DESC LIMIT 3")


def test_order_by_a_value_not_selected_is_computed_then_dropped():
    assert tree("SELECT id FROM reviews ORDER BY ai_score('Is {0} kind?', text) DESC, stars LIMIT 2") == """\
Project [id]
  TopK 2 [_order_0 DESC, _order_1]
    Project [reviews.id, ai_score('Is {0} kind?', reviews.text) AS _order_0, reviews.stars AS _order_1]
      Scan reviews AS reviews [id, text, stars]"""


def test_sort_and_limit():
    assert tree("SELECT id FROM reviews ORDER BY id").splitlines()[0] == "Sort [id]"
    assert tree("SELECT id FROM reviews LIMIT 7").splitlines()[0] == "Limit 7"


OURS = ("SELECT r.id, ai_classify(r.text, array('urgent', 'routine')) AS c FROM reports r "
        "JOIN terms t ON ai_if('Is {0} about {1}?', r.text, t.term) "
        "WHERE ai_if('Is {0} a case report?', r.text) AND r.year > 2020")
BIGQUERY = ("SELECT r.id, AI.CLASSIFY(r.text, categories => ['urgent', 'routine']) AS c FROM reports r "
            "JOIN terms t ON AI.IF(PROMPT('Is {0} about {1}?', r.text, t.term)) "
            "WHERE AI.IF(('Is ', r.text, ' a case report?'), connection_id => 'us.conn') AND r.year > 2020")
SNOWFLAKE = ("SELECT r.id, AI_CLASSIFY(r.text, ['urgent', 'routine']) AS c FROM reports r "
             "JOIN terms t ON AI_FILTER(PROMPT('Is {0} about {1}?', r.text, t.term)) "
             "WHERE AI_FILTER(PROMPT('Is {0} a case report?', r.text)) AND r.year > 2020")


def test_three_spellings_give_the_same_plan():
    ours = parse(OURS, CATALOG)
    assert parse(BIGQUERY, CATALOG) == ours
    assert parse(SNOWFLAKE, CATALOG) == ours


def test_bigquery_score_and_named_prompt():
    ours = parse("SELECT id, ai_score('Is {0} kind?', text) AS s FROM reviews", CATALOG)
    assert parse("SELECT id, AI.SCORE(('Is ', text, ' kind?')) AS s FROM reviews", CATALOG) == ours
    assert parse("SELECT id, AI.SCORE(prompt => ('Is ', text, ' kind?'), connection_id => 'c') AS s "
                 "FROM reviews", CATALOG) == ours


def test_hints_in_snowflake_object_construct():
    a = parse("SELECT id FROM reviews WHERE AI_FILTER(PROMPT('Is {0} rude?', text), "
              "OBJECT_CONSTRUCT('selectivity', 0.3))", CATALOG)
    assert a.child.hints == P.Hints(selectivity=0.3)


def test_ai_if_inside_a_string_is_text_not_a_call():
    plan = parse("SELECT id FROM reviews WHERE ai_if('Is {0} about AI.IF(x)?', text)", CATALOG)
    assert plan.child.template.text == "Is {0} about AI.IF(x)?"
