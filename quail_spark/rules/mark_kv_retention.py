"""Rule: mark which KV stays cached: a document across its chain, an anchor across its partners.

Within a pipeline (a chain of AIFilters, and the Project right above it) a row's
document is computed by the first AI operator that reads it. An AIFilter gets
``retain='document'`` when a later operator of the pipeline reads the same
document, so the engine keeps those KV pages until then (a FALSE releases them
early: the rest of the chain is skipped). Every AIJoin gets ``retain='anchor'``:
anchor and question stay cached while its partners stream against it.

Before::

    Project [r.id, ai_score('Is {0} long?', r.text) AS s]
      AIFilter ai_if('Is {0} rude?', r.text)
        AIFilter ai_if('Is {0} about {1}?', r.title, 'cats')
          Scan reviews AS r [id, text, title]

After::

    Project [r.id, ai_score('Is {0} long?', r.text) AS s]
      AIFilter ai_if('Is {0} rude?', r.text) retain=document
        AIFilter ai_if('Is {0} about {1}?', r.title, 'cats')
          Scan reviews AS r [id, text, title]
"""

from __future__ import annotations

import dataclasses

from quail_spark import plan as P


def mark_kv_retention(plan, ctx=None):
    """Set ``retain`` on AIFilters and AIJoins."""
    return _mark(plan, frozenset())


def _mark(node, later: frozenset):
    """``later``: documents read by AI operators above ``node`` in its pipeline."""
    if isinstance(node, P.AIFilter):
        doc = P.doc_columns(node.template)
        retain = "document" if doc in later else "none"
        return dataclasses.replace(node, retain=retain, child=_mark(node.child, later | {doc}))
    if isinstance(node, P.Project):
        docs = frozenset(P.doc_columns(i.template) for i in node.items if isinstance(i, P.AI_ITEMS))
        return dataclasses.replace(node, child=_mark(node.child, docs))
    if isinstance(node, P.AIJoin):
        node = dataclasses.replace(node, retain="anchor")
    kids = tuple(_mark(k, frozenset()) for k in P.children(node))
    return P.with_children(node, kids) if kids else node
