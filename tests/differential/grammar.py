"""A seeded random generator of AI-SQL queries (see query.py for their form): AI predicates under
NOT / OR / CASE, NULL and blank documents, templates read from columns, hints whose anchor names
a table alias or a column, several AI joins, inner / outer / semi / anti joins mixing AI and
equality conjuncts, ai_score comparisons (BETWEEN, a column bound, a NaN bound), correlated
EXISTS / NOT EXISTS / IN (one and two columns), GROUP BY / HAVING with aggregates over AI values,
windows over AI values, UNION / UNION ALL, CTEs, LIMIT with and without ORDER BY, ai_classify, and
the decode calls (ai_generate / ai_summarize text, an ai_extract struct's field) in SELECT lists,
WHERE clauses and projections.

Each feature is tagged ``feature@context`` in ``Query.shape`` (context: where, select, on:inner,
on:outer, on:semi, sub), the keys of the known-failures list."""
from __future__ import annotations

import random

from . import calls as C
from .query import Item, Join, Query, S, Select, fmt, join, s
from .tables import DOCS, INTS

WIDE = {"w": ("body", "grp", "gb")}  # the CTE w: d's columns and gb, an expression's alias
JOIN_KINDS = (("JOIN", 5), ("LEFT JOIN", 3), ("RIGHT JOIN", 2), ("FULL JOIN", 2), ("LEFT SEMI JOIN", 2),
              ("LEFT ANTI JOIN", 2))
CONTEXT = {"JOIN": "on:inner", "LEFT JOIN": "on:outer", "RIGHT JOIN": "on:outer", "FULL JOIN": "on:outer",
           "LEFT SEMI JOIN": "on:semi", "LEFT ANTI JOIN": "on:semi"}


def spark_only(f: S) -> S:
    """Text the BigQuery / Snowflake spellings are not asked to say (count_if, row values)."""
    return S(f.spark, f.lite, None, None)


def docs(table: str):
    return WIDE.get(table) or DOCS[table]


def ints(table: str):
    return INTS["d" if table == "w" else table]


