"""The specs the rules write parse into the dataclasses every reader shares (quail_spark/specs.py): every spec
of every golden plan, each field typed, and a field no reader knows refused by name."""
from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import quail_spark.operators
import quail_spark.specs
from quail_spark.explain import calls_in_line
from quail_spark.operators import op_id
from quail_spark.specs import KINDS, Chain, Eval, Join, Match, parse

GOLDEN = Path(__file__).resolve().parents[1] / "quail_spark" / "golden"


def test_the_module_examples_hold():
    assert doctest.testmod(quail_spark.specs).failed == 0
    assert doctest.testmod(quail_spark.operators).failed == 0


def test_an_operator_is_its_spec_without_the_estimates():
    """Every golden spec keeps its id when each of its estimates changes, and changes it with its call."""
    for name, kind, raw in _golden_specs():
        moved = json.loads(json.dumps(raw).replace('"sample of', '"other sample of'))
        if "rows" in raw:
            moved["rows"] = raw["rows"] * 3 + 1
        assert op_id(kind, moved) == op_id(kind, raw), name
        if "template" in raw:
            assert op_id(kind, {**raw, "template": raw["template"] + "?"}) != op_id(kind, raw), name


def _golden_specs() -> list:
    found = []
    for f in sorted(GOLDEN.rglob("*.txt")):
        for line in f.read_text().splitlines():
            found += [(f.name, kind, spec) for kind, spec in calls_in_line(line)]
    return found


def test_every_spec_of_the_golden_plans_parses():
    found = _golden_specs()
    kinds = {kind for _, kind, _ in found}
    assert kinds == set(KINDS), kinds  # every internal call appears in some golden plan
    for name, kind, raw in found:
        spec = parse(kind, raw)
        assert isinstance(spec, {"chain": Chain, "eval": Eval}.get(kind, Match if "match" in kind else Join)), name
        if isinstance(spec, (Chain, Eval)) and spec.cost is not None:
            assert spec.cost.requested >= spec.cost.fresh >= 0 and spec.rows >= 0, name
        if isinstance(spec, Join):
            assert all(isinstance(s.rows, float) for s in spec.sides) and spec.sides, name
            assert spec.anchor in [s.column for s in spec.sides] or spec.why.startswith("template"), name


def test_a_field_no_reader_knows_is_refused_by_name():
    with pytest.raises(ValueError, match=r"a quail_chain spec's calls has no field 'weight'"):
        parse("chain", {"calls": [{"template": "t", "weight": 2}]})
    with pytest.raises(ValueError, match="is not a JSON object"):
        parse("eval", "[1, 2]")
