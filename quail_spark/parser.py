"""SQL text -> logical plan (:mod:`quail_spark.plan`), checked against a Catalog.

Three spellings of the AI functions are accepted and give the same plan:

- ours (Spark dialect): ``ai_if('Is {0} about {1}?', r.text, t.term [, map(...)])``
  (``ai_filter`` is an alias), ``ai_score('...{0}...', col)``,
  ``ai_classify(col, array('a', 'b'))`` or ``ai_classify('...{0}...', col, array(...))``;
- BigQuery: ``AI.IF(PROMPT('...{0}...', col))`` or ``AI.IF(('Is ', col, ' ok?'))``,
  ``AI.SCORE(...)``, ``AI.CLASSIFY(col, categories => ['a', 'b'])``; named
  arguments such as ``connection_id`` are ignored;
- Snowflake: ``AI_FILTER(PROMPT('...{0}...', col))``, ``AI_CLASSIFY(col, ['a', 'b'])``.

Hints ride as a last argument: ``map('selectivity', 0.2, 'anchor', 'r')`` or
``OBJECT_CONSTRUCT(...)``. The plan is the query as written: FROM as a left-deep
tree of Join nodes (an ON's relational conjuncts are its join's condition, its
AI conjuncts AIFilters right above the join), then every WHERE conjunct as its
own Filter or AIFilter in the order written (the first lowest), then Project,
then Sort/TopK/Limit. The rules in :mod:`quail_spark.rules` make it fast.
"""

from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from quail_spark import plan as P
from quail_spark.catalog import is_string_type
from quail_spark.errors import (AmbiguousColumn, DocumentTypeError, HintError, QuailPlanError,
                                TemplateError, UnknownColumn, UnknownTable, UnsupportedSQL)

AI_NAMES = {"ai_if": "ai_if", "ai_filter": "ai_if", "ai_score": "ai_score", "ai_classify": "ai_classify"}
IGNORED_KWARGS = {"connection_id", "endpoint", "model", "model_params", "output_schema"}
COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.GT: ">", exp.LTE: "<=", exp.GTE: ">="}
REFUSED_CLAUSES = (("with_", "WITH (common table expressions)"), ("with", "WITH (common table expressions)"),
                   ("group", "GROUP BY"), ("having", "HAVING"), ("qualify", "QUALIFY"),
                   ("distinct", "DISTINCT"), ("windows", "WINDOW"), ("offset", "OFFSET"),
                   ("laterals", "LATERAL VIEW"), ("pivots", "PIVOT"), ("cluster", "CLUSTER BY"),
                   ("distribute", "DISTRIBUTE BY"), ("sort", "SORT BY"))


def parse(sql: str, catalog) -> P.Plan:
    """Parse AI-SQL into an unoptimised logical plan, or raise a QuailPlanError.

    Examples
    --------
    >>> from quail_spark.catalog import DictCatalog
    >>> cat = DictCatalog({'notes': {'id': 'int', 'body': 'string'}})
    >>> print(P.render_tree(parse("SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body)", cat)))
    Project [notes.id]
      AIFilter ai_if('Is {0} a complaint?', notes.body)
        Scan notes AS notes [id, body]
    """
    tree = _read(sql)
    _refuse(tree)
    if tree.args.get("from_") is None:
        raise UnsupportedSQL("SELECT without FROM", "expected a table to read")
    scope = _Scope(tree, catalog)
    node = scope.from_plan(tree)
    where = tree.args.get("where")
    for term in _conjuncts(where.this if where else None):
        node = scope.predicate(node, term, "WHERE")
    items = tuple(scope.select_item(e) for e in tree.expressions)
    items = _dedupe(tuple(i for group in items for i in group))
    node = _order_and_limit(tree, scope, items, node)
    return P.transform(node, lambda n: scope.scan(n.alias) if isinstance(n, P.Scan) else n)


# ------------------------------------------------------------------ reading


def _read(sql: str) -> exp.Expression:
    text, dialects = _rewrite_bigquery(sql)
    error = None
    for dialect in dialects:
        try:
            trees = [t for t in sqlglot.parse(text, read=dialect) if t is not None]
        except sqlglot.errors.SqlglotError as e:
            error = e
            continue
        if len(trees) != 1:
            raise UnsupportedSQL("several statements", f"expected one, got {len(trees)}")
        return trees[0]
    raise UnsupportedSQL("SQL that does not parse", str(error).splitlines()[0])


