"""Requests of prompts that fit the model's context: join requests sharing their anchor's prefix,
over-long prompts truncated (on_overflow='truncate') or refused with their row."""
from __future__ import annotations

from .prompts import PromptRenderer, PromptTooLong


class RequestFitter:
    """Builds (prefix, suffix) requests no longer than `limit` tokens.

    Holds the renderer (a join's question parts), the context limit, whether
    an over-long prompt is truncated or refused, and the engine's counters
    (`truncated_rows` is counted there).
    """

    def __init__(self, renderer: PromptRenderer, limit: int, truncate: bool, stats: dict):
        self.renderer = renderer
        self.limit = limit
        self.truncate = truncate
        self.stats = stats

    def join_requests(self, a_toks, p_toks, question: str, row0: int = 0):
        """(requests, (row0 + anchor, partner) of each) of a join; every partner's request shares its anchor's prefix."""
        head, mid, post = self.renderer.join_parts(question)
        reqs, where = [], []
        for a_i, a in enumerate(a_toks):
            if a is None:
                continue
            pre = head + a + mid  # built once per anchor: every partner's request shares this list
            for p_i, p in enumerate(p_toks):
                if p is not None:
                    reqs.append(self.pair_request(row0 + a_i, pre, a, head, mid, p, post))
                    where.append((row0 + a_i, p_i))
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
                raise PromptTooLong(row, len(head) + len(doc) + len(tail), self.limit)
            doc = doc[: len(doc) - over]
            self.stats["truncated_rows"] += 1
        return head + doc, tail

    def _fit_join(self, row, head, a, mid, p, post):
        over = len(head) + len(a) + len(mid) + len(p) + len(post) - self.limit
        if over > 0:
            if not self.truncate or over > len(a) + len(p):
                raise PromptTooLong(row, len(head) + len(a) + len(mid) + len(p) + len(post), self.limit)
            cut_a = min(over, len(a))
            a, p = a[: len(a) - cut_a], p[: len(p) - (over - cut_a)]
            self.stats["truncated_rows"] += 1
        return head + a + mid, p + post
