"""The Arrow arguments of the decode SQL functions, read into a Call's decode fields (executor side).

``ai_generate(template, col0[, col1 ...][, hint])``: the template and columns as ai_if's, the hint's
``max_tokens`` and ``stop``; ``ai_summarize(col[, max_words])``; ``quail_extract(col, schema,
instruction[, hint])`` (what the Spark extension's ``ai_extract`` calls: ``schema`` is Spark's JSON of
the struct type, ``instruction`` NULL when not given). The literal arguments are read from the batch's
first row (the SQL text gives one value for all rows).

    >>> import pyarrow as pa
    >>> args, kw = decode_args("ai_summarize", "summarize", (pa.array(["a b"]), pa.array([12])))
    >>> args[0].to_pylist(), kw
    (['{0}'], {'max_words': 12})
"""
from __future__ import annotations

import pyarrow as pa


def decode_args(fn: str, kind: str, args) -> tuple[tuple, dict]:
    """(template and column arguments [+ the hint, for generate], keyword arguments of ``Call.of``)."""
    n = len(args[0]) if args else 0
    if kind == "generate":
        return tuple(args), {"hints": hint_pairs(args[-1]) if args and is_hint(args[-1]) else ()}
    if kind == "summarize":
        if not 1 <= len(args) <= 2:
            raise TypeError(f"{fn} expected (column[, max_words]), got {len(args)} argument(s)")
        words = first(args[1]) if len(args) == 2 else None
        if words is not None and not isinstance(words, int):
            raise TypeError(f"{fn}: argument 2 (max_words) must be a whole number, got {args[1].type}")
        return (_template(n), args[0]), {"max_words": words}
    if not 3 <= len(args) <= 4 or (len(args) == 4 and not is_hint(args[3])):
        raise TypeError(f"{fn} expected (column, schema, instruction[, hint]), got {len(args)} argument(s)")
    return (_template(n), args[0]), {"schema": first(args[1]) or "", "instruction": first(args[2]),
                                     "hints": hint_pairs(args[3]) if len(args) == 4 else ()}


def is_hint(col) -> bool:
    return pa.types.is_map(col.type) or pa.types.is_struct(col.type)


def hint_pairs(col) -> tuple:
    """((key, value), ...) of a map or struct hint column's first row, keys lower-cased."""
    row = first(col)
    pairs = row.items() if isinstance(row, dict) else (row or ())
    return tuple((str(k).lower(), v) for k, v in pairs)


def first(col):
    """The value of the first row of an Arrow column, or None (an empty batch, a NULL)."""
    return col[0].as_py() if len(col) else None


def _template(n: int):
    return pa.array(["{0}"] * n, pa.string())
