"""One call's requests as forward passes: tree inserts, the scheduler's passes launched one ahead, logits read.

A part of `Engine` (docs/architecture.md): it uses the engine's prefix tree,
runner, budgets, stats and its queue of launched passes (`_in_flight`).
"""
from __future__ import annotations

import gc
import logging
import time

import numpy as np

from .prefix_tree import Node
from .scheduler import Scheduler

log = logging.getLogger("gpu_worker")

TREE_COUNTERS = {"kv_kept_tokens": "kept_tokens", "kv_kept_unread_tokens": "kept_unread_tokens",
                 "evict_visited": "evict_visited", "evicted_nodes": "evicted_nodes"}


class Passes:
    """`_run(requests)` -> answer-row logits; `_drain()` reads passes left running by `_run(defer=True)`."""

    def _drain(self):
        """Read every launched pass (its logits land in the array `_run` returned); returns the seconds waited."""
        t0 = time.time()
        while self._in_flight:
            self._read(*self._in_flight.popleft())
        return time.time() - t0

    @staticmethod
    def _read(launched, out: np.ndarray):
        out[launched.requests] = launched.wait()  # the one wait on the device per pass

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
