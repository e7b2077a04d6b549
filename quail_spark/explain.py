"""``Query.explain()``: Spark's optimized plan (with our rules' rewrites) and our estimates.

Everything here reads the text of ``df.explain(mode="cost")``, which classic
and Spark Connect sessions both print and which runs no Spark job: the
optimized logical plan with Spark's statistics on every node, then the
physical plan. On top of it we print, for the AI calls of the query
(:class:`quail_spark.dialect.AICall`, so templates and hints are exact):

- AI filter order: the AI conjuncts over one document in evaluation order
  (the order inside the rules' fused ``quail_chain`` call when the plan has
  one, else the rank order the rules would pick), with selectivity, rank and
  rows evaluated under short-circuit;
- AI join anchors: each AI join's two sides with their rows and the
  speed-of-light cost with either side as the anchor;
- the SoL estimate of the whole query (:mod:`quail_spark.cost`).

Rows come only from Spark's plan statistics (``rowCount`` when Spark has it,
else ``sizeInBytes`` over an estimated row width); unknown when Spark's size is
its "no idea" default. Document lengths are not in Spark's statistics: they are
assumed (``doc_tokens``, 300 tokens unless given per column).
"""
from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field

from quail_spark import cost as C

DOC_TOKENS = 300          # assumed tokens of a document column without a given length
BYTES_PER_COLUMN = 16     # row width estimate per output column when Spark gives only a size
UNKNOWN_SIZE = 1e15       # Spark's default sizeInBytes (8 EiB) and products of it: rows unknown
STATS = re.compile(r",? Statistics\(sizeInBytes=([0-9.E+]+) ?([KMGTPE]i)?B(?:, rowCount=([0-9.E+]+))?[^)]*\)")
UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
ATTR = re.compile(r"\b([A-Za-z_][\w]*)#(\d+)L?\b")


@dataclass(eq=False)
class PlanNode:
    """One line of Spark's optimized logical plan, its statistics and children."""

    text: str
    depth: int
    rows: float | None
    children: list = field(default_factory=list)
    parent: "PlanNode | None" = None

    def subtree_text(self) -> str:
        return "\n".join([self.text] + [c.subtree_text() for c in self.children])


def plan_text(df, mode: str = "cost") -> str:
    """What ``df.explain(mode)`` prints (classic and Spark Connect alike; no job runs)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        df.explain(mode=mode)
    return buf.getvalue()


def parse_plan(text: str) -> PlanNode | None:
    """The tree of the "Optimized Logical Plan" section of ``explain(mode='cost')`` text."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("== "):
            inside = line.startswith("== Optimized Logical Plan")
            continue
        if inside and line.strip():
            lines.append(line)
    stack: list[PlanNode] = []
    root = None
    for line in lines:
        m = re.match(r"^((?:[ :|]  )*)([+:]- )?", line)
        depth = len(m.group(1)) // 3 + (1 if m.group(2) else 0)
        body = line[m.end():]
        node = PlanNode(STATS.sub("", body), depth, _rows(body))
        while stack and stack[-1].depth >= depth:
            stack.pop()
        if stack:
            stack[-1].children.append(node)
            node.parent = stack[-1]
        elif root is None:
            root = node
        stack.append(node)
    return root


def _rows(line: str) -> float | None:
    m = STATS.search(line)
    if m is None:
        return None
    if m.group(3):
        return float(m.group(3))
    size = float(m.group(1)) * UNITS[m.group(2)]
    if size >= UNKNOWN_SIZE:
        return None
    bracket = re.search(r"\[([^\]]*)\]", line)
    cols = len(ATTR.findall(bracket.group(1))) if bracket else 0
    return size / (BYTES_PER_COLUMN * max(cols, 1))


def _walk(node):
    yield node
    for c in node.children:
        yield from _walk(c)


def _input_rows(node: PlanNode) -> float | None:
    """Rows flowing into ``node``: its only child's, or the node's own when it has none."""
    if len(node.children) == 1:
        return node.children[0].rows
    return node.rows


def _where(root: PlanNode, call) -> PlanNode | None:
    """The deepest plan line that evaluates ``call`` (its template appears after the name)."""
    names = ("quail_", call.fn + "(", "ai_filter(" if call.fn == "ai_if" else call.fn + "(")
    hit = None
    for n in _walk(root):
        if call.template in n.text and any(x in n.text for x in names):
            if hit is None or n.depth > hit.depth:
                hit = n
    return hit


# ------------------------------------------------------------------ estimates


def explain_text(df, calls, model: C.CostModel, doc_tokens=None) -> str:
    """Spark's plans and our estimates for ``df`` whose AI calls are ``calls``."""
    return explain_plan(plan_text(df), calls, model, doc_tokens)


