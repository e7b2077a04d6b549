"""A generated query as data: fragments in each spelling, clauses as lists, so that it renders
to Spark SQL, to SQLite (the oracle) and to the BigQuery / Snowflake spellings QuailSession
translates, and so that a failing query shrinks by dropping list elements.

A fragment (:class:`S`) carries its text per spelling: ``spark`` (also QuailSession's text),
``lite`` (SQLite: a hint's anchor resolved to the argument position, LEFT SEMI / ANTI joins as
EXISTS, a NaN bound as its outcome), ``bq`` / ``sf`` (None where that spelling cannot say it)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace

SPELLINGS = ("spark", "lite", "bq", "sf")


@dataclass(frozen=True)
class S:
    spark: str
    lite: str
    bq: str | None
    sf: str | None

    def get(self, spelling: str) -> str | None:
        return getattr(self, spelling)


def s(text: str, portable: bool = True) -> S:
    """The same text in every spelling (or in Spark's and SQLite's only)."""
    return S(text, text, text if portable else None, text if portable else None)


def fmt(template: str, *parts: S) -> S:
    """``template.format(*parts)`` in each spelling (None where a part has none)."""
    def one(sp):
        texts = [p.get(sp) for p in parts]
        return None if any(t is None for t in texts) else template.format(*texts)
    return S(*(one(sp) for sp in SPELLINGS))


def join(sep: str, parts) -> S:
    parts = list(parts)
    return fmt(sep.join("{}" for _ in parts), *parts)


@dataclass
class Item:
    """``expr AS name``; ``mapper``: the same value as a with_ai_columns expression (AI items over the one
    table) or the column it reads (plain items), None where the item has no such form."""
    expr: S
    name: str
    mapper: str | None = None
    ai: bool = False


@dataclass
class Join:
    kind: str  # JOIN, LEFT JOIN, RIGHT JOIN, FULL JOIN, LEFT SEMI JOIN, LEFT ANTI JOIN
    table: str
    alias: str
    on: list = field(default_factory=list)


@dataclass
class Select:
    items: list
    table: str
    alias: str
    joins: list = field(default_factory=list)
    where: list = field(default_factory=list)
    group: list = field(default_factory=list)
    having: list = field(default_factory=list)
    distinct: bool = False


@dataclass
class Query:
    body: Select
    ctes: list = field(default_factory=list)  # (name, S of its SELECT)
    union: str | None = None  # UNION or UNION ALL
    other: Select | None = None  # the union's second branch
    order: list = field(default_factory=list)
    limit: int | None = None
    shape: frozenset = frozenset()  # the grammar's features in this query (known failures are keyed by them)
    bounds: tuple = ()  # numbers ai_score values are compared with (ties)

    def text(self, spelling: str) -> str | None:
        return render(self, spelling)

    @property
    def counts_only(self) -> bool:
        """A LIMIT without ORDER BY keeps any rows: only their number is compared."""
        return self.limit is not None and not self.order

    def mapper_form(self):
        """(table, [(name, expression or column)]) where the query is a projection over one table, else None."""
        b = self.body
        if (self.ctes or self.other or self.order or self.limit is not None or b.joins or b.where or b.group
                or b.having or b.distinct or b.table not in ("d", "t", "q", "c")
                or not any(i.ai for i in b.items) or any(i.mapper is None for i in b.items)):
            return None
        return b.table, [(i.name, i.mapper, i.ai) for i in b.items]


def render(q: Query, spelling: str) -> str | None:
    parts = []
    if q.ctes:
        ctes = [(n, body.get(spelling)) for n, body in q.ctes]
        if any(t is None for _, t in ctes):
            return None
        parts.append("WITH " + ", ".join(f"{n} AS ({t})" for n, t in ctes))
    body = _select(q.body, spelling)
    if body is None:
        return None
    parts.append(body)
    if q.other is not None:
        other = _select(q.other, spelling)
        if other is None:
            return None
        # BigQuery has no bare UNION: its grammar asks for UNION DISTINCT (Spark's UNION) or UNION ALL
        parts += ["UNION DISTINCT" if spelling == "bq" and q.union == "UNION" else q.union, other]
    if q.order:
        parts.append("ORDER BY " + ", ".join(q.order))
    if q.limit is not None:
        parts.append(f"LIMIT {q.limit}")
    return " ".join(parts)


def _select(b: Select, spelling: str) -> str | None:
    where = list(b.where)
    text = f"SELECT {'DISTINCT ' if b.distinct else ''}" + ", ".join("{} AS " + i.name for i in b.items)
    parts = list(i.expr for i in b.items)
    text += f" FROM {b.table} {b.alias}"
    for j in b.joins:
        if spelling in ("bq", "sf") and j.kind in ("LEFT SEMI JOIN", "LEFT ANTI JOIN"):
            return None  # not BigQuery's or Snowflake's syntax
        on = join(" AND ", j.on) if j.on else s("TRUE")
        if spelling == "lite" and j.kind in ("LEFT SEMI JOIN", "LEFT ANTI JOIN"):
            neg = "NOT " if "ANTI" in j.kind else ""
            where.append(fmt(f"{neg}EXISTS (SELECT 1 FROM {j.table} {j.alias} WHERE {{}})", on))
            continue
        text += f" {j.kind} {j.table} {j.alias} ON {{}}"
        parts.append(on)
    if where:
        text += " WHERE {}"
        parts.append(join(" AND ", where))
    if b.group:
        text += " GROUP BY {}"
        parts.append(join(", ", b.group))
    if b.having:
        text += " HAVING {}"
        parts.append(join(" AND ", b.having))
    return fmt(text, *parts).get(spelling)


def smaller(q: Query):
    """Queries one step smaller than ``q``: one list element dropped, or one optional clause."""
    for path, value in _lists(q):
        for i in range(len(value)):
            if path[-1] == "items" and len(value) == 1:
                continue
            c = copy.deepcopy(q)
            _at(c, path).pop(i)
            if path[-1] == "items" and c.other is not None and path[0] == "body":
                c.other.items.pop(i)  # the union's branches keep one width
            yield c
    if q.other is not None:
        yield replace(copy.deepcopy(q), other=None, union=None)
    if q.limit is not None:
        yield replace(copy.deepcopy(q), limit=None, order=[])
    if q.body.distinct:
        c = copy.deepcopy(q)
        c.body.distinct = False
        yield c


def _lists(q: Query):
    """(path, list) of every clause list of the query."""
    yield ("ctes",), q.ctes
    for name in ("body", "other"):
        b = getattr(q, name)
        if b is None:
            continue
        for f in fields(Select):
            v = getattr(b, f.name)
            if isinstance(v, list):
                yield (name, f.name), v
        for k, j in enumerate(b.joins):
            yield (name, "joins", k, "on"), j.on


def _at(q, path):
    obj = q
    for p in path:
        obj = obj[p] if isinstance(p, int) else getattr(obj, p)
    return obj