def _rewrite_bigquery(sql: str):
    """Rewrite BigQuery's ``AI.IF(`` / ``AI.SCORE(`` / ``AI.CLASSIFY(`` as ``ai_if(`` ...; pick dialects."""
    try:
        toks = sqlglot.tokenize(sql, read="bigquery")
    except sqlglot.errors.SqlglotError:
        return sql, ("spark", "snowflake")
    spans = []
    for a, dot, name, paren in zip(toks, toks[1:], toks[2:], toks[3:]):
        if (a.text.upper() == "AI" and dot.token_type == TokenType.DOT
                and name.text.upper() in ("IF", "SCORE", "CLASSIFY")
                and paren.token_type == TokenType.L_PAREN):
            spans.append((a.start, name.end + 1, "ai_" + name.text.lower()))
    for start, end, new in reversed(spans):
        sql = sql[:start] + new + sql[end:]
    return sql, (("bigquery",) if spans else ("spark", "snowflake"))


def _refuse(tree) -> None:
    if not isinstance(tree, exp.Select):
        name = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}.get(type(tree))
        raise UnsupportedSQL(name or f"statement {tree.key.upper()}", "only SELECT is supported")
    for arg, name in REFUSED_CLAUSES:
        if tree.args.get(arg):
            raise UnsupportedSQL(name)
    for node in tree.walk():
        if node is not tree and isinstance(node, (exp.Select, exp.Subquery, exp.Exists)):
            raise UnsupportedSQL("subquery", node.sql()[:80])
        if isinstance(node, exp.Window):
            raise UnsupportedSQL("window function", node.sql()[:80])
        if isinstance(node, exp.AggFunc) and not isinstance(node, exp.AIClassify):
            raise UnsupportedSQL(f"aggregate function {node.sql()[:60]}")
        if isinstance(node, exp.Or):
            what = "OR involving an AI predicate" if _has_ai(node) else "OR"
            raise UnsupportedSQL(what, node.sql()[:80] + "; only AND of predicates is supported")
    for join in tree.args.get("joins") or []:
        side, kind = join.side.upper(), join.kind.upper()
        if side or kind in ("SEMI", "ANTI", "OUTER"):
            raise UnsupportedSQL(f"{side or kind} JOIN", "only inner joins are supported")
        if join.args.get("using"):
            raise UnsupportedSQL("JOIN ... USING", "write JOIN ... ON a.x = b.x")
        if join.method:
            raise UnsupportedSQL(f"{join.method.upper()} JOIN")


def _ai_name(node) -> str | None:
    if isinstance(node, exp.AIClassify):
        return "ai_classify"
    if isinstance(node, exp.Anonymous):
        return AI_NAMES.get(node.name.lower())
    return None


def _has_ai(node) -> bool:
    return any(_ai_name(n) for n in node.walk())


def _conjuncts(node) -> list:
    while isinstance(node, exp.Paren):
        node = node.this
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


# ------------------------------------------------------------------ scope


