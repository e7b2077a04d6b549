"""Golden fixtures: one file of (SQL, expected plan) pairs per rule, one helper for all.

A fixture file ``fixtures/<rule>.sql`` holds cases::

    -- case: what the case shows
    SELECT ... ;
    <expected plan, as render_tree prints it>

The input of a rule is the parsed SQL after every rule before it in RULES; the
expected text is the plan after the rule (for estimate_costs: explain_logical).
Set QUAIL_GOLDEN_UPDATE=1 to rewrite the expected texts from the code.
"""

from __future__ import annotations

import os
from pathlib import Path

from quail_spark.catalog import DictCatalog
from quail_spark.cost import Context, cost_model
from quail_spark.explain import explain_logical
from quail_spark.parser import parse
from quail_spark.plan import render_tree
from quail_spark.rules import RULES

FIXTURES = Path(__file__).parent / "fixtures"

CATALOG = DictCatalog(
    {
        "reviews": {"id": "int", "text": "string", "title": "string", "stars": "int",
                    "product_id": "int"},
        "products": {"id": "int", "name": "string", "category": "string", "price": "double"},
        "reports": {"id": "int", "text": "string", "year": "int"},
        "terms": {"id": "int", "term": "string"},
    },
    rows={"reviews": 10_000, "products": 100, "reports": 500, "terms": 1127},
    tokens={"reviews": {"text": 300.0, "title": 12.0}, "products": {"name": 6.0, "category": 2.0},
            "reports": {"text": 5000.0}, "terms": {"term": 8.0}},
)
CTX = Context(CATALOG, cost_model("qwen3-4b", "h200"))


def read_cases(path: Path) -> list:
    """[(title, sql, expected)] of a fixture file."""
    cases = []
    for block in path.read_text().split("-- case:")[1:]:
        title, rest = block.split("\n", 1)
        sql, expected = rest.split(";\n", 1)
        cases.append((title.strip(), sql.strip(), expected.strip("\n")))
    return cases


def write_cases(path: Path, cases) -> None:
    path.write_text("".join(f"-- case: {t}\n{sql};\n{exp}\n\n" for t, sql, exp in cases))


def run_rule(name: str, sql: str) -> str:
    """Rendered plan of ``sql`` after the rules up to and including ``name``."""
    names = [r.__name__ for r in RULES]
    plan = parse(sql, CATALOG)
    for rule in RULES[: names.index(name) + 1]:
        plan = rule(plan, CTX)
    again = RULES[names.index(name)](plan, CTX)
    assert render_tree(again) == render_tree(plan), f"{name} is not idempotent on: {sql}"
    return explain_logical(plan, CTX) if name == "estimate_costs" else render_tree(plan)


def check_golden(name: str) -> None:
    """Check every case of ``fixtures/<name>.sql``; report all mismatches at once."""
    path = FIXTURES / f"{name}.sql"
    cases = read_cases(path)
    assert cases, f"expected cases in {path}, found none"
    got = [(t, sql, run_rule(name, sql)) for t, sql, _ in cases]
    if os.environ.get("QUAIL_GOLDEN_UPDATE"):
        write_cases(path, got)
        return
    bad = [f"case {t!r}:\n--- expected\n{e}\n--- got\n{g}"
           for (t, _, e), (_, _, g) in zip(cases, got) if e != g]
    assert not bad, "\n\n".join(bad)
