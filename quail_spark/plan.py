"""Logical plan of an AI-SQL query: frozen dataclasses, rendering, prompt helpers.

Every node and expression is a frozen dataclass; rules build new plans with
``dataclasses.replace`` and never mutate. After :func:`quail_spark.parser.parse`
every :class:`ColumnRef` carries its table alias as ``qualifier``.

Expressions (relational, evaluated by Spark)
--------------------------------------------
ColumnRef(qualifier, name)          a column; ``qualifier`` is the table alias, or
                                    None for a name produced by a Project (ORDER BY
                                    keys refer to Project outputs that way).
Literal(value)                      str, int, float or bool.
Comparison(op, left, right)         ``op`` one of ``= <> < > <= >=``.
InList(expr, values, negated)       ``values``: tuple of Literal.
Like(expr, pattern, negated)        ``pattern``: Literal holding a str.
IsNull(expr, negated)               IS NULL, or IS NOT NULL when ``negated``.
Between(expr, low, high, negated)   inclusive bounds.
And(terms)                          conjunction of two or more expressions.

AI pieces
---------
Template(text, args)                prompt text with ``{0}``, ``{1}``... placeholders;
                                    placeholder ``{i}`` stands for ``args[i]``
                                    (ColumnRef or Literal). Every placeholder has an
                                    argument and every argument a placeholder.
Hints(selectivity, anchor)          per-call hints from ``map('selectivity', 0.2,
                                    'anchor', 'r')``; None when not given.
AIScore(template, alias)            SELECT item: P(TRUE) of the template, a double.
AIClassify(template, labels, alias) SELECT item: one of ``labels``; ``template.text``
                                    is ``'{0}'`` when no instruction was given
                                    (see :func:`classify_instruction`).
Alias(expr, name)                   SELECT item ``expr AS name``.

Plan nodes (``est`` is an :class:`Estimate`, None until the estimate rule runs)
---------------------------------------------------------------------------
Scan(table, alias, columns)         a catalog table read under ``alias``;
                                    ``columns`` the names the query uses.
Filter(child, predicate)            relational predicate.
Join(left, right, condition)        inner join; ``condition`` None for a cross
                                    product (comma join without predicate).
AIFilter(child, template, hints, rank, sort_keys, retain)
                                    keeps rows whose template answers TRUE.
                                    A stack of AIFilters is a chain, evaluated
                                    bottom first (see :func:`ai_chain`), AND with
                                    short-circuit. ``rank``: cost/(1-selectivity)
                                    per row, set by order_ai_filters.
                                    ``sort_keys``: when non-empty, sort rows within
                                    partitions by these columns before this node
                                    (set on the first operator of an AI pipeline: a
                                    chain plus the AI Project right above it).
                                    ``retain``: ``'document'`` when this row's
                                    document KV must stay cached after this
                                    predicate because a later operator of the same
                                    pipeline reads the same document, else ``'none'``.
AIJoin(left, right, template, hints, anchor, condition, sort_keys, retain)
                                    inner join on an AI predicate over one column
                                    of each side. ``anchor``: the alias whose column
                                    is the reused document (DOCUMENT 1); after
                                    choose_join_order the anchor side is ``left``.
                                    ``condition``: relational predicate over pairs,
                                    applied before the AI one (None if absent).
                                    ``sort_keys``: (anchor column, partner column).
                                    ``retain``: ``'anchor'`` when the anchor's KV
                                    (anchor plus question) stays cached across its
                                    partners.
Project(child, items, sort_keys)    SELECT list: ColumnRef, Alias, AIScore, AIClassify.
                                    ``sort_keys`` as for AIFilter.
Sort(child, keys)                   ORDER BY without LIMIT; keys: tuple of SortKey
                                    over the Project's output names.
TopK(child, keys, k)                ORDER BY ... LIMIT k.
Limit(child, n)                     LIMIT without ORDER BY.
SortKey(expr, descending)

Estimate(rows, evaluated, tokens, fresh_tokens, sol_s)
                                    output rows; rows (or pairs) the AI operator
                                    evaluated; requested and fresh prompt tokens of
                                    this node alone; speed-of-light seconds of this
                                    node alone.

Helpers for the runtime
-----------------------
ai_chain(node) -> (filters in evaluation order, plan below them)
doc_columns(template), question_text(template), document_text(names, values),
classify_instruction(item): what a filter / score / classify row shows the model.
anchor_column(join), partner_column(join), join_question_text(join): the same
for an AIJoin. render_tree(plan): indented text, root first.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable, Union

# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class ColumnRef:
    qualifier: str | None
    name: str


@dataclass(frozen=True)
class Literal:
    value: object


@dataclass(frozen=True)
class Comparison:
    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class InList:
    expr: "Expr"
    values: tuple
    negated: bool = False


@dataclass(frozen=True)
class Like:
    expr: "Expr"
    pattern: Literal
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    expr: "Expr"
    negated: bool = False


@dataclass(frozen=True)
class Between:
    expr: "Expr"
    low: "Expr"
    high: "Expr"
    negated: bool = False


@dataclass(frozen=True)
class And:
    terms: tuple


Expr = Union[ColumnRef, Literal, Comparison, InList, Like, IsNull, Between, And]

# ---------------------------------------------------------------- AI pieces


@dataclass(frozen=True)
class Template:
    text: str
    args: tuple


@dataclass(frozen=True)
class Hints:
    selectivity: float | None = None
    anchor: str | None = None


@dataclass(frozen=True)
class AIScore:
    template: Template
    alias: str


@dataclass(frozen=True)
class AIClassify:
    template: Template
    labels: tuple
    alias: str


@dataclass(frozen=True)
class Alias:
    expr: Expr
    name: str


@dataclass(frozen=True)
class SortKey:
    expr: ColumnRef
    descending: bool = False


@dataclass(frozen=True)
class Estimate:
    rows: float
    evaluated: float = 0.0
    tokens: float = 0.0
    fresh_tokens: float = 0.0
    sol_s: float = 0.0


# ---------------------------------------------------------------- plan nodes


@dataclass(frozen=True)
class Scan:
    table: str
    alias: str
    columns: tuple
    est: Estimate | None = None


@dataclass(frozen=True)
class Filter:
    child: "Plan"
    predicate: Expr
    est: Estimate | None = None


@dataclass(frozen=True)
class Join:
    left: "Plan"
    right: "Plan"
    condition: Expr | None = None
    est: Estimate | None = None


@dataclass(frozen=True)
class AIFilter:
    child: "Plan"
    template: Template
    hints: Hints = field(default_factory=Hints)
    rank: float | None = None
    sort_keys: tuple = ()
    retain: str = "none"
    est: Estimate | None = None


@dataclass(frozen=True)
class AIJoin:
    left: "Plan"
    right: "Plan"
    template: Template
    hints: Hints = field(default_factory=Hints)
    anchor: str | None = None
    condition: Expr | None = None
    sort_keys: tuple = ()
    retain: str = "none"
    est: Estimate | None = None


@dataclass(frozen=True)
class Project:
    child: "Plan"
    items: tuple
    sort_keys: tuple = ()
    est: Estimate | None = None


@dataclass(frozen=True)
class Sort:
    child: "Plan"
    keys: tuple
    est: Estimate | None = None


@dataclass(frozen=True)
class TopK:
    child: "Plan"
    keys: tuple
    k: int
    est: Estimate | None = None


@dataclass(frozen=True)
class Limit:
    child: "Plan"
    n: int
    est: Estimate | None = None


Plan = Union[Scan, Filter, Join, AIFilter, AIJoin, Project, Sort, TopK, Limit]
AI_ITEMS = (AIScore, AIClassify)

# ---------------------------------------------------------------- traversal


def children(node) -> tuple:
    """Child plans of ``node``: () for Scan, (left, right) for joins, else (child,)."""
    if isinstance(node, (Join, AIJoin)):
        return (node.left, node.right)
    if isinstance(node, Scan):
        return ()
    return (node.child,)


def with_children(node, kids: tuple):
    """``node`` with its child plans replaced by ``kids`` (same arity as children)."""
    if isinstance(node, (Join, AIJoin)):
        return dataclasses.replace(node, left=kids[0], right=kids[1])
    if isinstance(node, Scan):
        return node
    return dataclasses.replace(node, child=kids[0])


def transform(node, fn: Callable):
    """Apply ``fn`` bottom-up: children first, then the rebuilt node."""
    kids = tuple(transform(k, fn) for k in children(node))
    return fn(with_children(node, kids) if kids else node)


def walk(node):
    """Yield ``node`` and all plans below it, parents before children."""
    yield node
    for kid in children(node):
        yield from walk(kid)


def aliases(node) -> frozenset:
    """Table aliases a plan produces rows of."""
    return frozenset(n.alias for n in walk(node) if isinstance(n, Scan))


def expr_columns(expr) -> tuple:
    """ColumnRefs an expression (or Template, or SELECT item) reads, in order."""
    if isinstance(expr, ColumnRef):
        return (expr,)
    if isinstance(expr, Literal) or expr is None:
        return ()
    if isinstance(expr, Template):
        return tuple(a for a in expr.args if isinstance(a, ColumnRef))
    if isinstance(expr, (AIScore, AIClassify)):
        return expr_columns(expr.template)
    if isinstance(expr, Alias):
        return expr_columns(expr.expr)
    if isinstance(expr, And):
        return tuple(c for t in expr.terms for c in expr_columns(t))
    if isinstance(expr, InList):
        return expr_columns(expr.expr)
    if isinstance(expr, Like):
        return expr_columns(expr.expr)
    if isinstance(expr, IsNull):
        return expr_columns(expr.expr)
    if isinstance(expr, Between):
        return expr_columns(expr.expr) + expr_columns(expr.low) + expr_columns(expr.high)
    return expr_columns(expr.left) + expr_columns(expr.right)


def expr_aliases(expr) -> frozenset:
    """Table aliases an expression reads."""
    return frozenset(c.qualifier for c in expr_columns(expr))


def conjuncts(expr) -> tuple:
    """Flatten nested And into its terms; () for None."""
    if expr is None:
        return ()
    if isinstance(expr, And):
        return tuple(t for term in expr.terms for t in conjuncts(term))
    return (expr,)


def conjoin(terms) -> Expr | None:
    """And of ``terms`` (None if empty, the term itself if one)."""
    flat = tuple(t for term in terms for t in conjuncts(term))
    if not flat:
        return None
    return flat[0] if len(flat) == 1 else And(flat)


def ai_chain(node) -> tuple:
    """Split a stack of AIFilters into (filters in evaluation order, base plan).

    >>> base = Scan('reviews', 'r', ('text',))
    >>> f1 = AIFilter(base, Template('Is {0} long?', (ColumnRef('r', 'text'),)))
    >>> f2 = AIFilter(f1, Template('Is {0} rude?', (ColumnRef('r', 'text'),)))
    >>> [f.template.text for f in ai_chain(f2)[0]], ai_chain(f2)[1] is base
    (['Is {0} long?', 'Is {0} rude?'], True)
    """
    chain = []
    while isinstance(node, AIFilter):
        chain.append(node)
        node = node.child
    return tuple(reversed(chain)), node


# ---------------------------------------------------------------- templates

PLACEHOLDER = re.compile(r"\{(\d+)\}")


def placeholders(text: str) -> tuple:
    """Placeholder indices of a template text, in order of appearance."""
    return tuple(int(m.group(1)) for m in PLACEHOLDER.finditer(text))


def _distinct(cols) -> tuple:
    seen = []
    for c in cols:
        if c not in seen:
            seen.append(c)
    return tuple(seen)


def _substitute(template: Template, name_of: Callable) -> str:
    def one(m):
        arg = template.args[int(m.group(1))]
        return str(arg.value) if isinstance(arg, Literal) else name_of(arg)

    return PLACEHOLDER.sub(one, template.text)


def doc_columns(template: Template) -> tuple:
    """Distinct columns a filter, score or classify template reads: its document."""
    return _distinct(expr_columns(template))


def question_text(template: Template) -> str:
    """The question as the model sees it, beside ``DOCUMENT:\\n{doc}``.

    One document column: its placeholders become "the document". Several: the
    document is their "name: value" lines (:func:`document_text`) and each
    placeholder becomes the column name. Literal arguments are substituted.

    >>> t = Template('Is {0} about {1}?', (ColumnRef('r', 'text'), Literal('cats')))
    >>> question_text(t)
    'Is the document about cats?'
    >>> question_text(Template('Does {0} fit {1}?', (ColumnRef('r', 'title'), ColumnRef('r', 'body'))))
    'Does title fit body?'
    """
    single = len(doc_columns(template)) == 1
    return _substitute(template, lambda c: "the document" if single else c.name)


def classify_instruction(item: AIClassify) -> str:
    """The instruction of an ai_classify column: its question text, "" when none was written.

    >>> classify_instruction(AIClassify(Template('{0}', (ColumnRef('r', 'text'),)), ('a', 'b'), 'c'))
    ''
    >>> classify_instruction(AIClassify(Template('Mood of {0}?', (ColumnRef('r', 'text'),)), ('a', 'b'), 'c'))
    'Mood of the document?'
    """
    return "" if item.template.text.strip() == "{0}" else question_text(item.template)


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


def anchor_column(join: AIJoin) -> ColumnRef:
    """The AIJoin template's column on the anchor side (DOCUMENT 1)."""
    return next(c for c in expr_columns(join.template) if c.qualifier == join.anchor)


