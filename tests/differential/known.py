"""Known wrong-rows bugs being fixed, keyed by shape: a failure whose query has every tag of an
entry (one tag of each alternative set) on the entry's paths is counted as that entry, not as new.
Remove an entry once its fix lands; ``python -m tests.differential.run`` says which entries no
failure matched (candidates for removal), and ``--entry NAME`` rechecks an entry's queries with it
disabled."""
from __future__ import annotations

# name -> (alternative tag sets: the query must hold one tag of each, the paths it fails on; None: any path)
KNOWN: dict = {}


def fits(shape, needs) -> bool:
    """Whether ``shape`` holds one tag of each alternative tag set of ``needs``."""
    return all(any(t in shape for t in alt) for alt in needs)


def known(shape, paths) -> str | None:
    """The entry a failure of a query of ``shape`` on ``paths`` is, or None (a new failure)."""
    for name, (needs, on) in KNOWN.items():
        if fits(shape, needs) and (on is None or set(paths) <= set(on)):
            return name
    return None
