"""explain: the estimates the rules wrote into the plan (quail_chain / quail_join specs), read
from Spark's explain text and printed in the order the plan evaluates; no numbers of its own."""
from quail_spark.dialect import to_spark
from quail_spark.explain import explain_plan, planned_calls

CHAIN_SPEC = ('{"doc": "notes.body", "doc_tokens": 300.000, "tokens_source": "default", "rows": 1000.00, '
              '"rows_source": "default", "calls": [{"template": "Is {0} long?", "selectivity": 0.200000, '
              '"selectivity_source": "hint", "seconds_per_row": 4.0e-05, "rank": 5.0e-05, "evaluated": 1000.00}, '
              '{"template": "Is {0} a, complaint?", "selectivity": 0.500000, "selectivity_source": "default", '
              '"seconds_per_row": 4.0e-05, "rank": 8.0e-05, "evaluated": 200.000}], '
              '"cost": {"requested": 357500, "fresh": 326300, "seconds": 0.75}}')
JOIN_SPEC = ('{"template": "Is {0} in {1}?", "selectivity": 0.500000, "selectivity_source": "default", '
             '"anchor": "n.body", "why": "cost model", "sides": [{"column": "t.term", "rows": 30.0, '
             '"rows_source": "statistics", "tokens": 2.0, "tokens_source": "statistics", "cost_as_anchor": '
             '{"requested": 1000, "fresh": 900, "seconds": 0.9}}, {"column": "n.body", "rows": 40.0, '
             '"rows_source": "statistics", "tokens": 400.0, "tokens_source": "hint", "cost_as_anchor": '
             '{"requested": 1000, "fresh": 100, "seconds": 0.1}}], "cost": {"requested": 1000, "fresh": 100, '
             '"seconds": 0.1}}')
PLAN = f"""== Optimized Logical Plan ==
Project [id#11, tid#4]
+- Filter pythonUDF0#21: boolean
   +- ArrowEvalPython [quail_join({JOIN_SPEC}, term#5, body#12)#20], [pythonUDF0#21], 250
      +- Sort [if ((length(body#12) > length(term#5))) body#12 else term#5 ASC NULLS FIRST], false
         +- Join Inner, rightHint=(strategy=broadcast)
            :- Filter pythonUDF0#18: boolean
            :  +- ArrowEvalPython [quail_chain({CHAIN_SPEC}, body#12)#17], [pythonUDF0#18], 250
            :     +- Relation [id#11,body#12,year#13,kind#14] parquet
            +- LogicalRDD [tid#4, term#5, kind#6], false

== Physical Plan ==
ArrowEvalPython [quail_join({JOIN_SPEC}, term#5, body#12)#20], [pythonUDF0#21], 250
"""
SQL = ("SELECT n.id, t.tid FROM notes n JOIN terms t ON ai_if('Is {0} in {1}?', t.term, n.body) "
       "WHERE ai_if('Is {0} a, complaint?', n.body) AND ai_if('Is {0} long?', n.body, map('selectivity', 0.2)) "
       "AND ai_score('Is {0} rude?', n.body) > 0.5")


def test_specs_in_evaluation_order_each_once():
    found = planned_calls(PLAN)
    assert [k for k, _ in found] == ["chain", "join"]  # the chain is deeper: it runs first
    assert found[1][1]["anchor"] == "n.body"


def test_chain_lines_are_the_plans_numbers_in_its_order():
    text = explain_plan(PLAN, to_spark(SQL)[1], "toy at 1 TFLOP/s")
    order = text.split("== AI filter order")[1].split("==\n", 1)[1].splitlines()
    assert order[0].startswith("on notes.body (1,000 rows, default; document 300 tokens, default; "
                               "cost 326,300 fresh tokens")
    assert order[1] == "  1. ai_if('Is {0} long?') selectivity=0.2 (hint) rank=5e-05 evaluated=1,000"
    assert order[2] == "  2. ai_if('Is {0} a, complaint?') selectivity=0.5 (default) rank=8e-05 evaluated=200"


def test_join_lines_show_the_anchor_and_both_prices():
    text = explain_plan(PLAN, to_spark(SQL)[1])
    lines = text.split("== AI join anchors")[1].splitlines()[1:4]
    assert lines[0].startswith("  ai_if('Is {0} in {1}?', t.term, n.body): anchor n.body (cost model); cost 100 fresh")
    assert lines[1].startswith("    t.term: 30 rows (statistics), 2 tokens (statistics); as anchor 900 fresh")
    assert lines[2].startswith("    n.body: 40 rows (statistics), 400 tokens (hint); as anchor 100 fresh")


