"""One call's requests as forward passes: tree inserts, the scheduler's passes launched ahead of the device, logits read."""
from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections import deque

import numpy as np
import torch

from .counters import TREE_COUNTERS, Counters
from .kv_pool import PagePool
from .prefix_tree import Node, PrefixTree
from .runner import ModelRunner, to_device_aligned
from .scheduler import Scheduler

log = logging.getLogger("gpu_worker")

# passes launched and not yet read: the host plans up to this many passes ahead of the device, so the
# preparation of an operation's next chunk (its requests inserted, its first pass planned) overlaps
# with this many passes of the device's work. Stream order keeps reused KV slots safe.
IN_FLIGHT = 2
# jobs of the first pass launched while nothing is in flight (the device idle), on a GPU: the device starts
# after a plan of this many jobs instead of a full pass's (a join's first pass holds ~2,000 partner jobs,
# ~25 us each to plan and build on the host), and the next pass is planned while it runs
FIRST_PASS_JOBS = 256


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the block (as it was after). An operation's prefix tree,
    requests and token lists are millions of objects: a full collection mid-operation costs 0.2-0.4 s
    (BIO-2 on an H200 host), and between two chunks, where the device has less than that queued, the
    device waits for it. Cycles an operation leaves are collected after it, when the collector runs again."""
    on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if on:
            gc.enable()


class Passes:
    """`run(requests)` -> answer-row logits; `drain()` reads passes left running by `run(defer=True)`.

    Holds the KV page pool and the prefix tree over it (what is resident), the
    model runner that launches a pass, the budgets of a pass, the engine's
    counters (updated in place) and the queue of launched passes not read yet.
    """

    def __init__(self, runner: ModelRunner, kv_slots: int, token_budget: int, ctx_budget: int, n_head: int,
                 share: bool, stats: Counters, first_jobs: int = 0):
        self.runner = runner
        self.first_jobs = first_jobs  # most jobs of a pass launched while none is in flight, 0: no limit
        self.kv_slots, self.token_budget, self.ctx_budget = kv_slots, token_budget, ctx_budget
        self.n_head = n_head  # logits per request (the answer tokens' columns)
        self.share = share  # prefix caching: requests share their common prefixes
        self.stats = stats
        self.in_flight: deque = deque()  # (Launched, logits array it fills) of passes not read yet
        self.new_tree()

    def new_tree(self):
        """An empty pool and tree (also after an interrupted call, whose bookkeeping is not trusted)."""
        self.pool = PagePool(self.kv_slots)
        self.tree = PrefixTree(self.pool)
        self.tree_seen = dict(self.tree.stats)

    def drain(self) -> float:
        """Read every launched pass (its logits land in the array `run` returned); returns the seconds waited."""
        t0 = time.time()
        while self.in_flight:
            self.read(*self.in_flight.popleft())
        return time.time() - t0

    @staticmethod
    def read(launched, out):
        """The pass's rows into `out`: a host array (the one wait on the device per pass), or a tensor on
        the device (`serve`: copied there, behind the pass, with no wait)."""
        if isinstance(out, torch.Tensor):
            rows = to_device_aligned([torch.tensor(launched.requests, dtype=torch.long)], out.device)[0]
            out[rows] = launched.logits.float()  # (through pinned memory: a pageable copy would wait)
            return
        out[launched.requests] = launched.wait()

    def pin(self, tokens) -> Node:
        """Insert `tokens` and keep their KV resident until `unpin` (a chain's document between predicates)."""
        node = self.tree.insert(tokens)
        for n in node.path():
            n.pending += 1
        return node

    def hold(self, node: Node):
        """Keep the KV of `node` (already inserted) and of its path resident until `unpin`."""
        for n in node.path():
            n.pending += 1

    def unpin(self, node: Node):
        for n in node.path():
            n.pending -= 1
            if n.pending == 0:
                self.tree.push(n)
        self.tree.unlink_upward(node)

    def run(self, reqs: list[tuple[list[int], list[int]]], defer: bool = False) -> np.ndarray:
        """Answer-row logits [n_requests, n_head] for (prefix, suffix) requests.

        defer: return with the last passes (up to IN_FLIGHT) still running; their
        rows are filled by the next `run` (which launches its own first pass
        before it waits) or by `drain`. Consecutive chunks of one operation so keep the device busy
        while the host prepares the next chunk.
        """
        t0 = time.time()
        out = np.zeros((len(reqs), self.n_head), dtype=np.float32)
        if not reqs:
            return out
        with collector_paused():
            ends = self._insert(reqs)
            return self._schedule(reqs, ends, out, t0, defer)

    def _insert(self, reqs) -> list[Node]:
        """Tree node of each request's end; a prefix list shared by requests is looked up once."""
        ends: list[Node] = []
        by_id: dict[int, Node] = {}
        by_tokens: dict[tuple, Node] = {}
        for i, (prefix, suffix) in enumerate(reqs):
            if not self.share:
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

    def _schedule(self, reqs, ends, out: np.ndarray, t0: float, defer: bool) -> np.ndarray:
        sched = Scheduler(self.tree, ends, self.token_budget, retain=self.share, ctx_budget=self.ctx_budget)
        try:
            passes = self._launch(sched, out, t0, len(reqs))
            if not defer:
                self.drain()
        except BaseException:
            self._abandon()
            raise
        if not self.share:
            for i in range(len(reqs)):
                self.tree.drop_root(("solo", i))
        self.tree.trim()
        self._count(sum(len(p) + len(s) for p, s in reqs), len(reqs), sched, passes, t0)
        return out

    def serve(self, ends: list[Node], requested: int, width: int) -> torch.Tensor:
        """Logits [len(ends), width] float32 on the runner's device at the end of each inserted request (width:
        the vocabulary for a decode's prompts, which then run with the full head), filled behind the passes:
        nothing here waits for them (a decode's admission picks its first tokens there); counted as `run`
        does."""
        t0 = time.time()
        out = torch.empty((len(ends), width), dtype=torch.float32, device=self.runner.device)
        if not ends:
            return out
        with collector_paused():
            sched = Scheduler(self.tree, ends, self.token_budget, retain=self.share, ctx_budget=self.ctx_budget)
            try:
                passes = self._launch(sched, out, t0, len(ends), full=width != self.n_head)
                self.drain()
            except BaseException:
                self._abandon()
                raise
            self._count(requested, len(ends), sched, passes, t0)
        return out

    def _launch(self, sched: Scheduler, out: np.ndarray, t0: float, total: int, hold: bool = False,
                full: bool = False) -> int:
        """Plans and launches the scheduler's passes; returns how many. hold: stop while the requests
        left are no more than a pass serves on average (they wait for the next chunk's). full: the
        passes' logits over the whole vocabulary."""
        passes, last_log = 0, t0
        in_flight = self.in_flight
        while not sched.done:
            if hold and sched.passes_planned and sched.left <= (len(sched.ends) - sched.left) // sched.passes_planned:
                break
            jobs = sched.next_pass(0 if in_flight else self.first_jobs)
            if not jobs:
                raise RuntimeError("scheduler made no progress (a bug): no job could run")
            in_flight.append((self.runner.run(jobs, full, on_device=isinstance(out, torch.Tensor)), out))
            sched.finish(jobs)  # bookkeeping only: the next pass is planned while this one runs
            passes += 1
            if len(in_flight) > IN_FLIGHT:
                self.read(*in_flight.popleft())
            if time.time() - last_log > 10:
                last_log = time.time()
                log.info("engine: %d/%d prompts planned, %d passes, %.0f s",
                         total - sched.left, total, passes, last_log - t0)
        return passes

    def _abandon(self):
        self.in_flight.clear()  # (pinned host buffers stay valid until their copies finish)
        self.new_tree()

    def stream(self, capacity: int) -> "Stream":
        """An operation's requests in chunks through one scheduler (`Stream`): a chunk's last requests
        share passes with the next chunk's first, so every pass but the operation's last is full."""
        return Stream(self, capacity)

    def _count(self, requested: int, n_reqs: int, sched: Scheduler, passes: int, t0: float):
        for k, t in TREE_COUNTERS.items():
            self.stats[k] += self.tree.stats[t] - self.tree_seen.get(t, 0)
        self.tree_seen = dict(self.tree.stats)
        st = self.stats
        st.requested_tokens += requested
        st.fresh_tokens += sched.fresh
        st.reused_tokens += max(0, requested - sched.fresh)
        st.kv_regret_tokens += sched.regret
        st.min_fresh_tokens += sched.fresh - sched.regret
        st.forward_passes += passes
        st.requests += n_reqs
        st.wall_s += time.time() - t0


class Stream:
    """One operation's requests added chunk by chunk to one scheduler (prefix caching on).

    `add` inserts a chunk's requests and launches passes while more than about
    one pass's requests remain, so the rest share the next chunk's first pass
    and the host prepares that chunk while the device runs passes already
    launched (a chunk's own last pass, mostly empty, left the device waiting on
    the host). `close` launches the rest and reads every pass. Holds the
    answer-row logits of every request (`out`, rows in the order added).
    """

    def __init__(self, passes: Passes, capacity: int):
        if not passes.share:
            raise ValueError("a stream needs prefix caching (requests share one tree)")
        self.passes = passes
        self.out = np.zeros((capacity, passes.n_head), dtype=np.float32)
        self.sched = Scheduler(passes.tree, [], passes.token_budget, retain=True, ctx_budget=passes.ctx_budget)
        self.n = self.requested = self.launched = 0
        self.touched = False  # the tree holds something of this stream's
        self.t0 = time.time()

    def add(self, reqs: list[tuple[list[int], list[int]]]) -> tuple[int, int]:
        """Rows [lo, hi) of `out` that answer `reqs`; passes launched while more than a pass's requests are
        left. After an error here, or in the caller between two `add`s, call `abort`."""
        p = self.passes
        lo, hi = self.n, self.n + len(reqs)
        if hi > len(self.out):
            raise ValueError(f"stream of {len(self.out)} requests given {hi}")
        self.touched = True
        with collector_paused():
            p.tree.trim()
            self.sched.add(p._insert(reqs))
            self.n, self.requested = hi, self.requested + sum(len(a) + len(b) for a, b in reqs)
            self.launched += p._launch(self.sched, self.out, self.t0, self.n, hold=True)
        return lo, hi

    def abort(self):
        """An operation given up: its requests are dropped with the tree (their nodes are still counted
        as pending), the passes launched are not read. Before any `add`, nothing to undo."""
        if self.touched:
            self.passes._abandon()

    def close(self) -> np.ndarray:
        """Launches what is left, reads every pass; the logits of every request added (on an error,
        call `abort`)."""
        p = self.passes
        if not self.touched:
            return self.out[:0]
        with collector_paused():
            self.launched += p._launch(self.sched, self.out, self.t0, self.n)
            p.drain()
        p.tree.trim()
        p._count(self.requested, self.n, self.sched, self.launched, self.t0)
        return self.out[: self.n]
