"""Extraction quality: an ``ai_extract`` column's fields against label columns.

Every row is asked (a NULL label says the text does not give the field: the right answer
is NULL). Per field:

- ``exact_match``: share of rows whose value equals the label after :func:`normalize`
  (case and whitespace folded, numbers compared as numbers, dates as ISO text), NULL
  equal to NULL;
- ``f1``: mean token F1 of value against label (SQuAD's: the word tokens of the
  normalized texts as multisets; both NULL: 1, one NULL: 0);
- ``cut``: rows whose field was cut at ``max_tokens`` (their value is NULL and scored so).

Per question: rows, ``cut_rows`` (any field cut), ``errored_rows`` (``_ai_error`` for
another reason: no value at all) and ``null_results`` (NULL documents: NULL struct).

    >>> normalize("  Maria   LOPEZ "), normalize("1,250"), normalize(1250), normalize("March 14, 2021")
    ('maria lopez', 1250.0, 1250.0, '2021-03-14')
"""
from __future__ import annotations

import datetime as dt
import re
from collections import Counter

EVAL_COLUMN = "__quail_eval_value"  # the extracted struct, under a name no input column has
NUMBER = re.compile(r"[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?")
ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def normalize(v):
    """A value as compared: None; a float for numbers (and text that is one number); ISO
    'YYYY-MM-DD' for dates (and text that is one date); folded text; a tuple for a list."""
    if v is None:
        return None
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return tuple(normalize(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, normalize(x)) for k, x in v.items()))
    s = " ".join(str(v).split()).casefold()
    m = NUMBER.fullmatch(s)
    if m:
        return float(s.replace(",", ""))
    return _date(s) or s


def _date(s: str) -> str | None:
    """ISO text of ``s`` when it is one date (ISO, or with a month name), else None."""
    m = ISO_DATE.fullmatch(s)
    if m:
        return s
    if not any(mon in s for mon in MONTHS) or not re.search(r"\d{4}", s):
        return None
    from dateutil import parser

    try:
        return parser.parse(s, default=dt.datetime(1900, 1, 1)).date().isoformat()
    except (ValueError, OverflowError):
        return None


def tokens(v) -> list:
    """Word tokens of a normalized value (a number as its shortest text, 1250.0 -> '1250')."""
    if v is None:
        return []
    if isinstance(v, tuple):
        return [t for x in v for t in tokens(x)]
    if isinstance(v, float):
        v = f"{v:g}" if v == int(v) and abs(v) < 1e15 else repr(v)
        v = v if "e" not in v else f"{float(v):.0f}"
    return re.findall(r"\w+", str(v))


def token_f1(value, label) -> float:
    """SQuAD's token F1 of two normalized values; both None: 1.0, one None: 0.0.

    >>> token_f1(normalize("Maria Lopez"), normalize("maria  lopez-garcia"))
    0.8
    """
    if value is None or label is None:
        return float(value is None and label is None)
    a, b = tokens(value), tokens(label)
    if not a and not b:
        return 1.0
    common = sum((Counter(a) & Counter(b)).values())
    if not common:
        return 0.0
    p, r = common / len(a), common / len(b)
    return 2 * p * r / (p + r)


def same(value, label) -> bool:
    """Exact match of two normalized values (numbers to 1e-9 relative)."""
    if isinstance(value, float) and isinstance(label, float):
        return abs(value - label) <= 1e-9 * max(1.0, abs(label))
    return value == label


def field_metrics(values, labels, cut) -> dict:
    """Figures of one field: ``values`` and ``labels`` raw, ``cut`` per row (bool)."""
    v, t = [normalize(x) for x in values], [normalize(x) for x in labels]
    n = len(v)
    return {"n": n,
            "exact_match": sum(same(a, b) for a, b in zip(v, t)) / n if n else None,
            "f1": sum(token_f1(a, b) for a, b in zip(v, t)) / n if n else None,
            "label_nulls": sum(b is None for b in t), "value_nulls": sum(a is None for a in v),
            "cut": int(sum(bool(c) for c in cut))}


def cut_fields(error: str | None, column: str) -> set:
    """The fields of ``column`` that ``_ai_error`` says were cut at max_tokens."""
    if not error:
        return set()
    return set(re.findall(rf"{re.escape(column)}: field '([^']+)' cut at max_tokens", error))


def label_columns(label, fields, available, question: str) -> dict:
    """field -> the label column (SQL) of each field: ``label`` a dict {field: column} (fields it does not
    name: the column named like the field), a struct column's name (its fields), or None (columns named
    like the fields). A field with no label column raises ValueError naming it."""
    from quail_spark.enrich.spec import SpecError

    if isinstance(label, str):
        return {f: f"`{label}`.`{f}`" for f in fields}
    if label is not None and not isinstance(label, dict):
        raise SpecError(f"question {question!r}: the label of an ai_extract question is {{field: column}}, "
                        f"a struct column or nothing (columns named like the fields); got {label!r}")
    label = label or {}
    unknown = sorted(set(label) - set(fields))
    if unknown:
        raise SpecError(f"question {question!r}: label names field(s) {unknown}, not in the extracted "
                        f"struct's fields {list(fields)}")
    out = {}
    for f in fields:
        col = label.get(f, f)
        if col not in available:
            raise SpecError(f"question {question!r}: no label column for field {f!r} ({col!r} is not in the "
                            f"input {list(available)}); name one with label={{{question!r}: {{{f!r}: ...}}}}")
        out[f] = f"`{col}`"
    return out


def score_extract(df, q, model: str, device: str, engine: dict) -> tuple:
    """(result figures, per-row pandas DataFrame) of an ``ai_extract`` question over every row of ``df``."""
    import dataclasses

    import pandas as pd
    from pyspark.sql import functions as F

    from quail_spark.mapper import with_ai_columns

    col = dataclasses.replace(q.column, name=EVAL_COLUMN)
    out = with_ai_columns(df, (col,), model, device, **engine)
    fields = out.schema[EVAL_COLUMN].dataType.fieldNames()
    labels = label_columns(q.label, fields, df.columns, q.name)
    rows = out.select(*[F.expr(c).alias(f"label_{f}") for f, c in labels.items()],
                      F.col(EVAL_COLUMN).alias("value"), "_ai_error").collect()
    values = [r["value"].asDict(recursive=True) if r["value"] is not None else None for r in rows]
    cuts = [cut_fields(r["_ai_error"], EVAL_COLUMN) for r in rows]
    errored = [bool(r["_ai_error"]) and not c for r, c in zip(rows, cuts)]
    per_field = {f: field_metrics([None if v is None else v[f] for v in values],
                                  [r[f"label_{f}"] for r in rows], [f in c for c in cuts]) for f in fields}
    n = len(rows)
    result = {"n": n, "fields": per_field,
              "exact_match": _mean([m["exact_match"] for m in per_field.values()]),
              "f1": _mean([m["f1"] for m in per_field.values()]),
              "cut_rows": sum(bool(c) for c in cuts), "errored_rows": sum(errored),
              "null_results": sum(v is None and not e for v, e in zip(values, errored))}
    table = pd.DataFrame({**{f"label_{f}": [r[f"label_{f}"] for r in rows] for f in fields},
                          **{f: [None if v is None else v[f] for v in values] for f in fields},
                          "_ai_error": [r["_ai_error"] and r["_ai_error"].replace(f"{EVAL_COLUMN}: ", f"{q.name}: ")
                                        for r in rows]}, dtype=object)  # NULL stays None
    return result, table


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None
