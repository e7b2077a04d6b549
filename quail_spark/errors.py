"""Errors of the dialect front end (:mod:`quail_spark.dialect`), raised before Spark sees the query.

Everything else (unknown tables and columns, types, unsupported SQL) is Spark's
own analysis error. Every message says what was expected and what came instead.

QuailPlanError      base class (a ValueError).
UnsupportedSQL      a spelling the translation does not know; ``construct`` names it.
TemplateError       ``{n}`` placeholders and arguments do not match.
HintError           a hint map with an unknown key or a bad value.

:func:`error_line` gives any error as the one line a command prints.
"""
from __future__ import annotations

import re

_PY_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)(: |$)")


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


def error_line(e: BaseException) -> str:
    """The line that says what went wrong: a Python error raised inside a Spark task (Spark's message wraps
    its traceback: the traceback's last error line), else the deepest ``Caused by:`` of a JVM stack trace,
    else the first non-empty line that is not py4j's "An error occurred while calling ...".

    >>> error_line(RuntimeError("An error occurred while calling o9.collect.\\n: org.x.SparkException: "
    ...     "Job aborted\\n\\tat org.x.A(A.java:1)\\nCaused by: java.io.IOException: bad page"))
    'java.io.IOException: bad page'
    """
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    lines = [x for x in lines if not x.startswith(("at ", "... ", "File \"")) and x != "^"]
    if not lines:
        return type(e).__name__
    if any(x.startswith("Traceback (most recent call last)") for x in lines):
        py = [x for x in lines if _PY_ERROR.match(x)]
        if py:
            return py[-1]
    causes = [x.removeprefix("Caused by: ") for x in lines if x.startswith("Caused by: ")]
    if causes:
        return causes[-1]
    lines = [x for x in lines if not x.startswith("An error occurred while calling ")]
    return (lines[0].removeprefix(": ") if lines else type(e).__name__)
