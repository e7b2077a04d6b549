"""explain: Spark's explain(mode='cost') text parsed into a tree with statistics, and our
estimates on top of it (filter order, join anchors, SoL), on plan texts Spark 4.3 printed."""
import pytest

from quail_spark import cost as C
from quail_spark.dialect import to_spark
from quail_spark.explain import explain_plan, parse_plan

CHAIN_ON = """== Optimized Logical Plan ==
Project [id#11], Statistics(sizeInBytes=691.0 B)
+- Filter pythonUDF0#18: boolean, Statistics(sizeInBytes=1902.0 B)
   +- ArrowEvalPython [quail_chain({"calls": [{"template": "Is {0} long?", "selectivity": 0.2, "rank": 15.0}, \
{"template": "Is {0} a, complaint?", "selectivity": 0.5, "rank": 40.0}]}, body#12)#17], [pythonUDF0#18], 250, \
Statistics(sizeInBytes=1902.0 B, rowCount=1.00E+3)
      +- Sort [body#12 ASC NULLS FIRST], false, Statistics(sizeInBytes=1902.0 B, rowCount=1.00E+3)
         +- Project [id#11, body#12], Statistics(sizeInBytes=1902.0 B)
            +- Filter (isnotnull(year#13) AND (year#13 > 2019)), Statistics(sizeInBytes=3.3 KiB)
               +- Relation [id#11,body#12,year#13,kind#14] parquet, Statistics(sizeInBytes=3.3 KiB)

== Physical Plan ==
*(2) Project [id#11]
"""
CHAIN_SQL = ("SELECT id FROM pnotes WHERE year > 2019 AND ai_if('Is {0} a, complaint?', body) "
             "AND ai_if('Is {0} long?', body, map('selectivity', 0.2))")

CHAIN_OFF = """== Optimized Logical Plan ==
Project [id#11], Statistics(sizeInBytes=675.0 B)
+- Filter (pythonUDF0#17 AND pythonUDF1#18), Statistics(sizeInBytes=2.1 KiB)
   +- ArrowEvalPython [ai_if(Is {0} a, complaint?, body#12)#15, ai_if(Is {0} long?, body#12, map(keys: [selectivity], \
values: [0.2]))#16], [pythonUDF0#17, pythonUDF1#18], 250, Statistics(sizeInBytes=2.1 KiB)
      +- Project [id#11, body#12, year#13], Statistics(sizeInBytes=2.1 KiB, rowCount=400)
         +- Relation [id#11,body#12,year#13,kind#14] parquet, Statistics(sizeInBytes=3.3 KiB)
"""

JOIN_ON = """== Optimized Logical Plan ==
Project [id#11, tid#4], Statistics(sizeInBytes=3.03E+21 B)
+- Filter pythonUDF0#21: boolean, Statistics(sizeInBytes=1.08E+22 B)
   +- ArrowEvalPython [quail_join({"template": "Does {0} mention {1}?", "selectivity": 0.5}, body#12, term#5)#20], \
[pythonUDF0#21], 250, Statistics(sizeInBytes=1.08E+22 B)
      +- Sort [body#12 ASC NULLS FIRST], false, Statistics(sizeInBytes=1.08E+22 B)
         +- Join Inner, leftHint=(strategy=broadcast), Statistics(sizeInBytes=1.08E+22 B)
            :- Project [id#11, body#12], Statistics(sizeInBytes=1902.0 B, rowCount=500)
            :  +- Relation [id#11,body#12,year#13,kind#14] parquet, Statistics(sizeInBytes=3.3 KiB)
            +- Project [tid#4, term#5], Statistics(sizeInBytes=4.9 EiB)
               +- LogicalRDD [tid#4, term#5, kind#6], false, Statistics(sizeInBytes=8.0 EiB)
"""
JOIN_SQL = "SELECT n.id, t.tid FROM pnotes n JOIN terms t ON ai_if('Does {0} mention {1}?', n.body, t.term)"
MODEL = C.cost_model("qwen3-4b", "h200")


def test_tree_depths_children_and_rows_from_statistics():
    root = parse_plan(CHAIN_ON)
    assert root.text == "Project [id#11]" and root.rows == pytest.approx(691 / 16)
    chain = root.children[0].children[0]
    assert chain.text.startswith("ArrowEvalPython [quail_chain(") and chain.rows == 1000
    relation = chain.children[0].children[0].children[0].children[0]
    assert relation.text.startswith("Relation [") and relation.children == []
    assert relation.rows == pytest.approx(3.3 * 1024 / (16 * 4))
    join = parse_plan(JOIN_ON).children[0].children[0].children[0].children[0]
    assert [c.rows for c in join.children] == [500, None]  # 8 EiB: Spark's "unknown"


def test_fused_chain_shows_the_rules_order_and_short_circuit():
    text = explain_plan(CHAIN_ON, to_spark(CHAIN_SQL)[1], MODEL)
    order = text.split("== AI filter order")[1]
    assert "on body (1,000 rows; fused by the rules)" in order
    assert order.index("Is {0} long?") < order.index("Is {0} a, complaint?")
    assert "evaluated=1,000" in order and "evaluated=200" in order  # 1,000 x selectivity 0.2
    assert "== SoL estimate ==\ntotal: 1,200 prompts" in text


def test_unfused_chain_is_listed_in_rank_order():
    text = explain_plan(CHAIN_OFF, to_spark(CHAIN_SQL)[1], MODEL)
    order = text.split("== AI filter order")[1]
    assert "on body (400 rows; rank order; this plan evaluates every conjunct on every row)" in order
    assert order.index("Is {0} long?") < order.index("Is {0} a, complaint?")


def test_join_anchor_is_the_column_the_rules_sort_by():
    text = explain_plan(JOIN_ON, to_spark(JOIN_SQL)[1], MODEL, doc_tokens={"body": 500, "term": 5})
    line = text.split("== AI join anchors")[1].splitlines()[1]
    assert "anchor n.body (500 rows; the rules' quail_join, sorted by it), partner t.term (unknown rows)" in line
    assert "SoL per row of t.term" in line
    assert "documents assumed body=500, term=5, else 300 tokens" in text


def test_known_rows_pick_the_cheaper_anchor():
    costs = C.anchor_costs(MODEL, 500, 1000, 500, 5, 6)
    assert costs["left"].seconds < costs["right"].seconds
