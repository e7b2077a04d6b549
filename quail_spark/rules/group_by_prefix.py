"""Rule: mark where rows must be sorted so that rows sharing a prefix neighbour.

The engine computes a shared prefix once while the requests sharing it are
scheduled together, so rows reach an AI pipeline sorted by their documents. A
pipeline is a chain of AIFilters plus the Project with AI columns right above
it (or such a Project alone); it is sorted once, before its first operator, by
the columns of its documents in the order the pipeline reads them. No operator
inside a pipeline re-sorts: that would break the documents kept in KV across
the chain. An AIJoin sorts its pairs by anchor column, then partner column
(pairs grouped by anchor; partners with a common prefix next to each other).
``sort_keys`` on a node means: sort within partitions by these before it.

Before::

    Project [r.id, ai_score('Is {0} long?', r.text) AS s]
      AIFilter ai_if('Is {0} rude?', r.text)
        AIFilter ai_if('Is {0} about {1}?', r.title, 'cats')
          Scan reviews AS r [id, text, title]

After::

    Project [r.id, ai_score('Is {0} long?', r.text) AS s]
      AIFilter ai_if('Is {0} rude?', r.text)
        AIFilter ai_if('Is {0} about {1}?', r.title, 'cats') sort_by(r.title, r.text)
          Scan reviews AS r [id, text, title]
"""

from __future__ import annotations

import dataclasses

from quail_spark import plan as P


def group_by_prefix(plan, ctx=None):
    """Set ``sort_keys`` on the first operator of each AI pipeline and on AIJoins."""
    if isinstance(plan, P.AIJoin):
        plan = dataclasses.replace(plan, sort_keys=(P.anchor_column(plan), P.partner_column(plan)))
    project = plan if isinstance(plan, P.Project) and _ai_items(plan) else None
    chain, base = P.ai_chain(plan.child if project else plan)
    if not project and not chain:
        kids = tuple(group_by_prefix(k, ctx) for k in P.children(plan))
        return P.with_children(plan, kids) if kids else plan
    docs = [P.doc_columns(f.template) for f in chain]
    docs += [P.doc_columns(i.template) for i in _ai_items(project)] if project else []
    keys = tuple(dict.fromkeys(c for doc in docs for c in doc))
    node = group_by_prefix(base, ctx)
    for i, op in enumerate(chain + ((project,) if project else ())):
        node = dataclasses.replace(op, child=node, sort_keys=keys if i == 0 else ())
    return node


def _ai_items(project) -> tuple:
    return tuple(i for i in project.items if isinstance(i, P.AI_ITEMS))
