"""Requests of prompts that fit the model's context: join requests sharing their anchor's prefix,
over-long prompts truncated (on_overflow='truncate') or refused with their row."""
from __future__ import annotations

import numpy as np

from .counters import Counters
from .prompts import PromptRenderer, PromptTooLong


class RequestFitter:
    """Builds (prefix, suffix) requests no longer than `limit` tokens.

    Holds the renderer (a join's question parts), the context limit, whether
    an over-long prompt is truncated or refused, and the engine's counters
    (`truncated_rows` is counted there).
    """

    def __init__(self, renderer: PromptRenderer, limit: int, truncate: bool, stats: Counters):
        self.renderer = renderer
        self.limit = limit
        self.truncate = truncate
        self.stats = stats

    def join_requests(self, a_toks, p_toks, question: str, row0: int = 0):
        """(requests, int64 [n, 2] (row0 + anchor, partner) of each) of a join. Every partner's request
        shares its anchor's prefix list, and every anchor's request for a partner shares that
        partner's suffix list (partner + answer cue, built once per call): a join of A anchors x P
        partners allocates A + P token lists, not A x P (the requests are only read)."""
        head, mid, post = self.renderer.join_parts(question)
        live = [p_i for p_i, p in enumerate(p_toks) if p is not None]
        tails = [p_toks[p_i] + post for p_i in live]
        longest = max(map(len, tails), default=0)
        reqs, rows = [], []
        for a_i, a in enumerate(a_toks):
            if a is None or not live:
                continue
            pre = head + a + mid  # built once per anchor: every partner's request shares this list
            if len(pre) + longest <= self.limit:
                reqs.extend(zip([pre] * len(tails), tails))
            else:
                reqs.extend(self.pair_request(row0 + a_i, pre, a, head, mid, p_toks[p_i], post) for p_i in live)
            rows.append(row0 + a_i)
        where = np.empty((len(rows) * len(live), 2), dtype=np.int64)
        where[:, 0] = np.repeat(np.asarray(rows, dtype=np.int64), len(live))
        where[:, 1] = np.tile(np.asarray(live, dtype=np.int64), len(rows))
        return reqs, where

    def pair_request(self, row, pre, a, head, mid, p, post):
        if len(pre) + len(p) + len(post) <= self.limit:
            return pre, p + post
        return self._fit_join(row, head, a, mid, p, post)

    def fit(self, row, head, doc, tail):
        """(prefix, suffix) of a document prompt, truncating the document if allowed."""
        over = len(head) + len(doc) + len(tail) - self.limit
        if over > 0:
            if not self.truncate or over > len(doc):
                raise PromptTooLong(row, len(head) + len(doc) + len(tail), self.limit,
                                    frame=len(head) + len(tail) if self.truncate else None)
            doc = doc[: len(doc) - over]
            self.stats.truncated_rows += 1
        return head + doc, tail

    def _fit_join(self, row, head, a, mid, p, post):
        over = len(head) + len(a) + len(mid) + len(p) + len(post) - self.limit
        if over > 0:
            if not self.truncate or over > len(a) + len(p):
                raise PromptTooLong(row, len(head) + len(a) + len(mid) + len(p) + len(post), self.limit,
                                    frame=len(head) + len(mid) + len(post) if self.truncate else None)
            cut_a = min(over, len(a))
            a, p = a[: len(a) - cut_a], p[: len(p) - (over - cut_a)]
            self.stats.truncated_rows += 1
        return head + a + mid, p + post