class _Scope:
    """Tables in FROM, their columns, and conversion of sqlglot nodes into plan terms."""

    def __init__(self, tree, catalog):
        self.catalog = catalog
        self.tables = {}  # alias -> (table name, {column: type}) in FROM order
        for t in [tree.args.get("from_").this] + [j.this for j in tree.args.get("joins") or []]:
            if not isinstance(t, exp.Table):
                raise UnsupportedSQL("FROM item that is not a table", t.sql()[:80])
            name = ".".join(p.name for p in t.parts)
            try:
                cols = dict(catalog.columns(name))
            except KeyError:
                raise UnknownTable(name, catalog.tables()) from None
            alias = t.alias_or_name
            if alias in self.tables:
                raise QuailPlanError(f"table alias {alias!r} is used twice in FROM; expected distinct aliases")
            self.tables[alias] = (name, cols)
        self.used = {a: set() for a in self.tables}

    def scan(self, alias) -> P.Scan:
        table, cols = self.tables[alias]
        return P.Scan(table, alias, tuple(c for c in cols if c in self.used[alias]))

    def from_plan(self, tree):
        """Join tree of FROM; ON's relational conjuncts join conditions, its AI ones AIFilters above."""
        aliases = list(self.tables)
        node = P.Scan(self.tables[aliases[0]][0], aliases[0], ())
        for alias, join in zip(aliases[1:], tree.args.get("joins") or []):
            node = P.Join(node, P.Scan(self.tables[alias][0], alias, ()), None)
            for term in _conjuncts(join.args.get("on")):
                node = self.predicate(node, term, "ON")
        return node

    def predicate(self, node, term, clause):
        """``node`` under one conjunct: Filter, AIFilter, or folded into the Join below."""
        name = _ai_name(term)
        if name == "ai_if":
            template, hints, _ = self.ai_call(term, name)
            return P.AIFilter(node, template, hints)
        if name or _has_ai(term):
            fn = name or next(_ai_name(n) for n in term.walk() if _ai_name(n))
            raise UnsupportedSQL(f"{fn} inside a {clause} expression",
                                 f"{term.sql()[:80]}; expected ai_if(...) as a conjunct of its own")
        pred = self.expr(term)
        if clause == "ON" and isinstance(node, P.Join):
            return P.Join(node.left, node.right, P.conjoin(P.conjuncts(node.condition) + (pred,)))
        return P.Filter(node, pred)

    def column(self, node) -> P.ColumnRef:
        name, qual = node.name, node.table
        every = [f"{a}.{c}" for a, (_, cols) in self.tables.items() for c in cols]
        if qual:
            hits = [(a, c) for a, (_, cols) in self.tables.items() if a.lower() == qual.lower()
                    for c in cols if c.lower() == name.lower()]
        else:
            hits = [(a, c) for a, (_, cols) in self.tables.items() for c in cols
                    if c.lower() == name.lower()]
        if not hits:
            raise UnknownColumn(f"{qual}.{name}" if qual else name, every)
        if len(hits) > 1:
            raise AmbiguousColumn(name, [f"{a}.{c}" for a, c in hits])
        self.used[hits[0][0]].add(hits[0][1])
        return P.ColumnRef(*hits[0])

    def column_type(self, ref: P.ColumnRef) -> str:
        return self.tables[ref.qualifier][1][ref.name]

    def expr(self, node):
        """Relational expression: comparisons, IN, LIKE, IS NULL, BETWEEN, AND."""
        if isinstance(node, exp.Paren):
            return self.expr(node.this)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Literal):
            return P.Literal(node.this if node.is_string else _number(node.this))
        if isinstance(node, exp.Boolean):
            return P.Literal(bool(node.this))
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
            return P.Literal(-_number(node.this.this))
        if type(node) in COMPARISONS:
            return P.Comparison(COMPARISONS[type(node)], self.operand(node.this), self.operand(node.expression))
        if isinstance(node, exp.Not):
            inner = self.expr(node.this)
            if isinstance(inner, (P.InList, P.Like, P.IsNull, P.Between)) and not inner.negated:
                return dataclasses.replace(inner, negated=True)
            raise UnsupportedSQL("NOT", f"{node.sql()[:80]}; NOT only before IN, LIKE, NULL or BETWEEN")
        if isinstance(node, exp.In):
            return P.InList(self.operand(node.this), tuple(self.literal(v) for v in node.expressions))
        if isinstance(node, exp.Like):
            return P.Like(self.operand(node.this), self.literal(node.expression),
                          bool(node.args.get("negate")))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return P.IsNull(self.operand(node.this))
        if isinstance(node, exp.Between):
            return P.Between(self.operand(node.this), self.operand(node.args["low"]),
                             self.operand(node.args["high"]))
        if isinstance(node, exp.And):
            return P.conjoin([self.expr(t) for t in _conjuncts(node)])
        raise UnsupportedSQL(f"expression {node.key.upper()}", node.sql()[:80])

    def operand(self, node):
        out = self.expr(node)
        if not isinstance(out, (P.ColumnRef, P.Literal)):
            raise UnsupportedSQL("nested predicate", f"{node.sql()[:80]}; expected a column or a literal")
        return out

    def literal(self, node):
        out = self.expr(node)
        if not isinstance(out, P.Literal):
            raise UnsupportedSQL("non-literal value", f"{node.sql()[:80]}; expected a literal")
        return out

    # ------------------------------------------------------------- AI calls

    def ai_call(self, node, name):
        """(Template, Hints, labels) of an AI function call in any accepted spelling."""
        raw = ([node.this, node.args.get("categories"), node.args.get("config")]
               if isinstance(node, exp.AIClassify) else list(node.expressions))
        pos, kw = [], {}
        for a in (a for a in raw if a is not None):
            if isinstance(a, exp.Kwarg):
                kw[a.this.name.lower()] = a.expression
            else:
                pos.append(a)
        for key in ("input", "prompt"):
            if key in kw:
                pos.insert(0, kw.pop(key))
        labels = kw.pop("categories", None)
        unknown = set(kw) - IGNORED_KWARGS
        if unknown:
            raise UnsupportedSQL(f"argument {sorted(unknown)[0]} => of {name}")
        hints = pos.pop() if pos and _is_map(pos[-1]) else None
        if name == "ai_classify":
            hints = None  # Snowflake's config object (task_description, ...) is not ours
            if labels is None and pos and isinstance(pos[-1], exp.Array):
                labels = pos.pop()
            if labels is None or not isinstance(labels, exp.Array):
                raise TemplateError(node.sql()[:80], "expected the labels as array('a', 'b', ...)")
            labels = tuple(str(self.literal(v).value) for v in labels.expressions)
        template = self.template(pos, name, node)
        return template, self.hints(hints, template), labels

    def template(self, pos, name, node) -> P.Template:
        if not pos:
            raise TemplateError(node.sql()[:80], f"{name} expected a template text and its arguments")
        first = pos[0]
        if isinstance(first, exp.Anonymous) and first.name.lower() == "prompt" and len(pos) == 1:
            pos = list(first.expressions)
            first = pos[0] if pos else exp.Null()
        if isinstance(first, exp.Tuple) and len(pos) == 1:
            text, args = "", []
            for piece in first.expressions:
                if isinstance(piece, exp.Literal) and piece.is_string:
                    text += piece.this
                else:
                    arg = self.operand(piece)
                    args += [arg] * (arg not in args)
                    text += "{%d}" % args.index(arg)
            return self.checked(P.Template(text, tuple(args)), name)
        if isinstance(first, exp.Literal) and first.is_string:
            return self.checked(P.Template(first.this, tuple(self.operand(a) for a in pos[1:])), name)
        if name == "ai_classify" and len(pos) == 1:
            return self.checked(P.Template("{0}", (self.operand(first),)), name)
        raise TemplateError(node.sql()[:80], f"{name} expected a template text first, got {first.sql()[:40]}")

    def checked(self, t: P.Template, name) -> P.Template:
        used = P.placeholders(t.text)
        given = ", ".join(P.render_expr(a) for a in t.args) or "none"
        for i in used:
            if i >= len(t.args):
                raise TemplateError(t.text, f"placeholder {{{i}}} expected an argument, "
                                            f"but {len(t.args)} were given ({given})")
        for i, arg in enumerate(t.args):
            if i not in used:
                raise TemplateError(t.text, f"argument {i} ({P.render_expr(arg)}) expected a "
                                            f"placeholder {{{i}}} in the text, found none")
        cols = P.doc_columns(t)
        if not cols:
            raise TemplateError(t.text, f"{name} expected at least one column argument, got none")
        for c in cols:
            if not is_string_type(self.column_type(c)):
                raise DocumentTypeError(f"{c.qualifier}.{c.name}", self.column_type(c), name)
        tables = P.expr_aliases(t)
        if len(tables) > 2:
            raise UnsupportedSQL(f"{name} over more than two tables", f"{t.text!r} reads {sorted(tables)}")
        if len(tables) == 2 and (name != "ai_if" or len(cols) != 2):
            raise UnsupportedSQL(f"{name} over two tables" + (" with several columns of one table"
                                 if name == "ai_if" else ""), f"{t.text!r}; expected one column of each table")
        return t

    def hints(self, node, template) -> P.Hints:
        if node is None:
            return P.Hints()
        if isinstance(node, exp.VarMap):
            pairs = zip(node.args["keys"].expressions, node.args["values"].expressions)
        elif isinstance(node, exp.Anonymous):  # OBJECT_CONSTRUCT('k', v, ...)
            pairs = zip(node.expressions[0::2], node.expressions[1::2])
        else:
            pairs = ((e.this, e.expression) for e in node.expressions)
        out = {}
        for k, v in pairs:
            key = k.name.lower()
            value = self.literal(v).value
            if key == "selectivity":
                if isinstance(value, str) or not 0.0 <= float(value) <= 1.0:
                    raise HintError(key, f"expected a number in [0, 1], got {value!r}")
                out[key] = float(value)
            elif key == "anchor":
                tables = sorted(P.expr_aliases(template))
                if value not in tables:
                    raise HintError(key, f"expected one of the template's tables {tables}, got {value!r}")
                out[key] = value
            else:
                raise HintError(key, "unknown hint; expected 'selectivity' or 'anchor'")
        return P.Hints(**out)

    def select_item(self, node) -> tuple:
        """Plan items of one SELECT item (``*`` and ``t.*`` give several)."""
        alias = node.alias if isinstance(node, exp.Alias) else None
        inner = node.this if isinstance(node, exp.Alias) else node
        if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)):
            quals = [inner.table] if isinstance(inner, exp.Column) and inner.table else list(self.tables)
            for q in quals:
                if q not in self.tables:
                    raise UnknownColumn(f"{q}.*", [f"{a}.*" for a in self.tables])
                self.used[q].update(self.tables[q][1])
            return tuple(P.ColumnRef(q, c) for q in quals for c in self.tables[q][1])
        name = _ai_name(inner)
        if name in ("ai_score", "ai_classify"):
            template, _, labels = self.ai_call(inner, name)
            if name == "ai_score":
                return (P.AIScore(template, alias or name),)
            return (P.AIClassify(template, labels, alias or name),)
        if name == "ai_if":
            raise UnsupportedSQL("ai_if in the SELECT list", "use ai_score(...) for a column")
        if isinstance(inner, exp.Column):
            ref = self.column(inner)
            return (P.Alias(ref, alias) if alias and alias != ref.name else ref,)
        raise UnsupportedSQL(f"SELECT item {inner.key.upper()}", f"{inner.sql()[:80]}; expected a "
                             "column, ai_score(...) or ai_classify(...)")


