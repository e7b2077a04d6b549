"""The optimizer: a tuple of rules, each ``rule(plan, ctx) -> plan``, applied in order.

push_relational_below_ai   relational predicates first, each on its join side
choose_join_order          join order and AI-join anchors (Selinger-style, SoL cost)
order_ai_filters           each chain by rank = cost / (1 - selectivity)
group_by_prefix            sort keys so rows sharing a prefix neighbour
mark_kv_retention          keep a document across its chain, an anchor across partners
estimate_costs             rows, tokens and SoL seconds on every node

``ctx`` is a :class:`quail_spark.cost.Context` (catalog + cost model).
"""

from __future__ import annotations

from quail_spark.cost import Context
from quail_spark.rules.choose_join_order import choose_join_order
from quail_spark.rules.estimate_costs import estimate_costs
from quail_spark.rules.group_by_prefix import group_by_prefix
from quail_spark.rules.mark_kv_retention import mark_kv_retention
from quail_spark.rules.order_ai_filters import order_ai_filters
from quail_spark.rules.push_relational_below_ai import push_relational_below_ai

RULES = (
    push_relational_below_ai,
    choose_join_order,
    order_ai_filters,
    group_by_prefix,
    mark_kv_retention,
    estimate_costs,
)

__all__ = ["RULES", "Context", "optimize"] + [r.__name__ for r in RULES]


def optimize(plan, ctx: Context):
    """Apply every rule of RULES in order.

    Examples
    --------
    >>> from quail_spark.catalog import DictCatalog
    >>> from quail_spark.cost import cost_model
    >>> from quail_spark.parser import parse
    >>> from quail_spark.plan import render_tree
    >>> cat = DictCatalog({'notes': {'id': 'int', 'body': 'string', 'year': 'int'}})
    >>> ctx = Context(cat, cost_model('smollm2-135m', 'cpu'))
    >>> sql = "SELECT id FROM notes WHERE ai_if('Is {0} rude?', body) AND year > 2020"
    >>> print(render_tree(optimize(parse(sql, cat), ctx)))
    Project [notes.id]
      AIFilter ai_if('Is {0} rude?', notes.body) sort_by(notes.body)
        Filter notes.year > 2020
          Scan notes AS notes [id, body, year]
    """
    for rule in RULES:
        plan = rule(plan, ctx)
    return plan
