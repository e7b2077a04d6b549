"""Errors the planner raises before any Spark job runs.

Every message says what was expected, what came instead, and names the table,
column, template or SQL construct at fault.

QuailPlanError              base class of all of them (a ValueError).
UnsupportedSQL              a construct outside the supported subset (GROUP BY,
                            OR over an AI predicate, outer joins, subqueries...);
                            ``construct`` names it.
UnknownTable                ``table`` not in the catalog.
UnknownColumn               ``column`` not in any table in scope.
AmbiguousColumn             ``column`` unqualified and in several tables.
DocumentTypeError           an AI function's document ``column`` is not a string.
TemplateError               ``{n}`` placeholders and arguments do not match.
HintError                   a hint map with an unknown key or a bad value.
"""

from __future__ import annotations


class QuailPlanError(ValueError):
    """Base class: the query cannot be planned."""


class UnsupportedSQL(QuailPlanError):
    """A SQL construct outside what the optimised path supports."""

    def __init__(self, construct: str, detail: str = ""):
        self.construct = construct
        hint = f" ({detail})" if detail else ""
        super().__init__(
            f"unsupported SQL: {construct}{hint}; expected SELECT ... FROM ... [JOIN ... ON] "
            f"[WHERE conjunction] [ORDER BY ...] [LIMIT k]"
        )


class UnknownTable(QuailPlanError):
    def __init__(self, table: str, existing):
        self.table = table
        super().__init__(
            f"unknown table {table!r}; expected one of: {', '.join(sorted(existing)) or '(none)'}"
        )


class UnknownColumn(QuailPlanError):
    def __init__(self, column: str, existing):
        self.column = column
        super().__init__(
            f"unknown column {column!r}; expected one of: {', '.join(existing) or '(none)'}"
        )


class AmbiguousColumn(QuailPlanError):
    def __init__(self, column: str, qualified):
        self.column = column
        super().__init__(
            f"ambiguous column {column!r}: it is in {', '.join(qualified)}; qualify it"
        )


class DocumentTypeError(QuailPlanError):
    def __init__(self, column: str, type_name: str, function: str):
        self.column = column
        super().__init__(
            f"{function} reads column {column!r} as a document: expected a string column, "
            f"got type {type_name!r}; cast it with CAST({column} AS STRING)"
        )


class TemplateError(QuailPlanError):
    def __init__(self, template: str, problem: str):
        self.template = template
        super().__init__(f"template {template!r}: {problem}")


class HintError(QuailPlanError):
    def __init__(self, key: str, problem: str):
        self.key = key
        super().__init__(f"hint {key!r}: {problem}")
