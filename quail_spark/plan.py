"""What remains of the retired logical plan: the "name: value" document text of several columns.

The old planner (its plan, rules and lowering to mapInArrow) is gone: Spark plans every query
and the Catalyst rules rewrite the AI parts (docs/architecture.md). This helper stays only while
``tests/quail_spark/test_spark_partition.py`` checks ``gpu_worker.partition.Doc`` against it;
remove it with that check.
"""
from __future__ import annotations


def document_text(names: tuple, values: tuple) -> str:
    """The document of a row: the value itself, or "name: value" lines for several columns.

    >>> document_text(('text',), ('great film',))
    'great film'
    >>> document_text(('title', 'body'), ('Hi', 'Long text'))
    'title: Hi\\nbody: Long text'
    """
    if len(names) == 1:
        return "" if values[0] is None else str(values[0])
    return "\n".join(f"{n}: {'' if v is None else v}" for n, v in zip(names, values))
