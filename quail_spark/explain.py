"""Text of an optimised logical plan with its estimates, for ``.explain()``.

:func:`explain_logical` prints four parts: the plan tree with per-node estimated
rows (and, on AI nodes, evaluated rows, requested tokens, fresh tokens and
speed-of-light seconds); the chosen order of each AI filter chain with its
ranks and selectivities; each AI join's anchor and partner with their rows;
the total.
"""

from __future__ import annotations

from quail_spark import cost as C
from quail_spark import plan as P

AI_NODES = (P.AIFilter, P.AIJoin)


def explain_logical(plan, ctx: C.Context | None = None) -> str:
    """The plan, filter order, join anchors and totals as text.

    ``ctx`` is needed only when the plan has no estimates yet (not optimised).

    Examples
    --------
    >>> from quail_spark.catalog import DictCatalog
    >>> from quail_spark.parser import parse
    >>> from quail_spark.rules import Context, optimize
    >>> cat = DictCatalog({'notes': {'id': 'int', 'body': 'string'}}, rows={'notes': 2000},
    ...                   tokens={'notes': {'body': 300}})
    >>> ctx = Context(cat, C.cost_model('qwen3-4b', 'h200'))
    >>> q = optimize(parse("SELECT id FROM notes WHERE ai_if('Is {0} rude?', body)", cat), ctx)
    >>> print(explain_logical(q, ctx).splitlines()[-1])
    total: 1,000 rows out; 2,000 rows evaluated; 652,000 tokens requested, 652,000 fresh; SoL 6.08 s (qwen3-4b at 789 TFLOP/s)
    """
    if any(n.est is None for n in P.walk(plan)):
        if ctx is None:
            raise ValueError("expected an optimised plan (with estimates) or a ctx to estimate it")
        plan = C.annotate(plan, ctx)
    out = ["== Logical plan ==", P.render_tree(plan, _annotation)]
    chains = _chains(plan)
    if chains:
        out.append("== AI filter order (evaluation order, rank = SoL s per row / (1 - selectivity)) ==")
        for chain in chains:
            base = ", ".join(sorted(P.aliases(chain[0])))
            out.append(f"on {base}:")
            for i, f in enumerate(chain, 1):
                sel = C.ai_selectivity(f.hints)
                src = "hint" if f.hints.selectivity is not None else "default"
                rank = "-" if f.rank is None else f"{f.rank:.3g}"
                out.append(f"  {i}. {P.render_expr(f.template)}  selectivity={sel:g} ({src}) "
                           f"rank={rank} rows={_n(f.est.evaluated)}->{_n(f.est.rows)} "
                           f"tokens={_n(f.est.tokens)} fresh={_n(f.est.fresh_tokens)} sol={_s(f.est.sol_s)}")
    joins = [n for n in P.walk(plan) if isinstance(n, P.AIJoin)]
    if joins:
        out.append("== AI join anchors ==")
        for j in joins:
            anchor_side, partner_side = (j.left, j.right) if j.anchor in P.aliases(j.left) else (j.right, j.left)
            out.append(f"  {P.render_expr(j.template)}: anchor {P.render_expr(P.anchor_column(j))} "
                       f"({_n(anchor_side.est.rows)} rows), partner {P.render_expr(P.partner_column(j))} "
                       f"({_n(partner_side.est.rows)} rows), pairs={_n(j.est.evaluated)} "
                       f"tokens={_n(j.est.tokens)} fresh={_n(j.est.fresh_tokens)} sol={_s(j.est.sol_s)}")
    t = C.total(plan)
    model = ctx.model if ctx else None
    on = f" ({model.shape.name} at {model.rate / 1e12:g} TFLOP/s)" if model else ""
    out.append(f"total: {_n(t.rows)} rows out; {_n(t.evaluated)} rows evaluated; {_n(t.tokens)} tokens "
               f"requested, {_n(t.fresh_tokens)} fresh; SoL {_s(t.sol_s)}{on}")
    return "\n".join(out)


def _annotation(node) -> str:
    e = node.est
    if e is None:
        return ""
    text = f"  (rows={_n(e.rows)}"
    if e.tokens:
        text += (f" evaluated={_n(e.evaluated)} tokens={_n(e.tokens)} fresh={_n(e.fresh_tokens)}"
                 f" sol={_s(e.sol_s)}")
    if isinstance(node, P.AIFilter) and node.rank is not None:
        text += f" rank={node.rank:.3g}"
    return text + ")"


def _chains(plan) -> list:
    """Every maximal AIFilter chain, each in evaluation order."""
    out, inside = [], set()
    for node in P.walk(plan):
        if isinstance(node, P.AIFilter) and id(node) not in inside:
            chain, _ = P.ai_chain(node)
            inside.update(id(f) for f in chain)
            out.append(chain)
    return out


def _n(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 or x == int(x) else f"{x:.3g}"


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"
