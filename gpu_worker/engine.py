"""The prefill-only engine: requests in, answer-token margins out.

A step is three lines: the scheduler picks the jobs of a pass, the runner
computes them, the scheduler marks what became resident. Everything shared
(system prompt, a document under several predicates, a join anchor, rows
extending earlier rows) lives once in the prefix tree.
"""
from __future__ import annotations

import gc
import logging
import time
from collections import deque

import numpy as np
import torch

from . import weights
from .config import EngineConfig
from .kv_pool import PagePool
from .prefix_tree import Node, PrefixTree
from .prompts import PromptRenderer, PromptTooLong
from .runner import KVCache, ModelRunner
from .runtime import Runtime
from .scheduler import Scheduler

log = logging.getLogger("gpu_worker")


class Engine:
    """Prefill-only scoring engine (see DESIGN.md, "Executor engine").

    Examples
    --------
    >>> from gpu_worker import Engine, EngineConfig
    >>> eng = Engine(EngineConfig(model="tiny-llama-random"))
    >>> eng.filter(["a red apple"], ["Is the document about fruit?"]).shape
    (1, 1)
    """

    def __init__(self, config: EngineConfig | None = None, **kw):
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
        return head + self.renderer.encode_batch([doc])[0] + tail

    def render_join(self, anchor: str, partner: str, question: str) -> list[int]:
        head, mid, post = self.renderer.join_parts(question)
        a, p = self.renderer.encode_batch([anchor, partner])
        return head + a + mid + p + post

    def render_classify(self, doc: str, labels: list[str], instruction: str) -> list[int]:
        head, tail = self.renderer.classify_parts(instruction, list(labels))
        return head + self.renderer.encode_batch([doc])[0] + tail

    def filter(self, docs, questions) -> np.ndarray:
        """Margins [n_docs, n_questions]; NaN for a None document."""
        docs, questions = list(docs), _strings(questions, "questions")
        self.tree.op += 1
        toks = self.renderer.encode_batch(docs)
        reqs, where = [], []
        for q_i, q in enumerate(questions):
            head, tail = self.renderer.filter_parts(q)
            for d_i, ids in enumerate(toks):
                if ids is not None:
                    reqs.append(self._fit(d_i, head, ids, tail))
                    where.append((d_i, q_i))
        out = np.full((len(docs), len(questions)), np.nan)
        margins = self._margins(self._run(reqs))
        for (d_i, q_i), m in zip(where, margins):
            out[d_i, q_i] = m
        self._stage("filter", questions, out)
        return out

    def score(self, docs, question: str) -> np.ndarray:
        """P(TRUE) = sigmoid(margin) per document; NaN for None."""
        return 1.0 / (1.0 + np.exp(-self.filter(docs, [question])[:, 0]))

    def chain(self, docs, questions, short_circuit: bool = True) -> np.ndarray:
        """AND of predicates in this order. Margins [n_docs, n_q]; NaN where not evaluated.

        A document's KV stays pinned while its next predicate runs; with
        short_circuit a FALSE (margin <= 0) skips the rest for that document.
        """
        docs, questions = list(docs), _strings(questions, "questions")
        self.tree.op += 1
        toks = self.renderer.encode_batch(docs)
        out = np.full((len(docs), len(questions)), np.nan)
        parts = [self.renderer.filter_parts(q) for q in questions]
        live = [i for i, t in enumerate(toks) if t is not None]
        stages = [{"op": "filter", "question": q, "evaluated": 0, "passed": 0} for q in questions]
        for block in self._blocks(live, toks, parts[0][0]):
            pins = [self._pin(parts[0][0] + toks[i]) for i in block]
            try:
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

    def join(self, anchors, partners, question: str) -> np.ndarray:
        """Margins [n_anchors, n_partners]; each anchor's KV computed once."""
        anchors, partners = list(anchors), list(partners)
        a_toks = self.renderer.encode_batch(anchors)
        p_toks = self.renderer.encode_batch(partners)
        out = self.join_ids(a_toks, p_toks, question)
        self._stage("join", [question], out.reshape(-1, 1))
        return out

    def join_ids(self, a_toks, p_toks, question: str) -> np.ndarray:
        """`join` on token ids (None entries give NaN); each anchor's prefix list is built once."""
        self.tree.op += 1
        head, mid, post = self.renderer.join_parts(question)
        reqs, where = [], []
        for a_i, a in enumerate(a_toks):
            if a is None:
                continue
            prefix = None
            for p_i, p in enumerate(p_toks):
                if p is None:
                    continue
                pre, suf = self._fit_join(a_i, head, a, mid, p, post)
                if prefix is not None and len(pre) == len(prefix):
                    pre = prefix  # the same list for every partner: one tree lookup per anchor
                prefix = pre
                reqs.append((pre, suf))
                where.append((a_i, p_i))
        out = np.full((len(a_toks), len(p_toks)), np.nan)
        for (a_i, p_i), m in zip(where, self._margins(self._run(reqs))):
            out[a_i, p_i] = m
        return out

    def classify(self, docs, labels, instruction: str = "Which option describes the document best?"):
        """(label index per doc, -1 for None; probabilities [n_docs, n_labels], NaN rows for None)."""
        docs, labels = list(docs), _strings(labels, "labels")
        self.tree.op += 1
        head, tail = self.renderer.classify_parts(instruction, labels)
        toks = self.renderer.encode_batch(docs)
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

    def count_tokens(self, texts) -> list[int]:
        return [0 if t is None else len(t) for t in self.renderer.encode_batch(list(texts))]

    def reset_stats(self):
        self.stats = {"requested_tokens": 0, "fresh_tokens": 0, "reused_tokens": 0,
                      "kv_regret_tokens": 0, "min_fresh_tokens": 0, "forward_passes": 0,
                      "requests": 0, "wall_s": 0.0, "truncated_rows": 0, "stages": []}

    # internals ---------------------------------------------------------------
    def _new_tree(self):
        self.pool = PagePool(self.rt.kv_slots)
        self.tree = PrefixTree(self.pool)

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

    def _run(self, reqs: list[tuple[list[int], list[int]]]) -> np.ndarray:
        """Answer-row logits [n_requests, n_head] for (prefix, suffix) requests."""
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
            return self._schedule(reqs, ends, share, out, t0)
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
                by_id[id(prefix)] = at
            ends.append(self.tree.insert(suffix, at=at) if suffix else at)
        return ends

    def _schedule(self, reqs, ends, share: bool, out: np.ndarray, t0: float) -> np.ndarray:
        sched = Scheduler(self.tree, ends, self.rt.token_budget, retain=share)
        passes, last_log = 0, t0
        in_flight: deque = deque()  # launched passes whose logits are not read yet
        try:
            while not sched.done:
                jobs = sched.next_pass()
                if not jobs:
                    raise RuntimeError("scheduler made no progress (a bug): no job could run")
                in_flight.append(self.runner.run(jobs))
                sched.finish(jobs)  # bookkeeping only: the next pass is planned while this one runs
                passes += 1
                if len(in_flight) > 1:
                    self._read(in_flight.popleft(), out)
                if time.time() - last_log > 10:
                    last_log = time.time()
                    log.info("engine: %d/%d prompts planned, %d passes, %.0f s",
                             sum(sched.served), len(reqs), passes, last_log - t0)
            while in_flight:
                self._read(in_flight.popleft(), out)
        except BaseException:
            self._new_tree()  # bookkeeping of an interrupted call is not trusted
            raise
        if not share:
            for i in range(len(reqs)):
                self.tree.drop_root(("solo", i))
        self.tree.prune()
        self.tree.trim()
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
