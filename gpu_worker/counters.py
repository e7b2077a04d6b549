"""The engine's counters: their one definition (`Counters`), the names the Spark report carries
(`REPORTED`), and the counters a block of work adds (`metered`).

`Engine.stats` is one `Counters`; the engine's parts (passes, request fitting, decoding) add to it in
place. It reads as the dict of DESIGN.md's Metrics (``stats["fresh_tokens"]``, ``dict(stats)``)::

    >>> c = Counters()
    >>> c["fresh_tokens"] += 5
    >>> with metered(c) as m:
    ...     c.fresh_tokens += 7
    ...     c.stages.append({"op": "filter", "question": "q", "evaluated": 2, "passed": 1})
    >>> m.delta["fresh_tokens"], len(m.stages), c["fresh_tokens"]
    (7, 1, 12)
"""
from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field, fields

# the engine counters every report carries (quail_spark.metrics, the ArrowMapper's and an enrichment
# run's, q.report), in this order
REPORTED = ("requested_tokens", "fresh_tokens", "reused_tokens", "kv_regret_tokens", "forward_passes",
            "truncated_rows", "output_tokens", "decode_steps", "preemptions")
# engine counter -> the prefix tree's own counter it follows (`PrefixTree.stats`)
TREE_COUNTERS = {"kv_kept_tokens": "kept_tokens", "kv_kept_unread_tokens": "kept_unread_tokens",
                 "evict_visited": "evict_visited", "evicted_nodes": "evicted_nodes"}


@dataclass(eq=False)
class Counters(MutableMapping):
    """What an engine has done since `Engine.reset_stats`."""

    requested_tokens: int = 0  # sum of full prompt lengths
    fresh_tokens: int = 0  # tokens the model computed
    reused_tokens: int = 0  # prompt tokens read from cached KV
    kv_regret_tokens: int = 0  # fresh tokens beyond computing each distinct prefix once
    min_fresh_tokens: int = 0  # fresh tokens had every distinct prefix been computed once
    forward_passes: int = 0
    requests: int = 0
    wall_s: float = 0.0
    truncated_rows: int = 0  # documents cut to fit the context (on_overflow='truncate')
    stages: list = field(default_factory=list)  # {"op", "question", "evaluated", "passed"} per stage
    # decoding (ai_generate, ai_extract, ai_summarize)
    output_tokens: int = 0
    decode_steps: int = 0
    preemptions: int = 0  # sequences whose KV was dropped for room and recomputed later
    decode_wall_s: float = 0.0
    decode_device_s: float = 0.0
    decode_admit_s: float = 0.0
    decode_admit_device_s: float = 0.0
    decode_capture_s: float = 0.0
    decode_context_tokens: int = 0
    decode_ahead_steps: int = 0
    decode_dropped_rows: int = 0
    # the prefix tree (`TREE_COUNTERS`)
    kv_kept_tokens: int = 0
    kv_kept_unread_tokens: int = 0
    evict_visited: int = 0
    evicted_nodes: int = 0

    def reset(self) -> None:
        """Every counter back to zero, in place (the engine's parts hold this object)."""
        for f in fields(self):
            setattr(self, f.name, [] if f.name == "stages" else type(f.default)())

    def __getitem__(self, key: str):
        if key not in _NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value) -> None:
        if key not in _NAMES:
            raise KeyError(f"{key!r} is not an engine counter")
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        raise TypeError("engine counters are reset, not deleted (Counters.reset)")

    def __iter__(self):
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)


_NAMES = tuple(f.name for f in fields(Counters))


class metered:
    """Context: the counters a block of work adds to ``stats`` (a `Counters`). On exit, ``delta`` holds
    `REPORTED`'s differences and ``stages`` the stage records added; ``into`` (a dict of `REPORTED`'s
    names), when given, has the differences added to it."""

    def __init__(self, stats: Counters, into: dict | None = None):
        self.stats, self.into = stats, into
        self.delta: dict = dict.fromkeys(REPORTED, 0)
        self.stages: list = []

    def __enter__(self) -> "metered":
        self.before = {k: self.stats[k] for k in REPORTED}
        self.n_stages = len(self.stats.stages)
        return self

    def __exit__(self, *exc) -> bool:
        self.delta = {k: self.stats[k] - self.before[k] for k in REPORTED}
        self.stages = self.stats.stages[self.n_stages:]
        if self.into is not None:
            for k, v in self.delta.items():
                self.into[k] = self.into.get(k, 0) + v
        return False