def test_join_order_shows_chosen_and_written_costs():
    spec = JOIN_SPEC[:-1] + (', "join_order": {"chosen": ["n", "c", "t"], "seconds": 12.5, '
                             '"written": ["n", "t", "c"], "written_seconds": 109.0}}')
    text = explain_plan(PLAN.replace(JOIN_SPEC, spec))
    block = text.split("== AI join order")[1].splitlines()
    assert block[1:3] == ["  chosen: n > c > t  cost 12.5 s", "  written: n > t > c  cost 109 s"]


def test_a_score_compared_with_a_column_reads_as_the_comparison():
    spec = JOIN_SPEC[:-1] + ', "score_compared": "> t.bar"}'
    plan = PLAN.replace(f"quail_join({JOIN_SPEC}", f"quail_join_score({spec}")
    assert [k for k, _ in planned_calls(plan)] == ["chain", "join_score"]
    line = explain_plan(plan).split("== AI join anchors")[1].splitlines()[1]
    assert line.startswith("  ai_score('Is {0} in {1}?', t.term, n.body) > t.bar: anchor n.body (cost model)")


def test_calls_the_rules_did_not_plan_and_the_total():
    text = explain_plan(PLAN, to_spark(SQL)[1], "toy at 1 TFLOP/s")
    rest = text.split("== AI calls the rules did not plan")[1].splitlines()
    assert rest[1] == "  ai_score('Is {0} rude?', n.body)"
    assert text.endswith("the planned AI calls: 358,500 tokens requested, 326,400 fresh; SoL 0.85 s (toy at 1 TFLOP/s)")


def test_a_plan_without_the_rules_calls_prints_no_estimate():
    off = "== Optimized Logical Plan ==\nFilter ai_if(Is {0} long?, body#1)\n+- LocalRelation [body#1]\n"
    text = explain_plan(off, to_spark("SELECT body FROM t WHERE ai_if('Is {0} long?', body)")[1])
    assert "== SoL estimate" not in text and "  ai_if('Is {0} long?', body)" in text


def test_two_sites_of_one_spec_count_twice_and_a_line_repeating_it_once():
    """A UNION of the same AI filter: two chains run (two lines), so the total is two chains' cost."""
    union = f"""== Optimized Logical Plan ==
Union false, false
:- Filter pythonUDF0#18: boolean
:  +- ArrowEvalPython [quail_chain({CHAIN_SPEC}, body#12)#17, quail_chain({CHAIN_SPEC}, body#12)#17], [pythonUDF0#18]
:     +- LocalRelation [id#11, body#12]
+- Filter pythonUDF0#28: boolean
   +- ArrowEvalPython [quail_chain({CHAIN_SPEC}, body#22)#27], [pythonUDF0#28], 250
      +- LocalRelation [id#21, body#22]
"""
    assert [k for k, _ in planned_calls(union)] == ["chain", "chain"]
    assert explain_plan(union).endswith("the planned AI calls: 715,000 tokens requested, 652,600 fresh; SoL 1.5 s")


def test_calls_on_partners_are_listed_as_planned_without_an_estimate():
    spec = '{"template": "Does {0} mention {1}?"}'
    left = f"""== Optimized Logical Plan ==
Project [id#1, tid#4]
+- Generate explode(quail_matched#9), true, [tid#4]
   +- Project [id#1, pythonUDF0#8 AS m0#7]
      +- ArrowEvalPython [quail_match({spec}, transform(parts#5, x -> body#2), transform(parts#5, x -> x.term))#6], [pythonUDF0#8], 250
         +- LocalRelation [id#1, body#2, parts#5]
"""
    calls = to_spark("SELECT n.id, t.tid FROM n LEFT JOIN t ON ai_if('Does {0} mention {1}?', n.body, t.term)")[1]
    text = explain_plan(left, calls)
    assert "== AI calls on each row's partners" in text and "  ai_if('Does {0} mention {1}?')" in text
    assert "did not plan" not in text and "== SoL estimate" not in text  # no estimate, no made-up total