def explain_plan(text: str, calls, model: C.CostModel, doc_tokens=None) -> str:
    """``text`` (``explain(mode='cost')`` output) followed by our estimates for ``calls``."""
    root = parse_plan(text)
    out = [text.rstrip()]
    if root is None:
        return "\n".join(out + ["(no optimized plan in Spark's explain output: estimates skipped)"])
    chains, joins, columns = _sites(root, calls)
    total = _Total(model, _doc_tokens(doc_tokens))
    if chains:
        out.append("== AI filter order (evaluation order; rank = SoL s per row / (1 - selectivity)) ==")
        out += [line for (node, doc), members in chains.items() for line in total.chain(node, doc, members)]
    if joins:
        out.append("== AI join anchors (SoL seconds with each side as the anchor) ==")
        out += [total.join(node, c, sides) for node, c, sides in joins]
    if columns:
        out.append("== AI columns ==")
        out += [total.column(node, c, doc) for node, c, doc in columns]
    t = total.cost
    per_row = f"; per input row where rows are unknown ({', '.join(total.unknown)})" if total.unknown else ""
    out += ["== SoL estimate ==",
            f"total: {total.prompts:,.0f} prompts; {t.tokens:,.0f} tokens requested, {t.fresh:,.0f} fresh; "
            f"SoL {_s(t.seconds)} ({model.shape.name} at {model.rate / 1e12:g} TFLOP/s){per_row}; documents "
            f"assumed {_describe_tokens(doc_tokens)} tokens (Spark has no text lengths)"]
    return "\n".join(out)


class _Total:
    """Prices each AI site with the cost model, returns its lines, and sums the estimate."""

    def __init__(self, model: C.CostModel, tokens):
        self.model, self.tokens = model, tokens
        self.cost, self.prompts, self.unknown = C.Cost(), 0.0, []

    def add(self, cost: C.Cost, prompts: float, known: bool, what: str) -> None:
        self.cost, self.prompts = self.cost + cost, self.prompts + prompts
        if not known:
            self.unknown.append(what)

    def chain(self, node: PlanNode, doc: str, members) -> list:
        """Lines of one AND chain over ``doc``: the rules' order when fused, else rank order."""
        m, rows = self.model, _input_rows(node)
        fused = "quail_chain" in node.text
        if fused:  # the rules' order: templates in the order they appear in the fused call
            members = sorted(members, key=lambda c: node.text.find(c.template))
        qs = [(_question(c), c.hint("selectivity")) for c in members]
        ranked = C.order_chain(m, qs, self.tokens(doc))
        ranks = {i: r for r, i in ranked}
        order = list(range(len(members))) if fused else [i for _, i in ranked]
        cost, per = C.chain_cost(m, rows or 1.0, self.tokens(doc), [qs[i] for i in order])
        how = "fused by the rules" if fused else "rank order; this plan evaluates every conjunct on every row"
        out = [f"on {doc} ({_n(rows)} rows; {how}):"]
        for k, i in enumerate(order):
            sel = qs[i][1]
            src = "hint" if sel is not None else "default"
            sel = C.DEFAULT_AI_SELECTIVITY if sel is None else sel
            ev = f"{per[k]:,.0f}" if rows is not None else f"{per[k]:.3g} per input row"
            out.append(f"  {k + 1}. {_call(members[i])}  selectivity={sel:g} ({src}) rank={ranks[i]:.3g} "
                       f"evaluated={ev}")
        self.add(cost, sum(per), rows is not None, doc)
        return out

    def join(self, node: PlanNode, c, sides) -> str:
        """The line of one AI join: anchor, partner, SoL with either side as the anchor."""
        (lname, lrows), (rname, rrows) = sides
        costs = C.anchor_costs(self.model, lrows or 1.0, rrows or 1.0, self.tokens(lname), self.tokens(rname),
                               self.model.text_tokens(_question(c)))
        anchor = _anchor(c, node, sides, costs)
        missing = [name for name, rows in sides if rows is None]
        unit = " per pair" if len(missing) == 2 else f" per row of {missing[0]}" if missing else ""
        self.add(costs["left"] if anchor[0] == lname else costs["right"], (lrows or 1.0) * (rrows or 1.0),
                 not missing, c.template)
        return (f"  {_call(c)}: anchor {anchor[0]} ({_n(anchor[1])} rows; {anchor[4]}), partner "
                f"{anchor[2]} ({_n(anchor[3])} rows); SoL{unit} with {lname} as anchor "
                f"{_s(costs['left'].seconds)}, with {rname} {_s(costs['right'].seconds)}")

    def column(self, node: PlanNode, c, doc: str) -> str:
        """The line of one score / classify column (or an ai_if outside a filter)."""
        m, rows = self.model, _input_rows(node)
        q = m.text_tokens(_question(c)) + sum(m.text_tokens(x) + 1 for x in c.labels)
        cost = C.filter_cost(m, rows or 1.0, self.tokens(doc), q, answers=len(c.labels) or None)
        self.add(cost, rows or 1.0, rows is not None, doc)
        return f"  {_call(c)} over {doc}: {_n(rows)} rows, SoL {_s(cost.seconds)}"


