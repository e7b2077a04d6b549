"""The prefill-only engine: requests in, answer-token margins out.

A step is three lines: the scheduler picks the jobs of a pass, the runner
computes them, the scheduler marks what became resident. Everything shared
(system prompt, a document under several predicates, a join anchor, rows
extending earlier rows) lives once in the prefix tree.
"""
from __future__ import annotations

import functools
import gc
import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from . import weights
from .config import EngineConfig
from .kv_pool import PagePool
from .prefix_tree import Node, PrefixTree
from .prompts import PromptRenderer, PromptTooLong, documents
from .runner import KVCache, ModelRunner
from .runtime import Runtime
from .scheduler import Scheduler

log = logging.getLogger("gpu_worker")

CHUNK_TOKENS_PER_BUDGET = (2, 16)  # documents run in chunks of ~2 passes' tokens, then ~16 (tokenized a chunk ahead)
CHARS_PER_TOKEN = 4  # to size a chunk before it is tokenized
TREE_COUNTERS = {"kv_kept_tokens": "kept_tokens", "kv_kept_unread_tokens": "kept_unread_tokens",
                 "evict_visited": "evict_visited", "evicted_nodes": "evicted_nodes"}


def _serialized(method):
    """Calls on one Engine from several threads run one at a time (the engine's lock)."""
    @functools.wraps(method)
    def locked(self, *a, **kw):
        with self._lock:
            try:
                return method(self, *a, **kw)
            finally:
                self._drain()  # nothing an operation launched outlives it (an error between chunks too)
    return locked


