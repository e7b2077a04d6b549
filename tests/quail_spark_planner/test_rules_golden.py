"""Golden tests: every rule against its fixture file of (SQL, expected plan) pairs."""

import pytest

from quail_spark.rules import RULES

from .golden import FIXTURES, check_golden


@pytest.mark.parametrize("name", [r.__name__ for r in RULES])
def test_rule_golden(name):
    check_golden(name)


def test_every_fixture_names_a_rule():
    names = {r.__name__ for r in RULES}
    assert {p.stem for p in FIXTURES.glob("*.sql")} == names