def partner_column(join: AIJoin) -> ColumnRef:
    """The AIJoin template's column on the partner side (DOCUMENT 2)."""
    return next(c for c in expr_columns(join.template) if c.qualifier != join.anchor)


def join_question_text(join: AIJoin) -> str:
    """The join question: anchor placeholder -> DOCUMENT 1, partner -> DOCUMENT 2.

    >>> t = Template('Is {0} about {1}?', (ColumnRef('r', 'text'), ColumnRef('t', 'term')))
    >>> j = AIJoin(Scan('reports', 'r', ('text',)), Scan('terms', 't', ('term',)), t, anchor='r')
    >>> join_question_text(j)
    'Is DOCUMENT 1 about DOCUMENT 2?'
    """
    anchor = anchor_column(join)
    return _substitute(join.template, lambda c: "DOCUMENT 1" if c == anchor else "DOCUMENT 2")


def item_name(item) -> str:
    """Output column name of a SELECT item."""
    if isinstance(item, ColumnRef):
        return item.name
    if isinstance(item, Alias):
        return item.name
    return item.alias


# ---------------------------------------------------------------- rendering


def render_expr(expr) -> str:
    """SQL-like text of an expression, template or SELECT item."""
    if isinstance(expr, ColumnRef):
        return expr.name if expr.qualifier is None else f"{expr.qualifier}.{expr.name}"
    if isinstance(expr, Literal):
        v = expr.value
        return "'" + v.replace("'", "\\'") + "'" if isinstance(v, str) else repr(v)
    if isinstance(expr, Comparison):
        return f"{render_expr(expr.left)} {expr.op} {render_expr(expr.right)}"
    if isinstance(expr, InList):
        vals = ", ".join(render_expr(v) for v in expr.values)
        return f"{render_expr(expr.expr)} {'NOT ' if expr.negated else ''}IN ({vals})"
    if isinstance(expr, Like):
        return f"{render_expr(expr.expr)} {'NOT ' if expr.negated else ''}LIKE {render_expr(expr.pattern)}"
    if isinstance(expr, IsNull):
        return f"{render_expr(expr.expr)} IS {'NOT ' if expr.negated else ''}NULL"
    if isinstance(expr, Between):
        return (f"{render_expr(expr.expr)} {'NOT ' if expr.negated else ''}BETWEEN "
                f"{render_expr(expr.low)} AND {render_expr(expr.high)}")
    if isinstance(expr, And):
        return " AND ".join(render_expr(t) for t in expr.terms)
    if isinstance(expr, Template):
        return ", ".join([render_expr(Literal(expr.text))] + [render_expr(a) for a in expr.args])
    if isinstance(expr, AIScore):
        return f"ai_score({render_expr(expr.template)}) AS {expr.alias}"
    if isinstance(expr, AIClassify):
        labels = ", ".join(render_expr(Literal(x)) for x in expr.labels)
        return f"ai_classify({render_expr(expr.template)}, [{labels}]) AS {expr.alias}"
    if isinstance(expr, Alias):
        return f"{render_expr(expr.expr)} AS {expr.name}"
    if isinstance(expr, SortKey):
        return render_expr(expr.expr) + (" DESC" if expr.descending else "")
    raise TypeError(f"expected an expression, got {type(expr).__name__}: {expr!r}")


