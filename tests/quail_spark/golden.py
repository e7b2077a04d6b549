"""Golden plan files of the optimizer rules: ``golden/<rule>/<case>.txt`` holds a query and its
plan before and after the rule, as sqlglot's optimizer fixtures do. :func:`check` compares;
``QUAIL_UPDATE_GOLDEN=1`` rewrites the files instead (review the diff, then commit it).

Before / after: for the optimizer rules, Spark's optimized logical plan with the rules off and
on (``spark.quail.optimizer.enabled``) and the physical plan with them on; for the analysis
rules, which run on both settings, the parsed plan and the analyzed plan. Expression ids
(``#123``) and plan ids are normalised so the files are stable across runs.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("QUAIL_UPDATE_GOLDEN") == "1"
RULES = "spark.quail.optimizer.enabled"


def normalise(text: str) -> str:
    text = re.sub(r"#\d+L?\b", "#n", text)
    text = re.sub(r"plan_id=\d+", "plan_id=n", text)
    # what a planning-time sample cost, and whether an earlier plan had read it, vary between runs
    text = re.sub(r"(sample of \d+ rows), (?:scan [\d.]+ s|cached)", r"\1", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def sections(spark, sql: str, on: bool) -> dict:
    """The sections of ``explain(mode='extended')`` of ``sql`` with the rules on or off."""
    spark.conf.set(RULES, str(on).lower())
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            spark.sql(sql).explain(mode="extended")
    finally:
        spark.conf.set(RULES, "true")
    parts = re.split(r"^== (.*) ==$", out.getvalue(), flags=re.M)
    return {name: normalise(body) for name, body in zip(parts[1::2], parts[2::2])}


def render(spark, sql: str, analysis: bool = False, runnable: bool = False) -> str:
    """The golden text of ``sql``: the query, then the plan before and after the rules.
    ``runnable``: a rule that runs with the rules off too (it makes the query runnable): before is
    the analyzed plan, after the optimized plan with the rules off, then with them on."""
    on = sections(spark, sql, True)
    if runnable:
        off = sections(spark, sql, False)
        before, after = off["Analyzed Logical Plan"], off["Optimized Logical Plan"]
        after += "\n\n-- optimized, rules on\n" + on["Optimized Logical Plan"]
        after += "\n\n-- physical plan, rules on\n" + on["Physical Plan"]
        labels = ("analyzed", "optimized, rules off")
    elif analysis:
        before, after = on["Parsed Logical Plan"], on["Analyzed Logical Plan"]
        labels = ("parsed", "analyzed (rules on or off)")
    else:
        before, after = sections(spark, sql, False)["Optimized Logical Plan"], on["Optimized Logical Plan"]
        after += "\n\n-- physical plan, rules on\n" + on["Physical Plan"]
        labels = ("optimized, rules off", "optimized, rules on")
    return (f"-- query\n{sql}\n\n-- before: {labels[0]}\n{before}\n\n-- after: {labels[1]}\n{after}\n")


def check(spark, rule: str, case: str, sql: str, analysis: bool = False, runnable: bool = False) -> str:
    """Compare the plans of ``sql`` with ``golden/<rule>/<case>.txt`` (rewrite it under the flag);
    returns the text."""
    path = GOLDEN / rule / f"{case}.txt"
    got = render(spark, sql, analysis, runnable)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
        return got
    assert path.exists(), f"{path} is missing: run with QUAIL_UPDATE_GOLDEN=1 to write it"
    want = path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(path), "now"))
        raise AssertionError(f"plans of {rule}/{case} differ from the golden file "
                             f"(QUAIL_UPDATE_GOLDEN=1 rewrites it):\n{diff}")
    return got
