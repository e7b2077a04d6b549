"""Documents in chunks of a few passes' tokens, the next chunk tokenized on a helper thread meanwhile.

A part of `Engine` (docs/architecture.md): it uses the engine's tokenizer and token budget.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

CHUNK_TOKENS_PER_BUDGET = (2, 16)  # documents run in chunks of ~2 passes' tokens, then ~16 (tokenized a chunk ahead)
CHARS_PER_TOKEN = 4  # to size a chunk before it is tokenized


class Chunks:
    _tokenizer_thread: ThreadPoolExecutor | None = None  # started on first use, one per engine

    def _chunks(self, docs: list[str | None], extra: int | None = None):
        """(first row, ids) of consecutive chunks (sizes: CHUNK_TOKENS_PER_BUDGET);
        chunk i+1 is tokenized on a helper thread while the caller runs chunk i.

        extra: fresh tokens each document adds beyond its ids (a filter's tails); when given, a
        chunk ends where its fresh tokens fill whole passes and the rows after move to the next
        chunk, so a chunk boundary does not leave a nearly empty pass.
        """
        first, rest = (k * self.rt.token_budget * CHARS_PER_TOKEN for k in CHUNK_TOKENS_PER_BUDGET)
        bounds, lo, size = [], 0, 0
        for i, d in enumerate(docs):  # a small first chunk: little tokenization before the device starts
            size += 0 if d is None else len(d)
            if size >= (rest if bounds else first):
                bounds.append((lo, i + 1))
                lo, size = i + 1, 0
        if lo < len(docs) or not bounds:
            bounds.append((lo, len(docs)))
        if len(bounds) == 1:
            yield 0, self._tokenize(docs)
            return
        if self._tokenizer_thread is None:
            self._tokenizer_thread = ThreadPoolExecutor(1, thread_name_prefix="quail-tokenize")
        submit = lambda b: self._tokenizer_thread.submit(self._tokenize, docs[b[0]:b[1]])  # noqa: E731
        nxt = submit(bounds[0])
        lo, carry = 0, []
        for k, b in enumerate(bounds):
            toks = carry + nxt.result()
            if k + 1 < len(bounds):
                nxt = submit(bounds[k + 1])
                cut = len(toks) if extra is None else self._whole_passes(toks, extra)
                toks, carry = toks[:cut], toks[cut:]
            yield lo, toks
            lo += len(toks)

    def _whole_passes(self, toks, extra: int) -> int:
        """Rows of `toks` whose fresh tokens fill the most whole passes (at least one row)."""
        cum = np.cumsum([0 if t is None else len(t) + extra for t in toks])
        whole = cum[-1] // self.rt.token_budget * self.rt.token_budget
        return max(1, int(np.searchsorted(cum, whole, side="right")))