def _hints(h: Hints) -> str:
    parts = [f"selectivity={h.selectivity}"] * (h.selectivity is not None)
    parts += [f"anchor={h.anchor}"] * (h.anchor is not None)
    return f" hints({', '.join(parts)})" if parts else ""


def _marks(node) -> str:
    out = ""
    if getattr(node, "sort_keys", ()):
        out += " sort_by(" + ", ".join(render_expr(c) for c in node.sort_keys) + ")"
    if getattr(node, "retain", "none") != "none":
        out += f" retain={node.retain}"
    return out


def render_node(node) -> str:
    """One line describing ``node`` without its children or estimates."""
    if isinstance(node, Scan):
        return f"Scan {node.table} AS {node.alias} [{', '.join(node.columns)}]"
    if isinstance(node, Filter):
        return f"Filter {render_expr(node.predicate)}"
    if isinstance(node, Join):
        cond = "" if node.condition is None else " ON " + render_expr(node.condition)
        return "Join" + cond if cond else "CrossJoin"
    if isinstance(node, AIFilter):
        return f"AIFilter ai_if({render_expr(node.template)}){_hints(node.hints)}{_marks(node)}"
    if isinstance(node, AIJoin):
        anchor = f" anchor={node.anchor}" if node.anchor else ""
        cond = "" if node.condition is None else f" AND {render_expr(node.condition)}"
        return (f"AIJoin ai_if({render_expr(node.template)}){cond}{_hints(node.hints)}"
                f"{anchor}{_marks(node)}")
    if isinstance(node, Project):
        return f"Project [{', '.join(render_expr(i) for i in node.items)}]{_marks(node)}"
    if isinstance(node, Sort):
        return f"Sort [{', '.join(render_expr(k) for k in node.keys)}]"
    if isinstance(node, TopK):
        return f"TopK {node.k} [{', '.join(render_expr(k) for k in node.keys)}]"
    if isinstance(node, Limit):
        return f"Limit {node.n}"
    raise TypeError(f"expected a plan node, got {type(node).__name__}")


def render_tree(plan, annotate: Callable | None = None) -> str:
    """Indented text of a plan, two spaces per level, root first.

    ``annotate(node) -> str`` appends text to each line (explain uses it for
    estimates).

    >>> print(render_tree(Filter(Scan('t', 't', ('a',)), IsNull(ColumnRef('t', 'a')))))
    Filter t.a IS NULL
      Scan t AS t [a]
    """
    lines = []

    def visit(node, depth):
        extra = annotate(node) if annotate else ""
        lines.append("  " * depth + render_node(node) + extra)
        for kid in children(node):
            visit(kid, depth + 1)

    visit(plan, 0)
    return "\n".join(lines)