class Gen:
    """``Gen(seed).query()``: one query; the same seed gives the same queries."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def query(self) -> Query:
        self.tags, self.bounds, self.n, self.hidden = set(), [], 0, set()
        r = self.r
        if r.random() < 0.15:
            return self._projection()
        ctes, base = [], r.choices(["d", "t", "c", "q"], [6, 2, 1, 1])[0]
        if base == "d" and r.random() < 0.2:
            ctes.append(("w", self._cte()))
            self.tags.add("cte")
            base = "w"
        scope = {base[0] if base != "w" else "d": base}
        body = Select([], base, next(iter(scope)))
        for _ in range(r.choices([0, 1, 2, 3], [3, 5, 3, 2])[0]):
            self._join(body, scope)
        visible = {a: t for a, t in scope.items() if a not in self.hidden}
        body.where = [self.pred(visible) for _ in range(r.choices([0, 1, 2], [3, 4, 2])[0])]
        if r.random() < 0.25:
            self._group(body, visible)
        else:
            body.items = [self.item(visible) for _ in range(r.randint(1, 4))]
        body.distinct = r.random() < 0.1
        q = Query(body, ctes)
        if r.random() < 0.15:
            other = Select(list(body.items), body.table, body.alias, list(body.joins),
                           [self.pred(visible)], list(body.group), list(body.having), body.distinct)
            q.union, q.other = r.choice(["UNION", "UNION ALL"]), other
            self.tags.add("union")
        if r.random() < 0.3:
            q.limit = r.randint(1, 4)
            if r.random() < 0.7:
                q.order = [f"{i + 1} {r.choice(['ASC NULLS FIRST', 'DESC NULLS LAST'])}" for i in range(len(body.items))]
            self.tags.add("limit" if q.order else "limit_unordered")
        q.shape, q.bounds = frozenset(self.tags), tuple(self.bounds)
        return q

    # ---- sources

    def _cte(self) -> S:
        where = self.pred({"d": "d"}, ctx="where")
        return fmt("SELECT d.id, d.body, d.k, d.grp, concat(d.grp, ': ', d.body) AS gb FROM d d WHERE {}", where)

    def _join(self, body: Select, scope: dict) -> None:
        r = self.r
        kinds = [k for k, _ in JOIN_KINDS]
        kind = r.choices(kinds, [w for _, w in JOIN_KINDS])[0]
        if any("SEMI" in j.kind or "ANTI" in j.kind for j in body.joins):
            kind = "LEFT SEMI JOIN" if r.random() < 0.5 else "LEFT ANTI JOIN"  # semi / anti joins come last
        table = r.choice(["t", "c", "q", "d"])
        alias = table if table not in scope else table + str(len(scope))
        ctx = CONTEXT[kind]
        self.tags.add(ctx)
        if sum(1 for j in body.joins if j.kind == "JOIN") >= 2 and kind == "JOIN":
            self.tags.add("three_inner")
        scope_in = {a: t for a, t in scope.items() if a not in self.hidden}  # a semi join's right side is gone
        left = self.r.choice(list(scope_in))
        on = [self.join_pred(scope_in, alias, table, left, ctx)]
        if r.random() < 0.5 and "k" in ints(table) and "k" in ints(scope[left]):
            on.append(s(f"{left}.k = {alias}.k"))
        if r.random() < 0.3:
            on.append(self.pred({alias: table}, ctx=ctx, ai=False))
        if r.random() < 0.2:
            on.append(self.join_pred(scope_in, alias, table, r.choice(list(scope_in)), ctx))
        r.shuffle(on)
        body.joins.append(Join(kind, table, alias, on))
        scope[alias] = table
        if ctx == "on:semi":
            self.hidden.add(alias)

    # ---- AI calls

    def arg(self, scope: dict, alias: str | None = None, ctx: str = "where") -> C.Arg:
        alias = alias or self.r.choice(list(scope))
        return C.Arg.column(alias, self.r.choice(docs(scope[alias])))

    def ai1(self, kind: str, scope: dict, ctx: str, alias=None) -> S:
        """A one-column call: literal template, or one read from q.tmpl, or built by concat."""
        r = self.r
        arg = self.arg(scope, alias, ctx)
        if kind == "classify":
            labels = r.choice(C.LABELS)
            if r.random() < 0.3:
                return C.call(kind, C.lit("Which topic fits {0}?"), [arg], labels, literal="Which topic fits {0}?")
            return C.call(kind, None, [arg], labels)
        qs = [a for a, t in scope.items() if t == "q"]
        others = [a for a, t in scope.items() if t == "t" and a not in arg.aliases]
        if qs and r.random() < 0.5:
            self.tags.add(f"tmpl_col@{ctx}")
            return C.call(kind, C.col(r.choice(qs), "tmpl"), [arg])
        if others and r.random() < 0.3:
            self.tags.add(f"tmpl_expr@{ctx}")
            o = r.choice(others)
            return C.call(kind, S(*(f"concat('Does {{0}} mention ', {o}.term, '?')",) * 2, None, None), [arg])
        text = r.choice(C.IF_T)
        fn = "ai_filter" if kind == "if" and r.random() < 0.2 else None
        hint = {"selectivity": r.choice([0.2, 0.5, 0.9])} if r.random() < 0.2 else None
        return C.call(kind, C.lit(text), [arg], hint=hint, literal=text, fn=fn)

    def ai2(self, kind: str, scope: dict, a: str, b: str, ctx: str) -> S:
        """A two-column call over aliases a and b (a template literal or read from q.tmpl2; a hint)."""
        r = self.r
        x, y = self.arg(scope, a, ctx), self.arg(scope, b, ctx)
        if scope[b] == "t" and r.random() < 0.15:
            labels = r.choice(C.LABELS)
            y = C.Arg(C.call("classify", None, [y], labels), y.aliases, y.names)
            self.tags.add(f"nested@{ctx}")
        args = [x, y] if r.random() < 0.7 else [y, x]
        qs = [q for q in (a, b) if scope[q] == "q"]
        template, literal = None, None
        if qs and r.random() < 0.5:
            template = C.col(qs[0], "tmpl2")
            self.tags.add(f"tmpl_col@{ctx}")
        else:
            literal = r.choice(C.PAIR_T)
            template = C.lit(literal)
        hint = self._hint(args, ctx, tmpl=literal is None)
        return C.call(kind, template, args, hint=hint)

    def _hint(self, args, ctx: str, tmpl: bool):
        r = self.r
        roll = r.random()
        if roll < 0.45:
            return None
        if roll < 0.55:
            return {"selectivity": 0.5}
        names = [(n, "anchor_alias") for n in args[0].aliases ^ args[1].aliases]
        names += [(n, "anchor_col" if n != "gb" else "anchor_expr_alias") for n in args[0].names ^ args[1].names]
        if not names:
            return None
        name, tag = r.choice(sorted(names))
        self.tags.add(f"{tag}@{ctx}")
        if tmpl:
            self.tags.add(f"tmpl_col_anchor@{ctx}")
        hint = {"anchor": name}
        if r.random() < 0.3:
            hint["selectivity"] = 0.3
        return hint

    # ---- predicates

    def join_pred(self, scope: dict, alias: str, table: str, left: str, ctx: str) -> S:
        """An ON conjunct relating the new alias to ``left``: an AI call over both, a score comparison,
        a template read from q, or one call whose document is an expression over both tables."""
        r = self.r
        scope = dict(scope, **{alias: table})
        roll = r.random()
        if roll < 0.15:
            self.tags.add(f"doc_over_both@{ctx}")
            doc = C.Arg(fmt("concat({}, ' / ', {})", self.arg(scope, left).frag, self.arg(scope, alias).frag),
                        {left, alias}, set())
            text = r.choice(C.IF_T)
            return C.call("if", C.lit(text), [doc])
        if roll < 0.4:
            return self.score_cmp(self.ai2("score", scope, left, alias, ctx), ctx, scope, alias)
        if roll < 0.5:
            return self.ai1("if", {left: scope[left], alias: table}, ctx, alias=left)
        self.tags.add(f"ai_join@{ctx}")
        return self.ai2("if", scope, left, alias, ctx)

    def score_cmp(self, score: S, ctx: str, scope: dict, alias: str | None = None) -> S:
        r = self.r
        roll = r.random()
        if roll < 0.25:
            lo, hi = sorted(r.sample([0.2, 0.4, 0.5, 0.6, 0.8], 2))
            self.bounds += [lo, hi]
            self.tags.add(f"between@{ctx}")
            return fmt(f"{{}} BETWEEN {lo} AND {hi}", score)
        op = r.choice([">", ">=", "<", "<="])
        if roll < 0.35 and alias and scope[alias] in ("t", "c", "q"):
            key = ints(scope[alias])[0]
            self.tags.add(f"column_bound@{ctx}")
            return fmt(f"{{}} {op} {alias}.{key} * 0.05", score)
        if roll < 0.42:
            self.tags.add(f"nan_bound@{ctx}")
            outcome = "0" if op in (">", ">=") else "1"  # Spark orders NaN above every number
            return S(f"{score.spark} {op} CAST('NaN' AS DOUBLE)",
                     f"(CASE WHEN {score.lite} IS NULL THEN NULL ELSE {outcome} END)", None, None)
        bound = r.choice([0.3, 0.5, 0.55, 0.7])
        self.bounds.append(bound)
        self.tags.add(f"score_cmp@{ctx}")
        return fmt(f"{{}} {op} {bound}", score)

    def pred(self, scope: dict, ctx: str = "where", ai: bool = True, depth: int = 0) -> S:
        r = self.r
        if ai and ctx == "where" and r.random() < 0.06:
            return self.decode_pred(scope, ctx)
        roll = r.random() if ai else 1.0
        if roll < 0.25:
            return self.ai1("if", scope, ctx)
        if roll < 0.35:
            return self.score_cmp(self.ai1("score", scope, ctx), ctx, scope)
        if roll < 0.42:
            self.tags.add(f"classify@{ctx}")
            return fmt("{} = 'pets'", self.ai1("classify", scope, ctx))
        if roll < 0.55 and depth < 2:
            return self._logic(scope, ctx, depth)
        if roll < 0.7 and ctx == "where" and any(t in ("d", "w", "t", "c") for t in scope.values()):
            return self.subquery(scope)
        if roll < 0.75 and len(scope) >= 2:
            a, b = r.sample(list(scope), 2)
            return self.ai2("if", scope, a, b, ctx)
        alias = r.choice(list(scope))
        table = scope[alias]
        return r.choice([
            s(f"{alias}.{ints(table)[0]} > {r.randint(0, 12)}"),
            s(f"{alias}.{docs(table)[0]} IS NULL"),
            s(f"{alias}.{ints(table)[-1]} IS NOT NULL"),
            s(f"{alias}.{ints(table)[-1]} <= 2"),
        ])

    def _logic(self, scope: dict, ctx: str, depth: int) -> S:
        """Three-valued logic over AI predicates: NOT, OR, CASE, IS NULL, coalesce."""
        r = self.r
        p = self.pred(scope, ctx, depth=depth + 1)
        form = r.choice(["not", "or", "case", "is_null", "coalesce"])
        self.tags.add(f"logic_{form}@{ctx}")
        if form == "not":
            return fmt("NOT ({})", p)
        if form == "or":
            return fmt("({} OR {})", p, self.pred(scope, ctx, depth=depth + 1))
        if form == "case":
            return fmt("(CASE WHEN {} THEN {} WHEN NOT ({}) THEN FALSE END)", p,
                       self.pred(scope, ctx, depth=depth + 1), p)
        if form == "is_null":
            return fmt("({}) IS NULL", p)
        return fmt("coalesce({}, FALSE)", p)

    def subquery(self, scope: dict) -> S:
        """A correlated EXISTS / NOT EXISTS / IN / NOT IN / two-column IN through an AI call."""
        r = self.r
        outer = r.choice([a for a, t in scope.items() if t in ("d", "w", "t", "c")])
        table = r.choice(["t", "q", "c"] if scope[outer] != "t" else ["d", "q", "c"])
        inner = "s" + str(self.n)
        self.n += 1
        sub = {outer: scope[outer], inner: table}
        on = [self.join_pred(sub, inner, table, outer, "sub")]
        both = [k for k in ("k",) if k in ints(table) and k in ints(scope[outer])]
        if both and r.random() < 0.5:
            on.append(s(f"{inner}.k = {outer}.k"))
        cond = join(" AND ", on)
        form = r.choice(["exists", "not_exists", "in", "not_in", "in2"] if both else ["exists", "not_exists"])
        if form == "in2" and not (scope[outer] in ("d", "w") and table == "t"):
            form = "in"
        self.tags.add(f"{form}@sub")
        frm = f"FROM {table} {inner} WHERE {{}}"
        if form in ("exists", "not_exists"):
            return fmt(("NOT " if form == "not_exists" else "") + f"EXISTS (SELECT 1 {frm})", cond)
        if form == "in2":
            return spark_only(fmt(f"({outer}.k, {outer}.id) IN (SELECT {inner}.k, {inner}.tid - 9 {frm})", cond))
        neg = "NOT " if form == "not_in" else ""
        return fmt(f"{outer}.k {neg}IN (SELECT {inner}.k {frm})", cond)

    # ---- select lists

    def _name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def decode(self, scope: dict, ctx: str) -> S:
        """A decode call's value: ai_generate / ai_summarize text, or one field of an ai_extract struct."""
        r = self.r
        arg = self.arg(scope)
        form = r.choice(["generate", "summarize", "extract"])
        self.tags.add(f"{form}@{ctx}")
        if form == "generate":
            return C.generate(arg, r.choice(C.GEN_T), r.choice([2, 4, 6]))
        if form == "summarize":
            return C.summarize(arg, r.choice([1, 2]))
        ddl = r.choice(sorted(C.SCHEMAS))
        return C.extract_field(arg, ddl, r.choice(sorted(C.SCHEMAS[ddl])), r.choice([3, 6]))

    def decode_pred(self, scope: dict, ctx: str) -> S:
        value = self.decode(scope, ctx)
        return fmt("{} IS NOT NULL", value) if "ai_extract" in value.spark else fmt("length({}) > 8", value)

    def item(self, scope: dict) -> Item:
        r = self.r
        if r.random() < 0.1:
            return Item(self.decode(scope, "select"), self._name("g"))
        roll = r.random()
        alias = r.choice(list(scope))
        table = scope[alias]
        if roll < 0.3:
            name = r.choice(ints(table) + docs(table))
            return Item(s(f"{alias}.{name}"), self._name(name + "_"), mapper=name)
        if roll < 0.45:
            return Item(self.ai1("if", scope, "select"), self._name("a"), ai=True)
        if roll < 0.6:
            return Item(self.ai1("score", scope, "select"), self._name("s"), ai=True)
        if roll < 0.72:
            self.tags.add("classify@select")
            return Item(self.ai1("classify", scope, "select"), self._name("c"), ai=True)
        if roll < 0.8:
            self.tags.add("case@select")
            p = self.pred(scope, "select", depth=1)
            return Item(fmt("CASE WHEN {} THEN 'y' WHEN NOT ({}) THEN 'n' ELSE 'u' END", p, p), self._name("k"))
        if roll < 0.88 and any(t in ("d", "w", "t", "c") for t in scope.values()):
            return Item(self.subquery(scope), self._name("e"))
        return self._window(scope, alias, table)

    def _window(self, scope: dict, alias: str, table: str) -> Item:
        key = f"{alias}.{ints(table)[-1]}"
        if self.r.random() < 0.5:
            self.tags.add("window_rank@select")
            score = self.ai1("score", {alias: table}, "select")
            return Item(fmt(f"rank() OVER (PARTITION BY {key} ORDER BY {{}} DESC NULLS LAST, {alias}.{ints(table)[0]})",
                            score), self._name("w"))
        self.tags.add("window_sum@select")
        p = self.ai1("if", {alias: table}, "select")
        return Item(fmt(f"sum(CASE WHEN {{}} THEN 1 ELSE 0 END) OVER (PARTITION BY {key})", p), self._name("w"))

    def _group(self, body: Select, scope: dict) -> None:
        r = self.r
        alias = r.choice(list(scope))
        table = scope[alias]
        if r.random() < 0.6:
            key = s(f"{alias}.{r.choice(ints(table) + docs(table))}")
        else:
            key = self.ai1(r.choice(["if", "classify"]), {alias: table}, "group")
            self.tags.add("group_by_ai")
        body.group = [key]
        self.tags.add("group")
        aggs = [lambda: s("count(*)"),
                lambda: spark_only(fmt("count_if({})", self.pred(scope, "group", depth=1))),
                lambda: fmt("sum(CASE WHEN {} THEN 1 ELSE 0 END)", self.ai1("if", scope, "group")),
                lambda: fmt("avg({})", self.ai1("score", scope, "group"))]
        body.items = [Item(key, self._name("g"))] + [Item(r.choice(aggs)(), self._name("n"))
                                                     for _ in range(r.randint(1, 3))]
        if r.random() < 0.4:
            body.having = [r.choice([s("count(*) > 1"),
                                     spark_only(fmt("count_if({}) >= 1", self.ai1("if", scope, "group"))),
                                     fmt("avg({}) > 0.5", self.ai1("score", scope, "group"))])]

    def _projection(self) -> Query:
        """AI columns over one table: a shape ArrowMapper / with_ai_columns also runs."""
        r = self.r
        table = r.choice(["d", "t", "c", "q"])
        alias = table
        items = []
        for _ in range(r.randint(1, 4)):
            roll = r.random()
            if roll < 0.3:
                name = r.choice(ints(table) + docs(table))
                items.append(Item(s(f"{alias}.{name}"), self._name(name + "_"), mapper=name))
                continue
            if roll < 0.4:
                self.tags.add("decode@projection")
                name = r.choice(docs(table))
                form = r.choice(["ai_summarize({}, 2)", "ai_generate('Reply to {{0}}.', {}, map('max_tokens', 4))"])
                items.append(Item(C.ours(s(form.format(f"{alias}.{name}"))), self._name("g"),
                                  mapper=form.format(name), ai=True))
                continue
            kind = "classify" if roll < 0.5 else r.choice(["if", "score"])
            arg = C.Arg.column(alias, r.choice(docs(table)))
            if kind == "classify":
                labels = r.choice(C.LABELS)
                frag, mapper = C.call(kind, None, [arg], labels), C.mapper_text(kind, None, [arg], labels)
            elif len(docs(table)) > 1 and r.random() < 0.3:
                other = C.Arg.column(alias, [c for c in docs(table) if c not in arg.names][0])
                text = r.choice(C.PAIR_T)
                frag, mapper = C.call(kind, C.lit(text), [arg, other]), C.mapper_text(kind, text, [arg, other])
            else:
                text = r.choice(C.IF_T)
                frag = C.call(kind, C.lit(text), [arg], literal=text)
                mapper = C.mapper_text(kind, text, [arg])
            items.append(Item(frag, self._name(kind[0]), mapper=mapper, ai=True))
        self.tags.add("projection")
        return Query(Select(items, table, alias), shape=frozenset(self.tags))