def _sites(root: PlanNode, calls):
    """AI filter chains {(node, document): [calls]}, joins [(node, call, sides)], columns."""
    chains, joins, columns = {}, [], []
    for c in calls:
        node = _where(root, c)
        if node is None:
            continue
        sides = _join_sides(root, node, c)
        if sides is not None:
            joins.append((node, c, sides))
        elif c.fn == "ai_if" and _is_filter(node):
            chains.setdefault((node, _doc(c)), []).append(c)
        else:
            columns.append((node, c, _doc(c)))
    return chains, joins, columns


def _is_filter(node: PlanNode) -> bool:
    """A Filter line, the rules' chain, or an evaluation right under a Filter (rules off)."""
    under_filter = node.parent is not None and node.parent.text.startswith("Filter")
    return node.text.startswith("Filter") or "quail_chain" in node.text or (
        node.text.startswith("ArrowEvalPython") and under_filter)


def _join_sides(root: PlanNode, node: PlanNode, c):
    """((column, rows), (column, rows)) when the call's first two columns come from the two
    sides of a join at or below ``node``; else None."""
    if len(c.args) < 2:
        return None
    join = next((n for n in _walk(node) if len(n.children) == 2), None)
    if join is None:
        return None
    attrs = [_attr(join.subtree_text(), a) for a in c.args[:2]]
    left, right = join.children[0].subtree_text(), join.children[1].subtree_text()
    if attrs[0] is None or attrs[1] is None:
        return None
    if attrs[0] in left and attrs[1] in right:
        return (c.args[0], join.children[0].rows), (c.args[1], join.children[1].rows)
    if attrs[1] in left and attrs[0] in right:
        return (c.args[1], join.children[0].rows), (c.args[0], join.children[1].rows)
    return None


def _attr(text: str, arg: str) -> str | None:
    """``name#id`` of a column argument (``a.body`` -> ``body#12``) as the plan spells it."""
    name = arg.split(".")[-1].strip("`")
    m = re.search(rf"\b{re.escape(name)}#\d+", text)
    return m.group(0) if m else None


def _anchor(c, node: PlanNode, sides, costs):
    """(anchor column, rows, partner column, rows, why): the column the rules' quail_join sorts
    by, else the hint's table, else the cheaper SoL side when Spark knows both sides' rows,
    else the template's first column (the prompt's DOCUMENT, whose KV is shared)."""
    (lname, lrows), (rname, rrows) = sides
    hint = c.hint("anchor")
    sort = next((k for k in node.children if k.text.startswith("Sort [")), None)
    if "quail_join" in node.text and sort is not None:
        key = sort.text[len("Sort ["):].split(" ")[0]
        left, why = _attr(key, lname) == key, "the rules' quail_join, sorted by it"
    elif hint is not None:
        left, why = lname.split(".")[0] == hint or lname == hint, "hint"
    elif lrows is not None and rrows is not None:
        left, why = costs["left"].seconds <= costs["right"].seconds, "SoL cost model"
    else:
        left, why = lname == c.args[0], "the template's first column; rows unknown"
    return (lname, lrows, rname, rrows, why) if left else (rname, rrows, lname, lrows, why)


def _doc(c) -> str:
    return ", ".join(c.args)


def _question(c) -> str:
    from gpu_worker.ai_calls import Call

    kind = c.fn.removeprefix("ai_")
    return Call(kind, c.template, len(c.args), tuple(c.labels) or ("a", "b")).question


def _call(c) -> str:
    args = ", ".join((repr(c.template),) + tuple(c.args))
    hints = f", hints {dict(c.hints)}" if c.hints else ""
    labels = f", labels {list(c.labels)}" if c.labels else ""
    return f"{c.fn}({args}){labels}{hints}"


def _doc_tokens(given):
    """column -> assumed tokens; ``given`` None, an int, or {column name: tokens}."""
    if isinstance(given, (int, float)):
        return lambda doc: float(given)
    table = {k.split(".")[-1]: float(v) for k, v in (given or {}).items()}
    return lambda doc: sum(table.get(a.strip().split(".")[-1], DOC_TOKENS) for a in doc.split(","))


def _describe_tokens(given) -> str:
    if isinstance(given, (int, float)):
        return f"{given:g}"
    if given:
        return ", ".join(f"{k}={v}" for k, v in given.items()) + f", else {DOC_TOKENS}"
    return str(DOC_TOKENS)


def _n(x) -> str:
    return "unknown" if x is None else f"{x:,.0f}" if x >= 10 or x == int(x) else f"{x:.3g}"


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"
