"""An AI column: one AI call over a row's input columns, parsed from its SQL text.

Shared by the enrichment spec (quail_spark.enrich.spec), ArrowMapper and
with_ai_columns (quail_spark.mapper) and evaluate: one parser, one rule for
expression arguments (computed into a column named by ``derived_name``) and
one case-insensitive name-clash check. Never imports pyspark.
"""
from __future__ import annotations

import hashlib

from gpu_worker.ai_columns import AIColumn


class SpecError(ValueError):
    """A spec that cannot run; the message names the key or column at fault."""


def name_clash(new_names, taken) -> tuple | None:
    """The first of ``new_names`` equal, ignoring case as Spark's column names do, to one of ``taken`` or to
    an earlier new name, with the name it equals; None when every name is new.

    >>> name_clash(["c", "ID"], ["id", "_ai_error"])
    ('ID', 'id')
    """
    seen = {n.lower(): n for n in taken}
    for n in new_names:
        if n.lower() in seen:
            return n, seen[n.lower()]
        seen[n.lower()] = n
    return None


def parse_column(name: str, expr) -> AIColumn:
    """An output column's expression: exactly one AI call whose documents are input columns or
    expressions over them (``concat(title, ' ', body)``). An expression argument reads from a column
    named after its text (``derived_name``), which Spark adds before the AI stage (``mapper.with_derived``)."""
    import sqlglot
    from sqlglot import exp

    from quail_spark.dialect import parse_call  # the one sqlglot reading of an AI call

    if not isinstance(expr, str):
        raise SpecError(f"column {name!r}: expected an AI call as text, got {expr!r}")
    try:
        call, node = parse_call(expr)
    except ValueError as e:
        raise SpecError(f"column {name!r}: {e}") from None
    inputs, derived = [], []
    for a in call.args:
        col = sqlglot.parse_one(a, read="spark")
        if isinstance(col, exp.Column):
            if col.table:
                raise SpecError(f"column {name!r}: argument {a!r} is not an input column: the input's columns "
                                "have no table qualifier")
            inputs.append(col.name)
            continue
        if not col.find(exp.Column) or col.find(exp.AggFunc, exp.Window, exp.Subquery):
            raise SpecError(f"column {name!r}: argument {a!r} is not an input column or an expression over "
                            "the row's input columns (no constants alone, aggregates, windows or subqueries)")
        inputs.append(derived_name(a))
        derived.append((inputs[-1], a))
    if any(not isinstance(x, str) for x in call.labels):
        raise SpecError(f"column {name!r}: labels must be text literals, got {list(call.labels)}")
    return AIColumn(name, node.sql("spark"), call, tuple(inputs), tuple(dict.fromkeys(derived)))


def derived_name(sql: str) -> str:
    """The column an expression argument is computed into: one per distinct text, so two AI columns
    over the same expression share its values."""
    return "__doc_" + hashlib.sha256(sql.encode()).hexdigest()[:12]