class Engine:
    """Prefill-only scoring engine (docs/architecture.md, "Where each part lives").

    Thread safety: the operations (filter, score, chain, join, join_ids,
    pairs, classify, count_tokens) hold the engine's lock, so calls from
    several threads on one Engine are serialized and each returns what it
    would alone. Documents are `str` or None; None, empty or whitespace-only
    documents are NULL and get NaN (-1 for classify); document text is
    tokenized with special-token parsing off.

    Examples
    --------
    >>> from gpu_worker import Engine, EngineConfig
    >>> eng = Engine(EngineConfig(model="tiny-llama-random"))
    >>> eng.filter(["a red apple"], ["Is the document about fruit?"]).shape
    (1, 1)
    """

    def __init__(self, config: EngineConfig | None = None, **kw):
        self._lock = threading.RLock()
        self._in_flight: deque = deque()  # (Launched, logits array it fills) of passes not read yet
        self._tokenizer_thread: ThreadPoolExecutor | None = None
        cfg = config or EngineConfig(**kw)
        if config is not None and kw:
            cfg = cfg.replace(**kw)
        self.config = cfg
        t0 = time.time()
        src = weights.resolve(cfg.model, cfg.cache_dir, cfg.seed, cfg.tokenizer)
        self.model_config = src.config
        self.tokenizer = weights.load_tokenizer(src)
        self.renderer = PromptRenderer(self.tokenizer)
        self.rt = Runtime.create(cfg, src.config)
        model = weights.load_model(src, self.rt.device, self.rt.dtype)
        model.prepare(self.renderer.answers.head_ids, self.rt.max_position, self.rt.device)
        if cfg.quantize == "fp8":
            model.quantize_fp8(keep=False)
        self.model = model
        self.rt.size_pool(src.config)
        kv = KVCache(src.config.num_layers, self.rt.kv_slots, src.config.num_kv_heads,
                     src.config.head_dim, self.rt.dtype, self.rt.device)
        self.runner = ModelRunner(model, kv, self.rt.ops, self.rt.device)
        self._new_tree()
        self.reset_stats()
        self.load_s = time.time() - t0

    # public contract ---------------------------------------------------------
    @property
    def answer_token_ids(self) -> tuple[list[int], list[int]]:
        a = self.renderer.answers
        return list(a.true_ids), list(a.false_ids)

    def render_filter(self, doc: str, question: str) -> list[int]:
        head, tail = self.renderer.filter_parts(question)
        return head + self._ids(doc) + tail

    def render_join(self, anchor: str, partner: str, question: str) -> list[int]:
        head, mid, post = self.renderer.join_parts(question)
        return head + self._ids(anchor) + mid + self._ids(partner) + post

    def render_classify(self, doc: str, labels: list[str], instruction: str) -> list[int]:
        head, tail = self.renderer.classify_parts(instruction, list(labels))
        return head + self._ids(doc) + tail

    @_serialized
    def filter(self, docs, questions) -> np.ndarray:
        """Margins [n_docs, n_questions]; NaN for a NULL (None, empty, blank) document."""
        docs, questions = documents(docs), _strings(questions, "questions")
        self.tree.op += 1
        parts = [self.renderer.filter_parts(q) for q in questions]
        out = np.full((len(docs), len(questions)), np.nan)
        extra = sum(len(tail) for _, tail in parts)
        done = []
        for lo, toks in self._chunks(docs, extra):  # the next chunk is tokenized while this one runs
            reqs, where = [], []
            for q_i, (head, tail) in enumerate(parts):
                for d_i, ids in enumerate(toks, lo):
                    if ids is not None:
                        reqs.append(self._fit(d_i, head, ids, tail))
                        where.append((d_i, q_i))
            done.append((where, self._run(reqs, defer=True)))  # its last pass runs on into the next chunk
        self.stats["wall_s"] += self._drain()  # the last chunk's last pass
        for where, logits in done:
            for (d_i, q_i), m in zip(where, self._margins(logits)):
                out[d_i, q_i] = m
        self._stage("filter", questions, out)
        return out

    def score(self, docs, question: str) -> np.ndarray:
        """P(TRUE) = sigmoid(margin) per document; NaN for NULL."""
        return 1.0 / (1.0 + np.exp(-self.filter(docs, [question])[:, 0]))

    @_serialized
    def chain(self, docs, questions, short_circuit: bool = True) -> np.ndarray:
        """AND of predicates in this order. Margins [n_docs, n_q]; NaN where not evaluated.

        A document's KV stays pinned while its next predicate runs; with
        short_circuit a FALSE (margin <= 0) skips the rest for that document.
        """
        docs, questions = documents(docs), _strings(questions, "questions")
        self.tree.op += 1
        toks = self._tokenize(docs)
        out = np.full((len(docs), len(questions)), np.nan)
        parts = [self.renderer.filter_parts(q) for q in questions]
        live = [i for i, t in enumerate(toks) if t is not None]
        stages = [{"op": "filter", "question": q, "evaluated": 0, "passed": 0} for q in questions]
        for block in self._blocks(live, toks, parts[0][0]):
            pins = [self._pin(parts[0][0] + toks[i]) for i in block]
            try:
                if not short_circuit:  # every predicate on every document: one call, shared words of
                    self._chain_all(block, toks, parts, out, stages)  # the questions computed once
                    continue
                alive = block
                for q_i, (head, tail) in enumerate(parts):
                    reqs = [self._fit(i, head, toks[i], tail) for i in alive]
                    m = self._margins(self._run(reqs))
                    out[alive, q_i] = m
                    stages[q_i]["evaluated"] += len(alive)
                    stages[q_i]["passed"] += int((m > 0).sum())
                    if short_circuit:
                        alive = [i for i, v in zip(alive, m) if v > 0]
            finally:
                for node in pins:
                    self._unpin(node)
        self.stats["stages"].extend(stages)
        return out

    def _chain_all(self, block, toks, parts, out, stages):
        reqs = [self._fit(i, head, toks[i], tail) for head, tail in parts for i in block]
        m = self._margins(self._run(reqs)).reshape(len(parts), len(block))
        for q_i in range(len(parts)):
            out[block, q_i] = m[q_i]
            stages[q_i]["evaluated"] += len(block)
            stages[q_i]["passed"] += int((m[q_i] > 0).sum())

    @_serialized
    def join(self, anchors, partners, question: str) -> np.ndarray:
        """Margins [n_anchors, n_partners]; each anchor's KV computed once; NaN where either is NULL."""
        anchors, partners = documents(anchors, "anchors"), documents(partners, "partners")
        p_toks = self._tokenize(partners)
        out = np.full((len(anchors), len(partners)), np.nan)
        done = []
        for lo, a_toks in self._chunks(anchors):  # anchors tokenized a chunk ahead
            reqs, where = self._join_requests(a_toks, p_toks, question, row0=lo)
            done.append((lo, where, self._run(reqs, defer=True)))  # its last pass runs on into the next chunk
        self.stats["wall_s"] += self._drain()  # the last chunk's last pass
        for lo, where, logits in done:
            for (a_i, p_i), m in zip(where, self._margins(logits)):
                out[lo + a_i, p_i] = m
        self._stage("join", [question], out.reshape(-1, 1))
        return out

    @_serialized
    def join_ids(self, a_toks, p_toks, question: str) -> np.ndarray:
        """`join` on token ids (None entries give NaN)."""
        return self._join_ids(a_toks, p_toks, question)

    @_serialized
    def pairs(self, anchors, partners, question: str) -> np.ndarray:
        """Margins [n] of the pairs (anchors[i], partners[i]) in the join layout (`render_join`).

        NaN where either side is NULL. Pairs are evaluated in one call: a
        repeated anchor's prefix is computed once and shared by its partners.
        """
        anchors, partners = documents(anchors, "anchors"), documents(partners, "partners")
        if len(anchors) != len(partners):
            raise ValueError(f"pairs needs as many partners as anchors, got {len(anchors)} and {len(partners)}")
        self.tree.op += 1
        distinct: dict[str, int] = {}
        for a in anchors:
            if a is not None:
                distinct.setdefault(a, len(distinct))
        a_ids = self._tokenize(list(distinct))
        p_index: dict[str, int] = {}  # a partner repeats once per anchor: tokenized once
        for p in partners:
            if p is not None:
                p_index.setdefault(p, len(p_index))
        p_ids = self._tokenize(list(p_index))
        p_toks = [None if p is None else p_ids[p_index[p]] for p in partners]
        head, mid, post = self.renderer.join_parts(question)
        pre = [head + a + mid for a in a_ids]  # one prefix list per distinct anchor: one tree lookup
        reqs, where = [], []
        for i, (a, p) in enumerate(zip(anchors, p_toks)):
            if a is not None and p is not None:
                k = distinct[a]
                reqs.append(self._pair_request(i, pre[k], a_ids[k], head, mid, p, post))
                where.append(i)
        out = np.full(len(anchors), np.nan)
        out[where] = self._margins(self._run(reqs))
        self._stage("join", [question], out.reshape(-1, 1))
        return out

    def _join_ids(self, a_toks, p_toks, question: str) -> np.ndarray:
        reqs, where = self._join_requests(a_toks, p_toks, question)
        out = np.full((len(a_toks), len(p_toks)), np.nan)
        for (a_i, p_i), m in zip(where, self._margins(self._run(reqs))):
            out[a_i, p_i] = m
        return out

    def _join_requests(self, a_toks, p_toks, question: str, row0: int = 0):
        """(requests, (anchor, partner) of each) of a join; every partner's request shares its anchor's prefix."""
        self.tree.op += 1
        head, mid, post = self.renderer.join_parts(question)
        reqs, where = [], []
        for a_i, a in enumerate(a_toks):
            if a is None:
                continue
            pre = head + a + mid  # built once per anchor: every partner's request shares this list
            for p_i, p in enumerate(p_toks):
                if p is not None:
                    reqs.append(self._pair_request(row0 + a_i, pre, a, head, mid, p, post))
                    where.append((a_i, p_i))
        return reqs, where

    def _pair_request(self, row, pre, a, head, mid, p, post):
        if len(pre) + len(p) + len(post) <= self._limit():
            return pre, p + post
        return self._fit_join(row, head, a, mid, p, post)

    @_serialized
    def classify(self, docs, labels, instruction: str = "Which option describes the document best?"):
        """(label index per doc, -1 for NULL; probabilities [n_docs, n_labels], NaN rows for NULL)."""
        docs, labels = documents(docs), _strings(labels, "labels")
        self.tree.op += 1
        head, tail = self.renderer.classify_parts(instruction, labels)
        toks = self._tokenize(docs)
        reqs, rows = [], []
        for i, ids in enumerate(toks):
            if ids is not None:
                reqs.append(self._fit(i, head, ids, tail))
                rows.append(i)
        probs = np.full((len(docs), len(labels)), np.nan)
        idx = np.full(len(docs), -1, dtype=np.int64)
        if reqs:
            logits = torch.from_numpy(self._run(reqs))
            a = self.renderer.answers
            per = torch.stack([torch.logsumexp(logits[:, a.columns(a.letter_ids[k])], dim=-1)
                               for k in range(len(labels))], dim=-1)
            p = torch.softmax(per, dim=-1).numpy()
            probs[rows] = p
            idx[rows] = p.argmax(-1)
        self.stats["stages"].append({"op": "classify", "evaluated": len(rows), "passed": len(rows)})
        return idx, probs

    @_serialized
    def count_tokens(self, texts) -> list[int]:
        return [0 if t is None else len(t) for t in self._tokenize(documents(texts, "texts"))]

    def reset_stats(self):
        self.stats = {"requested_tokens": 0, "fresh_tokens": 0, "reused_tokens": 0,
                      "kv_regret_tokens": 0, "min_fresh_tokens": 0, "forward_passes": 0,
                      "requests": 0, "wall_s": 0.0, "truncated_rows": 0, "stages": [],
                      **dict.fromkeys(TREE_COUNTERS, 0)}
        self._tree_seen = dict(self.tree.stats)

    # internals ---------------------------------------------------------------
    def _new_tree(self):
        self.pool = PagePool(self.rt.kv_slots)
        self.tree = PrefixTree(self.pool)
        self._tree_seen = dict(self.tree.stats)

    def _ids(self, text: str) -> list[int]:
        """Ids of one document as rendered (no NULL rule: an empty text renders as nothing)."""
        documents([text], "document")
        return self.renderer.encode_docs([text])[0] if text else []

    def _tokenize(self, docs: list[str | None]) -> list[list[int] | None]:
        """Ids of checked documents (see `prompts.documents`); None stays None."""
        return self.renderer.encode_batch(docs)

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

    def _limit(self) -> int:
        return self.rt.max_position

    def _fit(self, row, head, doc, tail):
        """(prefix, suffix) of a document prompt, truncating the document if allowed."""
        over = len(head) + len(doc) + len(tail) - self._limit()
        if over > 0:
            if self.config.on_overflow != "truncate" or over > len(doc):
                raise PromptTooLong(row, len(head) + len(doc) + len(tail), self._limit())
            doc = doc[: len(doc) - over]
            self.stats["truncated_rows"] += 1
        return head + doc, tail

    def _fit_join(self, row, head, a, mid, p, post):
        over = len(head) + len(a) + len(mid) + len(p) + len(post) - self._limit()
        if over > 0:
            if self.config.on_overflow != "truncate" or over > len(a) + len(p):
                raise PromptTooLong(row, len(head) + len(a) + len(mid) + len(p) + len(post), self._limit())
            cut_a = min(over, len(a))
            a, p = a[: len(a) - cut_a], p[: len(p) - (over - cut_a)]
            self.stats["truncated_rows"] += 1
        return head + a + mid, p + post

    def _blocks(self, live, toks, head):
        """Documents per chain block: as many as half the pool can keep pinned."""
        if not live:
            return
        avg = max(1, len(head) + sum(len(toks[i]) for i in live) // len(live))
        per = max(1, (self.rt.kv_slots // 2) // (avg + 32))
        for s in range(0, len(live), per):
            yield live[s:s + per]

    def _pin(self, tokens) -> Node:
        node = self.tree.insert(tokens)
        for n in node.path():
            n.pending += 1
        return node

    def _unpin(self, node: Node):
        for n in node.path():
            n.pending -= 1
            if n.pending == 0:
                self.tree.push(n)
        self.tree.unlink_upward(node)

    def _drain(self):
        """Read every launched pass (its logits land in the array `_run` returned); returns the seconds waited."""
        t0 = time.time()
        while self._in_flight:
            self._read(*self._in_flight.popleft())
        return time.time() - t0

    @staticmethod
    def _read(launched, out: np.ndarray):
        out[launched.requests] = launched.wait()  # the one wait on the device per pass

    def _margins(self, logits: np.ndarray) -> np.ndarray:
        if len(logits) == 0:
            return np.zeros(0)
        a = self.renderer.answers
        lg = torch.from_numpy(logits)
        m = torch.logsumexp(lg[:, a.columns(a.true_ids)], -1) - torch.logsumexp(lg[:, a.columns(a.false_ids)], -1)
        return m.double().numpy()

    def _stage(self, op, questions, out):
        for q_i, q in enumerate(questions):
            col = out[:, q_i]
            ok = ~np.isnan(col)
            self.stats["stages"].append({"op": op, "question": q, "evaluated": int(ok.sum()),
                                         "passed": int((col[ok] > 0).sum())})

    def _run(self, reqs: list[tuple[list[int], list[int]]], defer: bool = False) -> np.ndarray:
        """Answer-row logits [n_requests, n_head] for (prefix, suffix) requests.

        defer: return with the last pass still running; its rows are filled by
        the next `_run` (which launches its own first pass before it waits) or
        by `_drain`. Consecutive chunks of one operation so keep the device busy
        while the host prepares the next chunk.
        """
        t0 = time.time()
        n_head = len(self.renderer.answers.head_ids)
        out = np.zeros((len(reqs), n_head), dtype=np.float32)
        if not reqs:
            return out
        share = self.config.prefix_cache
        gc_on = gc.isenabled()
        gc.disable()  # millions of token ints: a full collection mid-call costs seconds
        try:
            ends = self._insert(reqs, share)
            return self._schedule(reqs, ends, share, out, t0, defer)
        finally:
            if gc_on:
                gc.enable()

    def _insert(self, reqs, share: bool) -> list[Node]:
        """Tree node of each request's end; a prefix list shared by requests is looked up once."""
        ends: list[Node] = []
        by_id: dict[int, Node] = {}
        by_tokens: dict[tuple, Node] = {}
        for i, (prefix, suffix) in enumerate(reqs):
            if not share:
                ends.append(self.tree.insert(prefix + suffix, at=self.tree.root(("solo", i))))
                continue
            at = by_id.get(id(prefix))
            if at is None:
                key = tuple(prefix)
                at = by_tokens.get(key)
                if at is None:
                    at = by_tokens[key] = self.tree.insert(prefix)
                    self.tree.mark_prefix(at)  # a prefix (document, anchor) is worth keeping for later calls
                by_id[id(prefix)] = at
            ends.append(self.tree.insert(suffix, at=at) if suffix else at)
        return ends

    def _schedule(self, reqs, ends, share: bool, out: np.ndarray, t0: float, defer: bool) -> np.ndarray:
        sched = Scheduler(self.tree, ends, self.rt.token_budget, retain=share, ctx_budget=self.rt.ctx_budget)
        passes, last_log = 0, t0
        in_flight = self._in_flight
        try:
            while not sched.done:
                jobs = sched.next_pass()
                if not jobs:
                    raise RuntimeError("scheduler made no progress (a bug): no job could run")
                in_flight.append((self.runner.run(jobs), out))
                sched.finish(jobs)  # bookkeeping only: the next pass is planned while this one runs
                passes += 1
                if len(in_flight) > 1:
                    self._read(*in_flight.popleft())
                if time.time() - last_log > 10:
                    last_log = time.time()
                    log.info("engine: %d/%d prompts planned, %d passes, %.0f s",
                             sum(sched.served), len(reqs), passes, last_log - t0)
            if not defer:
                self._drain()
        except BaseException:
            in_flight.clear()  # (pinned host buffers stay valid until their copies finish)
            self._new_tree()  # bookkeeping of an interrupted call is not trusted
            raise
        if not share:
            for i in range(len(reqs)):
                self.tree.drop_root(("solo", i))
        self.tree.trim()
        for k, t in TREE_COUNTERS.items():
            self.stats[k] += self.tree.stats[t] - self._tree_seen.get(t, 0)
        self._tree_seen = dict(self.tree.stats)
        requested = sum(len(p) + len(s) for p, s in reqs)
        st = self.stats
        st["requested_tokens"] += requested
        st["fresh_tokens"] += sched.fresh
        st["reused_tokens"] += max(0, requested - sched.fresh)
        st["kv_regret_tokens"] += sched.regret
        st["min_fresh_tokens"] += sched.fresh - sched.regret
        st["forward_passes"] += passes
        st["requests"] += len(reqs)
        st["wall_s"] += time.time() - t0
        return out


def _strings(xs, what: str) -> list[str]:
    if isinstance(xs, str):
        return [xs]
    xs = list(xs)
    for i, x in enumerate(xs):
        if not isinstance(x, str):
            raise TypeError(f"{what}[{i}] must be a string, got {type(x).__name__}")
    return xs
