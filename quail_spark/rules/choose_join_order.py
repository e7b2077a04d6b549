"""Rule: join order and AI-join anchors by a Selinger-style search over SoL cost.

A join block is a tree of Join / AIJoin nodes (with the AIFilters stacked on
it) over leaves (a Scan with its filters). The rule takes the block apart into
leaves and predicates, puts every one-table predicate on its leaf, and builds
the cheapest tree bottom-up over subsets of leaves (dynamic programming, bushy
trees, no cross product while a connected split exists, at most one AI
predicate per join). A relational predicate over two leaves becomes a join
condition; an AI predicate over two leaves becomes an AIJoin, priced with each
side as the anchor (unless the call's 'anchor' hint fixes it): the anchor's
document and the question are computed once per anchor row, each pair computes
only its partner. The anchor side goes left. Cost = speed-of-light seconds of
the AI work + a nanosecond per intermediate row (relational work is free next
to the model, but fewer rows win ties).

Before::

    Project [r.id, t.term]
      AIFilter ai_if('Is {0} about {1}?', r.text, t.term)
        CrossJoin
          Scan terms AS t [term]
          Scan reports AS r [id, text]

After (5,000-token reports are the anchors, 8-token terms the partners)::

    Project [r.id, t.term]
      AIJoin ai_if('Is {0} about {1}?', r.text, t.term) anchor=r
        Scan reports AS r [id, text]
        Scan terms AS t [term]
"""

from __future__ import annotations

import dataclasses

from quail_spark import cost as C
from quail_spark import plan as P
from quail_spark.errors import UnsupportedSQL
from quail_spark.rules.push_relational_below_ai import push_relational_below_ai

MAX_TABLES = 10
SECONDS_PER_ROW = 1e-9


def choose_join_order(plan, ctx):
    """Replace every join block by its cheapest equivalent tree."""
    _, base = P.ai_chain(plan)
    if isinstance(base, (P.Join, P.AIJoin)):
        return _best_tree(plan, ctx)
    kids = tuple(choose_join_order(k, ctx) for k in P.children(plan))
    return P.with_children(plan, kids) if kids else plan


def _collect(node, leaves: list, relational: list, ai: list) -> None:
    chain, base = P.ai_chain(node)
    if not isinstance(base, (P.Join, P.AIJoin)):
        leaves.append(node)
        return
    if isinstance(base, P.AIJoin):
        ai.append((base.template, base.hints))
    ai.extend((f.template, f.hints) for f in chain)
    relational.extend(P.conjuncts(base.condition))
    _collect(base.left, leaves, relational, ai)
    _collect(base.right, leaves, relational, ai)


def _best_tree(block, ctx):
    leaves, relational, ai = [], [], []
    _collect(block, leaves, relational, ai)
    if len(leaves) > MAX_TABLES:
        raise UnsupportedSQL(f"join of {len(leaves)} tables", f"expected at most {MAX_TABLES}")
    leaves = [choose_join_order(leaf, ctx) for leaf in leaves]
    owner = {a: i for i, leaf in enumerate(leaves) for a in P.aliases(leaf)}

    def mask_of(expr) -> int:
        return sum({1 << owner[a] for a in P.expr_aliases(expr)}) or 1

    edges = []  # (mask, relational predicate or (template, hints))
    for pred in relational + ai:
        mask = mask_of(pred if not isinstance(pred, tuple) else pred[0])
        if mask & (mask - 1):
            edges.append((mask, pred))
            continue
        i = mask.bit_length() - 1
        leaves[i] = (P.AIFilter(leaves[i], *pred) if isinstance(pred, tuple)
                     else push_relational_below_ai(P.Filter(leaves[i], pred)))
    best = {1 << i: _priced(C.annotate(leaf, ctx)) for i, leaf in enumerate(leaves)}
    tables = C.tables_of(block)
    full = (1 << len(leaves)) - 1
    for mask in sorted(range(1, full + 1), key=lambda m: (bin(m).count("1"), m)):
        if mask & (mask - 1):
            best[mask] = _best_split(mask, best, edges, ctx, tables)
    return best[full][1]


def _priced(plan):
    return (sum(n.est.sol_s + SECONDS_PER_ROW * n.est.rows for n in P.walk(plan)), plan)


def _best_split(mask, best, edges, ctx, tables):
    """Cheapest (cost, plan) joining two disjoint subsets that cover ``mask``."""
    splits = []
    sub = (mask - 1) & mask
    while sub:
        rest = mask ^ sub
        if sub & (mask & -mask) and sub in best and rest in best:  # lowest leaf on the left
            crossing = [p for m, p in edges if m & sub and m & rest and not m & ~mask]
            splits.append((sub, rest, crossing))
        sub = (sub - 1) & mask
    connected = [s for s in splits if s[2]]
    options = []  # (cost of both inputs, plan)
    for sub, rest, crossing in connected or splits:
        preds = [p for p in crossing if not isinstance(p, tuple)]
        ais = [p for p in crossing if isinstance(p, tuple)]
        left, right = best[sub][1], best[rest][1]
        inputs = best[sub][0] + best[rest][0]
        if len(ais) > 1:
            continue
        if not ais:
            options.append((inputs, P.Join(left, right, P.conjoin(preds))))
            continue
        template, hints = ais[0]
        for anchor in ([hints.anchor] if hints.anchor else
                       list(dict.fromkeys(c.qualifier for c in P.expr_columns(template)))):
            a, b = (left, right) if anchor in P.aliases(left) else (right, left)
            options.append((inputs, P.AIJoin(a, b, template, hints, anchor, P.conjoin(preds))))
    if not options:
        raise UnsupportedSQL("several AI predicates between the same tables",
                             "expected at most one AI predicate joining two groups of tables")
    priced = []
    for inputs, node in options:
        est = C.estimate_node(node, ctx, tables)
        priced.append((inputs + est.sol_s + SECONDS_PER_ROW * est.rows, dataclasses.replace(node, est=est)))
    return min(priced, key=lambda cp: cp[0])
