"""Rule: relational predicates below AI ones, each on the join side it reads.

A relational conjunct costs nothing next to a model call and only removes rows,
so it runs first: it sinks below every AIFilter, into the side of a Join or
AIJoin whose tables it reads, and into the join's condition when it reads both.
Adjacent relational conjuncts merge into one Filter.

Before::

    Project [r.id]
      Filter r.stars > 3
        AIFilter ai_if('Is {0} rude?', r.text)
          Filter r.product_id = p.id
            CrossJoin
              Scan reviews AS r [id, text, stars, product_id]
              Scan products AS p [id]

After::

    Project [r.id]
      AIFilter ai_if('Is {0} rude?', r.text)
        Join ON r.product_id = p.id
          Filter r.stars > 3
            Scan reviews AS r [id, text, stars, product_id]
          Scan products AS p [id]
"""

from __future__ import annotations

import dataclasses

from quail_spark import plan as P


def push_relational_below_ai(plan, ctx=None):
    """Sink every relational conjunct as far down as the tables it reads allow."""
    return _push(plan, ())


def _push(node, preds: tuple):
    if isinstance(node, P.Filter):
        return _push(node.child, P.conjuncts(node.predicate) + preds)
    if isinstance(node, P.AIFilter):
        return dataclasses.replace(node, child=_push(node.child, preds))
    if isinstance(node, (P.Join, P.AIJoin)):
        left_aliases, right_aliases = P.aliases(node.left), P.aliases(node.right)
        left, right, both = [], [], []
        for pred in _unique(preds + P.conjuncts(node.condition)):
            reads = P.expr_aliases(pred)
            side = left if reads <= left_aliases else right if reads <= right_aliases else both
            side.append(pred)
        return dataclasses.replace(node, left=_push(node.left, tuple(left)),
                                   right=_push(node.right, tuple(right)), condition=P.conjoin(both))
    kids = tuple(_push(k, ()) for k in P.children(node))
    node = P.with_children(node, kids) if kids else node
    return P.Filter(node, P.conjoin(_unique(preds))) if preds else node


def _unique(preds) -> tuple:
    out = []
    for p in preds:
        if p not in out:
            out.append(p)
    return tuple(out)
