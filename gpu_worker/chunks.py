"""Documents in chunks of a few passes' tokens, the next chunk tokenized on a helper thread meanwhile."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from .config import set_env_unless_set

CHUNK_TOKENS_PER_BUDGET = (2, 16)  # documents run in chunks of ~2 passes' tokens, then ~16 (tokenized a chunk ahead)
# ... and of at most this many requests: a chunk's preparation (its requests built and inserted, ~30 us each
# on one core: ~30 ms per join anchor of 1,127 partners) must fit under the passes still running
# (passes.IN_FLIGHT), or the device idles at every chunk boundary
MAX_CHUNK_REQUESTS = 12288
CHARS_PER_TOKEN = 4  # to size a chunk before it is tokenized


def leave_a_core() -> None:
    """The Rust tokenizer's threads (rayon's pool, one per core unless RAYON_NUM_THREADS says otherwise) on
    all cores but one, so the thread launching the device's work is not preempted while the next chunk is
    tokenized (on a 2-core machine, a loop of small torch ops stalled 236 ms in all over a 0.73 s
    tokenization with the pool on both cores, 24 ms with it on one: benchmarks/probes/tokenize_contention.py,
    probes/results/tokenize_contention_9a7214d.json). The pool reads the variable when it starts, at the
    process's first parallel tokenization: set here only when the user has not set it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores > 1:
        set_env_unless_set("RAYON_NUM_THREADS", str(cores - 1), "RAYON_RS_NUM_CPUS")


class DocumentChunks:
    """Splits an operation's documents into chunks and tokenizes chunk i+1 while the caller runs chunk i.

    Holds the engine's tokenizer function and token budget (one pass's fresh
    tokens) and its own helper thread, started on first use.
    """

    def __init__(self, tokenize: Callable[[list], list], token_budget: int):
        self.tokenize = tokenize
        self.token_budget = token_budget
        self._thread: ThreadPoolExecutor | None = None

    def __call__(self, docs: list[str | None], extra: int | None = None, requests_per_doc: int = 1):
        """(first row, ids) of consecutive chunks (sizes: CHUNK_TOKENS_PER_BUDGET);
        chunk i+1 is tokenized on the helper thread while the caller runs chunk i.

        extra: fresh tokens each document adds beyond its ids (a filter's tails, a join anchor's
        partners); when given, they count towards a chunk's size, and a chunk ends where its fresh
        tokens fill whole passes and the rows after move to the next chunk, so a chunk boundary
        does not leave a nearly empty pass. requests_per_doc: requests each document makes (a
        join anchor's partners); a chunk holds at most MAX_CHUNK_REQUESTS of them.
        """
        first, rest = (k * self.token_budget * CHARS_PER_TOKEN for k in CHUNK_TOKENS_PER_BUDGET)
        bounds, lo, size = [], 0, 0
        extra_chars = (extra or 0) * CHARS_PER_TOKEN
        per_chunk = max(1, MAX_CHUNK_REQUESTS // max(1, requests_per_doc))
        for i, d in enumerate(docs):  # a small first chunk: little tokenization before the device starts
            size += 0 if d is None else len(d) + extra_chars
            if size >= (rest if bounds else first) or i + 1 - lo >= per_chunk:
                bounds.append((lo, i + 1))
                lo, size = i + 1, 0
        if lo < len(docs) or not bounds:
            bounds.append((lo, len(docs)))
        if len(bounds) == 1:
            yield 0, self.tokenize(docs)
            return
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="quail-tokenize")
        submit = lambda b: self._thread.submit(self.tokenize, docs[b[0]:b[1]])  # noqa: E731
        nxt = submit(bounds[0])
        lo, carry = 0, []
        for k, b in enumerate(bounds):
            toks = carry + nxt.result()
            if k + 1 < len(bounds):
                nxt = submit(bounds[k + 1])
                cut = len(toks) if extra is None else self.whole_passes(toks, extra)
                toks, carry = toks[:cut], toks[cut:]
            yield lo, toks
            lo += len(toks)

    def whole_passes(self, toks, extra: int) -> int:
        """Rows of `toks` whose fresh tokens fill the most whole passes (at least one row)."""
        cum = np.cumsum([0 if t is None else len(t) + extra for t in toks])
        whole = cum[-1] // self.token_budget * self.token_budget
        return max(1, int(np.searchsorted(cum, whole, side="right")))
