"""Known wrong-rows bugs being fixed, keyed by shape: a failure whose query has every tag of an
entry (one tag of each alternative set) on the entry's paths is counted as that entry, not as new.
Remove an entry once its fix lands; ``python -m tests.differential.run`` says which entries no
failure matched (candidates for removal)."""
from __future__ import annotations

OUTER = ("on:outer", "on:semi", "sub")

# name -> (alternative tag sets: the query must hold one tag of each, the paths it fails on; None: any path)
KNOWN = {
    "anchor_dropped_template_column": ([tuple(f"tmpl_col_anchor@{c}" for c in OUTER)], None),
    "nan_bound_inner_ai_join_rules_on": ([("nan_bound@on:inner",)], ("rules_on",)),
    "three_inner_joins_doc_over_both": ([("three_inner",), ("doc_over_both@on:inner",)], ("rules_on",)),
    "quail_session_anchor_column": ([tuple(f"{t}@{c}" for t in ("anchor_col", "anchor_expr_alias")
                                           for c in ("on:inner", "on:outer", "on:semi", "sub", "where", "select"))],
                                    ("quail_session",)),
}


def fits(shape, needs) -> bool:
    """Whether ``shape`` holds one tag of each alternative tag set of ``needs``."""
    return all(any(t in shape for t in alt) for alt in needs)


def known(shape, paths) -> str | None:
    """The entry a failure of a query of ``shape`` on ``paths`` is, or None (a new failure)."""
    for name, (needs, on) in KNOWN.items():
        if fits(shape, needs) and (on is None or set(paths) <= set(on)):
            return name
    return None