def _is_map(node) -> bool:
    """map(...), OBJECT_CONSTRUCT(...) or {'k': v}: a hint argument."""
    return isinstance(node, (exp.VarMap, exp.Struct, exp.Map)) or (
        isinstance(node, exp.Anonymous) and node.name.lower() == "object_construct")


def _number(text: str):
    return float(text) if any(ch in text for ch in ".eE") else int(text)


def _dedupe(items: tuple) -> tuple:
    """Give unnamed AI columns distinct names: ai_score, ai_score_2, ..."""
    seen, out = set(), []
    for item in items:
        name = P.item_name(item)
        if isinstance(item, P.AI_ITEMS) and name in seen:
            n = 2
            while f"{name}_{n}" in seen:
                n += 1
            item = dataclasses.replace(item, alias=f"{name}_{n}")
        seen.add(P.item_name(item))
        out.append(item)
    return tuple(out)


def _order_and_limit(tree, scope, items, node):
    """Project, then Sort / TopK / Limit over its output names, then drop hidden keys."""
    order = tree.args.get("order")
    keys, hidden = [], []
    for i, ordered in enumerate(order.expressions if order else []):
        e, desc = ordered.this, bool(ordered.args.get("desc"))
        names = {P.item_name(it).lower(): P.item_name(it) for it in items + tuple(hidden)}
        name = _ai_name(e)
        if isinstance(e, exp.Column) and not e.table and e.name.lower() in names:
            keys.append(P.SortKey(P.ColumnRef(None, names[e.name.lower()]), desc))
            continue
        if name in ("ai_score", "ai_classify"):
            item = scope.select_item(exp.Alias(this=e, alias=exp.to_identifier(f"_order_{i}")))[0]
        elif isinstance(e, exp.Column):
            item = P.Alias(scope.column(e), f"_order_{i}")
        else:
            raise UnsupportedSQL(f"ORDER BY {name or e.key.upper()}", f"{e.sql()[:80]}; expected a "
                                 "column, an output name, ai_score(...) or ai_classify(...)")
        same = [it for it in items + tuple(hidden) if _same_value(it, item)]
        if not same:
            hidden.append(item)
        keys.append(P.SortKey(P.ColumnRef(None, P.item_name(same[0] if same else item)), desc))
    node = P.Project(node, items + tuple(hidden))
    limit = tree.args.get("limit")
    k = None
    if limit is not None:
        value = scope.literal(limit.expression).value
        if not isinstance(value, int) or value < 0:
            raise UnsupportedSQL("LIMIT", f"expected a non-negative integer, got {value!r}")
        k = value
    if keys:
        node = P.TopK(node, tuple(keys), k) if k is not None else P.Sort(node, tuple(keys))
    elif k is not None:
        node = P.Limit(node, k)
    if hidden:
        node = P.Project(node, tuple(P.ColumnRef(None, P.item_name(it)) for it in items))
    return node


def _same_value(a, b) -> bool:
    """Whether two SELECT items compute the same value (names aside)."""
    strip = lambda it: it.expr if isinstance(it, P.Alias) else it  # noqa: E731
    a, b = strip(a), strip(b)
    if isinstance(a, P.AI_ITEMS) and type(a) is type(b):
        return a.template == b.template and getattr(a, "labels", None) == getattr(b, "labels", None)
    return isinstance(a, P.ColumnRef) and a == b
