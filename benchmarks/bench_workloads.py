"""The five workloads of DESIGN.md ("Workloads"), defined in token ids.

Documents, anchors, partners and agent traces are random token ids of the
SmolLM2 vocabulary (special ids left out); the static prompt segments
(chat frame, "DOCUMENT:", questions, answer cue) are the engine renderer's
own ids, so prompts have exactly the engine's layout. Requests go through
`Engine._run` (token ids in, answer-row logits out) and the engine's own
pinning for chains, as `Engine.filter/chain/join` do after tokenizing.

Selectivity: with random weights the margins are not about anything, so a
predicate here is TRUE when its margin exceeds the (1 - s) quantile of the
margins of the rows it evaluated: pass rates are exactly the selectivities
s of DESIGN.md, and chains short-circuit as the engine does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

QUESTION = "Is the review positive?"
CHAIN_QUESTIONS = ("Is the review written in English?", "Does the review complain about the plot?",
                   "Is the review longer than a paragraph?")
CHAIN_SELECTIVITY = (0.8, 0.25, 0.5)
JOIN_QUESTION = "Does DOCUMENT 1 report the adverse reaction named in DOCUMENT 2?"
ANCHOR_QUESTION = "Does the report describe an adverse drug reaction?"
PARTNER_QUESTION = "Is this term a symptom?"
TRACE_QUESTION = "Has the agent completed the task by the end of this trace?"


@dataclass
class Sizes:
    filter_docs: int = 2048
    doc_len: int = 300
    chain_docs: int = 1024
    join_anchors: int = 8
    anchor_len: int = 5000
    join_partners: int = 1000
    partner_len: tuple[int, int] = (6, 10)
    fj_anchors: int = 16
    fj_partners: int = 2000
    traces: int = 72
    trace_steps: int = 24
    step_len: tuple[int, int] = (60, 240)

    @classmethod
    def scaled(cls, f: float) -> "Sizes":
        s = cls()
        return cls(max(4, int(s.filter_docs * f)), s.doc_len, max(4, int(s.chain_docs * f)),
                   max(2, int(s.join_anchors * min(1.0, 2 * f))), s.anchor_len, max(4, int(s.join_partners * f)),
                   s.partner_len, max(4, int(s.fj_anchors * min(1.0, 2 * f))), max(8, int(s.fj_partners * f)),
                   max(2, int(s.traces * f)), s.trace_steps, s.step_len)

    @classmethod
    def smoke(cls) -> "Sizes":
        return cls(12, 40, 10, 2, 200, 12, (3, 6), 4, 16, 3, 5, (10, 30))


@dataclass
class Run:
    """What one workload did: every prompt evaluated (for the baseline), margins, timing."""

    name: str
    requests: list = field(default_factory=list)  # (prefix, suffix) of every evaluated prompt
    margins: list = field(default_factory=list)
    wall_s: float = 0.0
    notes: dict = field(default_factory=dict)

    @property
    def prompts(self) -> list[list[int]]:
        """Full token ids (built on demand, outside the timed region)."""
        return [p + s for p, s in self.requests]


class Vocab:
    def __init__(self, tokenizer, seed: int):
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        n = min(len(tokenizer), 49152)
        self.ids = np.array([i for i in range(n) if i not in special and i >= 17], dtype=np.int64)
        self.rng = np.random.default_rng(seed)

    def doc(self, n: int) -> list[int]:
        return self.ids[self.rng.integers(0, len(self.ids), int(n))].tolist()

    def docs(self, count: int, lo: int, hi: int | None = None) -> list[list[int]]:
        lens = [lo] * count if hi is None else self.rng.integers(lo, hi + 1, count)
        return [self.doc(n) for n in lens]


def evaluate(eng, run: Run, reqs) -> np.ndarray:
    """Margins of (prefix, suffix) requests through the engine; records the requests (no copy)."""
    run.requests.extend(reqs)
    m = eng.margins(reqs)
    run.margins.extend(m.tolist())
    return m


def passing(m: np.ndarray, selectivity: float) -> np.ndarray:
    """Rows whose margin beats the (1 - s) quantile: a predicate of selectivity s."""
    if len(m) == 0:
        return np.zeros(0, dtype=bool)
    return m > np.quantile(m, 1.0 - selectivity)


def run_filter(eng, vocab: Vocab, sz: Sizes) -> Run:
    run = Run("FILTER")
    docs = vocab.docs(sz.filter_docs, sz.doc_len)
    head, tail = eng.renderer.filter_parts(QUESTION)
    t0 = time.perf_counter()
    evaluate(eng, run, [(head + d, tail) for d in docs])
    run.wall_s = time.perf_counter() - t0
    return run


def run_chain(eng, vocab: Vocab, sz: Sizes) -> Run:
    """3 predicates AND-ed, documents pinned across stages, FALSE short-circuits (as Engine.chain)."""
    run = Run("CHAIN")
    docs = vocab.docs(sz.chain_docs, sz.doc_len)
    parts = [eng.renderer.filter_parts(q) for q in CHAIN_QUESTIONS]
    head = parts[0][0]
    evaluated = [0] * len(parts)
    t0 = time.perf_counter()
    for block in eng.chain_blocks(list(range(len(docs))), docs, head):
        pins = [eng.passes.pin(head + docs[i]) for i in block]
        try:
            alive = block
            for q_i, ((h, tail), sel) in enumerate(zip(parts, CHAIN_SELECTIVITY)):
                m = evaluate(eng, run, [(h + docs[i], tail) for i in alive])
                evaluated[q_i] += len(alive)
                alive = [i for i, ok in zip(alive, passing(m, sel)) if ok]
        finally:
            for node in pins:
                eng.passes.unpin(node)
    run.wall_s = time.perf_counter() - t0
    run.notes["evaluated_per_stage"] = evaluated
    return run


def _join(eng, run: Run, anchors, partners, question):
    """As Engine.join_ids: one prefix list per anchor, shared by its partners."""
    head, mid, post = eng.renderer.join_parts(question)
    reqs = []
    for a in anchors:
        prefix = head + a + mid
        reqs.extend((prefix, p + post) for p in partners)
    return evaluate(eng, run, reqs)


def run_join(eng, vocab: Vocab, sz: Sizes) -> Run:
    run = Run("JOIN")
    anchors = vocab.docs(sz.join_anchors, sz.anchor_len)
    partners = vocab.docs(sz.join_partners, *sz.partner_len)
    t0 = time.perf_counter()
    _join(eng, run, anchors, partners, JOIN_QUESTION)
    run.wall_s = time.perf_counter() - t0
    run.notes["pairs"] = len(anchors) * len(partners)
    return run


def run_filter_join(eng, vocab: Vocab, sz: Sizes) -> Run:
    """Filter anchors and partners (selectivity 0.5 each), then join the survivors."""
    run = Run("FILTER+JOIN")
    anchors = vocab.docs(sz.fj_anchors, sz.anchor_len)
    partners = vocab.docs(sz.fj_partners, *sz.partner_len)
    t0 = time.perf_counter()
    kept = []
    for side, question in ((anchors, ANCHOR_QUESTION), (partners, PARTNER_QUESTION)):
        head, tail = eng.renderer.filter_parts(question)
        m = evaluate(eng, run, [(head + d, tail) for d in side])
        kept.append([d for d, ok in zip(side, passing(m, 0.5)) if ok])
    _join(eng, run, kept[0], kept[1], JOIN_QUESTION)
    run.wall_s = time.perf_counter() - t0
    run.notes["pairs"] = len(kept[0]) * len(kept[1])
    return run


def run_prefix(eng, vocab: Vocab, sz: Sizes) -> Run:
    """Cumulative snapshots of agent traces: row k of a trace is its first k steps."""
    run = Run("PREFIX")
    head, tail = eng.renderer.filter_parts(TRACE_QUESTION)
    reqs = []
    for _ in range(sz.traces):
        trace = []
        for step in vocab.docs(sz.trace_steps, *sz.step_len):
            trace = trace + step
            reqs.append((head + trace, tail))
    order = vocab.rng.permutation(len(reqs))  # rows arrive in any order; the engine sorts them
    reqs = [reqs[i] for i in order]
    t0 = time.perf_counter()
    evaluate(eng, run, reqs)
    run.wall_s = time.perf_counter() - t0
    run.notes["rows"] = len(reqs)
    return run


WORKLOADS = {"FILTER": run_filter, "CHAIN": run_chain, "JOIN": run_join,
             "FILTER+JOIN": run_filter_join, "PREFIX": run_prefix}


def distinct_prefix_tokens(prompts) -> tuple[int, int]:
    """(tokens, attended pairs) of computing every distinct prefix of `prompts` once.

    The tokens of a prefix trie: over the prompts in sorted order, each adds
    its length minus its common prefix with the one before. A token at
    position p attends to p + 1 keys.
    """
    arrs = sorted((tuple(p) for p in prompts))
    tokens = pairs = 0
    prev = np.zeros(0, dtype=np.int64)
    for p in arrs:
        a = np.asarray(p, dtype=np.int64)
        n = min(len(a), len(prev))
        diff = np.nonzero(a[:n] != prev[:n])[0]
        lcp = int(diff[0]) if len(diff) else n
        new = len(a) - lcp
        tokens += new
        pairs += (lcp + 1 + len(a)) * new // 2  # sum of p + 1 for p in [lcp, len)
        prev = a
    return tokens, pairs
