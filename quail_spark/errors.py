"""Errors of the dialect front end (:mod:`quail_spark.dialect`), raised before Spark sees the query.

Everything else (unknown tables and columns, types, unsupported SQL) is Spark's
own analysis error. Every message says what was expected and what came instead.

QuailPlanError      base class (a ValueError).
UnsupportedSQL      a spelling the translation does not know; ``construct`` names it.
TemplateError       ``{n}`` placeholders and arguments do not match.
HintError           a hint map with an unknown key or a bad value.
"""
from __future__ import annotations


class QuailPlanError(ValueError):
    """Base class: the query cannot be translated."""


class UnsupportedSQL(QuailPlanError):
    """A spelling outside what the translation to Spark SQL knows."""

    def __init__(self, construct: str, detail: str = ""):
        self.construct = construct
        hint = f" ({detail})" if detail else ""
        super().__init__(f"unsupported SQL: {construct}{hint}; expected Spark SQL, or the BigQuery / "
                         "Snowflake spellings of the AI functions")


class TemplateError(QuailPlanError):
    def __init__(self, template: str, problem: str):
        self.template = template
        super().__init__(f"template {template!r}: {problem}")


class HintError(QuailPlanError):
    def __init__(self, key: str, problem: str):
        self.key = key
        super().__init__(f"hint {key!r}: {problem}")
