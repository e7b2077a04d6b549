"""One query checked: the oracle's rows against every path's; a failing query shrunk to a minimal one.

Outcomes: ``agreed``; ``refused`` (by every path and the oracle: counted with the reasons, Spark's
own or ours); ``tie`` (a path differs but the oracle used a margin within 1e-4 of its boundary, or
a DISTINCT / UNION / GROUP BY kept apart two scores of one prompt that differ within 1e-5, or a
rank() ordered by an ai_score numbered apart rows the oracle scored with one prompt and the rows
agree with the rank columns left out, as distinct rows where the query keeps distinct rows: the
engine's values are equal within float tolerance, not bit for bit, across batch compositions and
cache states, and these operators compare exact values);
``known`` (a failure of an entry of known.py); ``wrong`` (a new failure: a path's rows differ from
the oracle's, or one side refused what another ran)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .known import known
from .paths import close, first_line, row_key, same, whose
from .query import Query, smaller


@dataclass
class Outcome:
    kind: str
    failures: dict = field(default_factory=dict)  # path -> what went wrong
    reasons: tuple = ()  # refused by all: (source, text) per path

    def message(self, q: Query) -> str:
        lines = [f"{self.kind}: {q.text('spark')}", f"  shape: {sorted(q.shape)}"]
        lines += [f"  {path}: {what}" for path, what in sorted(self.failures.items())]
        return "\n".join(lines)


def check(oracle, paths, q: Query) -> Outcome:
    try:
        want = oracle.rows(q.text("lite"), q.bounds)
        from .paths import multiset

        want = multiset(want)
    except Exception as e:  # noqa: BLE001 - the oracle's refusal is compared with the paths'
        want = "sqlite: " + first_line(e)
    got = paths.run(q)
    near = oracle.near
    if isinstance(want, str) and all(isinstance(v, str) for v in got.values()):
        return Outcome("refused", reasons=tuple((p, whose(v), v) for p, v in got.items()) + (("oracle", "sqlite", want),))
    failures = {}
    for path, rows in got.items():
        if isinstance(want, str):
            if not isinstance(rows, str):  # a path that refused too agrees with the oracle
                failures[path] = f"the oracle refused ({want}) what this path ran: {_show(rows)}"
        elif isinstance(rows, str):
            failures[path] = f"refused ({whose(rows)}): {rows}; the oracle gave {_show(want)}"
        elif not same(rows, want, q.counts_only):
            failures[path] = f"gave {_show(rows)}; the oracle gave {_show(want)}"
    if not failures:
        return Outcome("agreed")
    if near and not isinstance(want, str) and all(not isinstance(got[p], str) for p in failures):
        return Outcome("tie", failures)
    if _exact_sets(q) and not isinstance(want, str) and all(
            not isinstance(got[p], str) and same(collapsed(got[p]), collapsed(want)) for p in failures):
        return Outcome("tie", failures)
    ranks = _score_ranks(q)
    if ranks and oracle.repeated_score and not isinstance(want, str) and all(
            not isinstance(got[p], str) and same(without(got[p], ranks, _exact_sets(q)),
                                                 without(want, ranks, _exact_sets(q))) for p in failures):
        return Outcome("tie", failures)
    name = known(q.shape, failures)
    return Outcome("known:" + name if name else "wrong", failures)


def _exact_sets(q: Query) -> bool:
    """Whether the query compares whole rows by exact value: DISTINCT, UNION (not UNION ALL), GROUP BY."""
    return q.body.distinct or q.union == "UNION" or bool(q.body.group)


def _score_ranks(q: Query) -> set:
    """Output positions of the query's rank() windows ordered by an ai_score (either union branch)."""
    def ranks(b):
        return {k for k, i in enumerate(b.items) if "rank() OVER" in i.expr.spark and "ai_score(" in i.expr.spark}
    return ranks(q.body) | (ranks(q.other) if q.other is not None else set())


def without(rows, positions: set, distinct: bool = False):
    """The multiset with the columns at ``positions`` left out (its distinct rows where the query keeps
    distinct rows: two rank values of one row made it two rows)."""
    from collections import Counter

    out = Counter(tuple(v for k, v in enumerate(r) if k not in positions) for r in rows.elements())
    return Counter(set(out)) if distinct else out


def collapsed(rows):
    """The distinct rows of a multiset, rows whose floats are equal within 1e-5 counted as one."""
    from collections import Counter

    out: list = []
    for row in sorted(rows.elements(), key=row_key):
        if not out or not (len(row) == len(out[-1]) and all(close(u, v) for u, v in zip(row, out[-1]))):
            out.append(row)
    return Counter(out)


def _show(rows) -> str:
    if isinstance(rows, str):
        return rows
    return str(sorted(rows.elements(), key=str))[:600]


def shrink(oracle, paths, q: Query, out: Outcome, budget_s: float = 240.0) -> tuple[Query, Outcome]:
    """The smallest query (one element dropped at a time) that still fails the same way (same kind,
    a failure on one of the same paths), within ``budget_s`` seconds."""
    end = time.monotonic() + budget_s
    progress = True
    while progress and time.monotonic() < end:
        progress = False
        for c in smaller(q):
            if time.monotonic() > end:
                break
            got = check(oracle, paths, c)
            if got.kind == out.kind and set(got.failures) & set(out.failures):
                q, out, progress = c, got, True
                break
    return q, out
