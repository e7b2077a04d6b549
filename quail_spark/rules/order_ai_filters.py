"""Rule: order each chain of AI filters by rank = cost / (1 - selectivity).

For a conjunction of independent filters the expected cost per row is least
when filters run in ascending rank, cost being the per-row speed-of-light
seconds and selectivity the fraction of rows kept (Hellerstein). Selectivity is
the call's hint, else 0.5. A document read by several filters of the chain is
computed once and kept (see mark_kv_retention), so such filters are priced at
their question tokens only; a document read by one filter is priced in full.
Ties keep the written order. Sets ``rank`` on each AIFilter.

Before (as written: the long, permissive question first; the lowest filter runs first)::

    AIFilter ai_if('Is {0} rude?', r.text) hints(selectivity=0.1)
      AIFilter ai_if('Does {0} describe, in any way at all, a defect?', r.text) hints(selectivity=0.9)
        Scan reviews AS r [text]

After (the short, selective question first)::

    AIFilter ai_if('Does {0} describe, in any way at all, a defect?', r.text) hints(selectivity=0.9)
      AIFilter ai_if('Is {0} rude?', r.text) hints(selectivity=0.1)
        Scan reviews AS r [text]
"""

from __future__ import annotations

import dataclasses

from quail_spark import cost as C
from quail_spark import plan as P


def order_ai_filters(plan, ctx):
    """Reorder every stack of AIFilters by ascending rank; set ``rank``."""
    if isinstance(plan, P.AIFilter):
        chain, base = P.ai_chain(plan)
        base = order_ai_filters(base, ctx)
        ranked = sorted(zip(_ranks(chain, base, ctx), range(len(chain)), chain))
        node = base
        for rank, _, f in ranked:
            node = dataclasses.replace(f, child=node, rank=rank)
        return node
    kids = tuple(order_ai_filters(k, ctx) for k in P.children(plan))
    return P.with_children(plan, kids) if kids else plan


def _ranks(chain, base, ctx) -> list:
    tables = C.tables_of(base)
    docs = [P.doc_columns(f.template) for f in chain]
    out = []
    for f, doc in zip(chain, docs):
        shared = docs.count(doc) > 1
        q = ctx.model.text_tokens(P.question_text(f.template))
        seconds = C.filter_cost(ctx.model, 1, C.doc_tokens(ctx, tables, doc), q, shared).seconds
        out.append(seconds / max(1.0 - C.ai_selectivity(f.hints), 1e-9))
    return out
