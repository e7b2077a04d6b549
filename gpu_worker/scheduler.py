"""Which tokens each forward pass computes: policy over the prefix tree, no torch.

Requests are served in depth-first order of the tree, so a shared prefix is
computed once, right before the requests that use it, and released soon
after its last user. A job computes one path of nodes as a single causal
sequence over the resident KV of its context node; it continues down a chain
while the next node has exactly one pending child (rows that extend earlier
rows become one sequence with several outputs). A job longer than the
budget left is cut at a node boundary made for it, and the cut part is kept
in the pool for the rest. Nodes whose KV later requests need are stored;
if the pool cannot hold them, the later requests recompute them (regret).
Optional KV (no pending user) is kept only for nodes inside a request's
prefix (a document, an anchor: what a later call can reuse), and only in free
pages: a single-use suffix never fills the pool.

A pass reads the KV of its jobs' contexts; their distinct tokens (a shared
base counted once, see `base_of`) stay within `ctx_budget`, so the gathers
of the largest pass any call can plan fit in the memory set aside for them.

A job's context may be computed by an earlier job of the same pass (an
anchor and its partners, a partners' shared first word and the partners
under it): every layer stores the whole pass's K and V before its attention
reads any context, so such KV is in the pool when a later sequence of the
pass reads it. Only nodes the pass stores because later requests need them
serve so (`Job.ctx_slots` then names their slots); a node the pass computes
without storing is not shared, its dependents wait for the next pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .prefix_tree import Node, PrefixTree

MIN_CHUNK = 16


@dataclass
class Job:
    ctx: Node | None  # deepest resident node before the job (None: from position 0)
    nodes: list[Node]
    store: list[list[int] | None]  # slots per node, None where its KV is not kept
    outputs: list[tuple[int, int]] = field(default_factory=list)  # (token offset, request)
    optional: set[int] = field(default_factory=set)  # indices of nodes stored with no pending user
    ctx_slots: list[list[int]] | None = None  # slots of each context node (root down), when some are stored in this pass
    ctx_flat: object = None  # int64 host tensor of the whole context's slots, kept up to date by the caller (decode)
    shared: bool = True  # its base's KV read once with the other jobs below that base (off: read for this job alone)

    @property
    def start(self) -> int:
        return self.nodes[0].start

    @property
    def num_tokens(self) -> int:
        return sum(len(n.tokens) for n in self.nodes)


class Scheduler:
    """One call's worth of requests, each given by the tree node it ends at."""

    def __init__(self, tree: PrefixTree, ends: list[Node], budget: int, retain: bool = True,
                 ctx_budget: int | None = None):
        self.tree, self.budget, self.retain = tree, budget, retain
        self.ctx_budget = ctx_budget if ctx_budget is not None else 16 * budget
        self.ends: list[Node] = []
        self.served: list[bool] = []
        self.left = 0  # requests not served yet
        self.pass_id = 0
        self.fresh = 0
        self.regret = 0  # tokens this operation computes a second time
        self.order: list[int] = []
        self.cursor = 0
        self.passes_planned = 0
        self.add(ends)

    def add(self, ends: list[Node]):
        """More requests (numbered on from the ones before), served after those already ordered: an
        operation's next chunk joins the passes its previous chunk has left, so they stay full."""
        r0 = len(self.ends)
        self.ends.extend(ends)
        self.served.extend([False] * len(ends))
        self.left += len(ends)
        for r, node in enumerate(ends, r0):
            node.ends.append(r)
            for n in node.path():
                n.pending += 1
        self.order.extend(self._dfs_order(ends, r0))

    def _dfs_order(self, ends: list[Node], r0: int) -> list[int]:
        """Requests of `ends` in depth-first order of the tree (each ends at exactly one node).

        Walks only the nodes of these requests (each once), not the tree; r0: the first one's number
        (a node's earlier requests are ordered already).
        """
        kids: dict[int, list[Node]] = {}  # id(node) -> its children on these requests' paths
        seen: set[int] = set()
        tops: list[Node] = []
        for node in ends:
            n = node
            while id(n) not in seen:
                seen.add(id(n))
                if n.parent is None:
                    tops.append(n)
                    break
                kids.setdefault(id(n.parent), []).append(n)
                n = n.parent
        out: list[int] = []
        stack = tops[::-1]
        while stack:
            n = stack.pop()
            out.extend(r for r in n.ends if r >= r0)
            below = kids.get(id(n)) or []
            stack.extend(sorted(below, key=lambda c: c.tokens[0], reverse=True))
        return out

    @property
    def done(self) -> bool:
        return self.cursor >= len(self.order)

    def next_pass(self, max_jobs: int = 0) -> list[Job]:
        """The jobs of the next pass: as many as its token budget holds, and at most `max_jobs` when > 0."""
        self.passes_planned += 1
        self.tree.passes += 1  # pass ids are unique over the tree's life
        self.pass_id = self.tree.passes
        jobs: list[Job] = []
        room = self.budget
        self._ctx_ids, self._base_ids, self._ctx_tokens, self._stop = set(), set(), 0, False
        self._planned: dict[int, list[int]] = {}  # id(node) -> slots it is stored in by a job of this pass
        i = self.cursor
        while i < len(self.order) and room >= MIN_CHUNK:
            r = self.order[i]
            i += 1
            if self.served[r]:
                continue
            job = self._job_for(self.ends[r], room, first=not jobs)
            if self._stop:
                break
            if job is None:
                continue
            jobs.append(job)
            room -= job.num_tokens
            if len(jobs) == max_jobs:
                break
        while self.cursor < len(self.order) and self.served[self.order[self.cursor]]:
            self.cursor += 1
        return jobs

    def _job_for(self, end: Node, room: int, first: bool) -> Job | None:
        path = end.path()
        planned = self._planned
        k = 0
        while k < len(path) and (path[k].slots is not None or id(path[k]) in planned):
            k += 1
        if k == len(path) and id(end) in planned:
            return None  # computed by a job of this pass that does not serve it (cannot happen: it would)
        if k == len(path):  # fully resident: recompute the last token for its logits
            if len(end.tokens) > 1:
                self.tree.split(end, len(end.tokens) - 1)
                path = end.path()
            k = len(path) - 1
        todo = path[k:]
        ctx = path[k - 1] if k > 0 else None
        if any(n.inflight == self.pass_id for n in todo):
            return None  # computed by another job of this pass without being stored for others
        if ctx is not None and not self._ctx_fits(ctx, first):
            self._stop = True
            return None
        last = todo[-1]
        while True:  # follow a chain of single pending children
            live = [c for c in last.children.values() if c.pending > 0 and c.slots is None]
            if len(live) != 1 or live[0].inflight == self.pass_id:
                break
            last = live[0]
            todo.append(last)
        job = None
        total = sum(len(n.tokens) for n in todo)
        if total > room:
            pool = self.tree.pool
            if not first and 4 * pool.pages_for(total) > pool.num_pages and not pool.can_allocate(total):
                # a chain over a quarter of the pool, started in the leftover room of a pass, would pin
                # pages that chains started before it still need: the next pass begins with it instead
                self._stop = True
                return None
            cut = self._cut(todo, room)
            job = Job(ctx, cut, [None] * len(cut))
            if not self._store_all(job):
                if not first:
                    return None
                job = None  # the pool cannot keep a cut: run the chain whole, over budget
        if job is None:
            chain = last.path()[k:]
            job = Job(ctx, chain, [None] * len(chain))
            if not self._store_some(job) and not first:
                for slots in job.store:  # the pool is held by KV this pass still reads: wait for it
                    if slots is not None:
                        self.tree.pool.release(slots)
                self._stop = True  # ends the pass
                return None
        if ctx is not None:
            self.tree.mark_read(ctx)
            path = ctx.path()
            if any(id(n) in planned for n in path):  # per node, not flattened: an anchor's slots are one list
                job.ctx_slots = [n.slots if n.slots is not None else planned[id(n)] for n in path]
        for idx, (n, slots) in enumerate(zip(job.nodes, job.store)):
            if slots is not None and n.slots is None and idx not in job.optional:
                planned[id(n)] = slots  # needed later: a later job of this pass may read it
        for n in job.nodes:
            n.inflight = self.pass_id
            if n.op == self.tree.op:
                self.regret += len(n.tokens)
            n.op = self.tree.op
        off = 0
        for n in job.nodes:
            off += len(n.tokens)
            for r in n.ends:
                if not self.served[r]:
                    job.outputs.append((off - 1, r))
                    self.served[r] = True
                    self.left -= 1
        self.fresh += job.num_tokens
        return job

    def _ctx_fits(self, ctx: Node, first: bool) -> bool:
        """Count the context this job reads against the pass's ctx_budget (the first job always fits)."""
        if id(ctx) in self._ctx_ids:
            return True
        base = base_of(ctx)
        cost = ctx.end - base.end + (0 if id(base) in self._base_ids else base.end)
        if not first and self._ctx_tokens + cost > self.ctx_budget:
            return False
        self._ctx_ids.add(id(ctx))
        self._base_ids.add(id(base))
        self._ctx_tokens += cost
        return True

    def _cut(self, todo: list[Node], room: int) -> list[Node]:
        """Split the chain so that its first part has exactly `room` tokens."""
        acc = 0
        for idx, n in enumerate(todo):
            if acc + len(n.tokens) >= room:
                k = room - acc
                if k < len(n.tokens):
                    return todo[:idx] + [self.tree.split(n, k)]
                return todo[: idx + 1]
            acc += len(n.tokens)
        return todo

    def _users_after(self, job: Job) -> list[int]:
        """Pending users of each job node that this job does not serve."""
        served_below = 0
        out = [0] * len(job.nodes)
        for idx in range(len(job.nodes) - 1, -1, -1):
            n = job.nodes[idx]
            served_below += sum(1 for r in n.ends if not self.served[r])
            out[idx] = n.pending - served_below
        return out

    def _store_all(self, job: Job) -> bool:
        """Keep every node of a cut (the rest of the chain needs them), or none."""
        for idx, n in enumerate(job.nodes):
            slots = self.tree.allocate(len(n.tokens))
            if slots is None:
                for s in job.store[:idx]:
                    self.tree.pool.release(s)
                job.store = [None] * len(job.nodes)
                return False
            job.store[idx] = slots
        return True

    def _store_some(self, job: Job) -> bool:
        """Keep KV prefix-closed: needed nodes may evict; optional retention (prefix nodes only,
        where a later call can reuse them) takes free pages and never evicts. False when a node
        later requests need could not be kept (they would recompute it)."""
        after = self._users_after(job)
        for idx, n in enumerate(job.nodes):
            if n.slots is not None:  # recomputed for its logits only; KV already kept
                continue
            if after[idx] > 0:
                slots = self.tree.allocate(len(n.tokens))
                if slots is None:
                    return False
            elif self.retain and n.prefix and self.tree.pool.can_allocate(len(n.tokens)):
                slots = self.tree.pool.allocate(len(n.tokens))
                job.optional.add(idx)
            else:
                slots = None
            if slots is None:
                break
            job.store[idx] = slots
        return True

    def finish(self, jobs: list[Job]):
        """After the pass ran: stored nodes become resident; served requests unpin (after every job's
        nodes are resident: a job may have read a context another job of the pass stored)."""
        tree = self.tree
        for job in jobs:
            for idx, (n, slots) in enumerate(zip(job.nodes, job.store)):
                if slots is not None and n.slots is None:
                    tree.set_slots(n, slots, optional=idx in job.optional)
        for job in jobs:
            tree.touch(job.nodes[-1])  # the job's nodes are all on this path
            for _, r in job.outputs:
                end = self.ends[r]
                end.ends.remove(r)
                for n in end.path():
                    n.pending -= 1
                    if n.pending == 0:
                        tree.push(n)
                tree.unlink_upward(end)


def base_of(ctx: Node) -> Node:
    """The deepest prefix node at or above `ctx` (an anchor under its partners' shared words):
    contexts below one base share its KV in a pass. `ctx` itself when no prefix node is above it."""
    n = ctx
    while not n.prefix and n.parent is not None:
        n = n.parent
    return n if n.prefix else ctx
