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

    @property
    def start(self) -> int:
        return self.nodes[0].start

    @property
    def num_tokens(self) -> int:
        return sum(len(n.tokens) for n in self.nodes)


class Scheduler:
    """One call's worth of requests, each given by the tree node it ends at."""

    def __init__(self, tree: PrefixTree, ends: list[Node], budget: int, retain: bool = True):
        self.tree, self.budget, self.retain = tree, budget, retain
        self.ends = ends
        self.served = [False] * len(ends)
        self.pass_id = 0
        self.fresh = 0
        self.regret = 0  # tokens this operation computes a second time
        for r, node in enumerate(ends):
            node.ends.append(r)
            for n in node.path():
                n.pending += 1
        self.order = self._dfs_order()
        self.cursor = 0

    def _dfs_order(self) -> list[int]:
        """Requests in depth-first order of the tree (each ends at exactly one node)."""
        out: list[int] = []
        stack = list(self.tree.roots.values())[::-1]
        while stack:
            n = stack.pop()
            out.extend(n.ends)
            stack.extend(n.children[t] for t in sorted(n.children, reverse=True))
        return out

    @property
    def done(self) -> bool:
        return self.cursor >= len(self.order)

    def next_pass(self) -> list[Job]:
        self.tree.passes += 1  # pass ids are unique over the tree's life
        self.pass_id = self.tree.passes
        jobs: list[Job] = []
        room = self.budget
        i = self.cursor
        while i < len(self.order) and room >= MIN_CHUNK:
            r = self.order[i]
            i += 1
            if self.served[r]:
                continue
            job = self._job_for(self.ends[r], room, first=not jobs)
            if job is None:
                continue
            jobs.append(job)
            room -= job.num_tokens
        while self.cursor < len(self.order) and self.served[self.order[self.cursor]]:
            self.cursor += 1
        return jobs

    def _job_for(self, end: Node, room: int, first: bool) -> Job | None:
        path = end.path()
        k = 0
        while k < len(path) and path[k].slots is not None:
            k += 1
        if k == len(path):  # fully resident: recompute the last token for its logits
            if len(end.tokens) > 1:
                self.tree.split(end, len(end.tokens) - 1)
                path = end.path()
            k = len(path) - 1
        todo = path[k:]
        ctx = path[k - 1] if k > 0 else None
        if any(n.inflight == self.pass_id for n in todo) or (ctx is not None and ctx.inflight == self.pass_id):
            return None  # depends on KV this pass is computing
        last = todo[-1]
        while True:  # follow a chain of single pending children
            live = [c for c in last.children.values() if c.pending > 0 and c.slots is None]
            if len(live) != 1 or live[0].inflight == self.pass_id:
                break
            last = live[0]
            todo.append(last)
        job = None
        if sum(len(n.tokens) for n in todo) > room:
            cut = self._cut(todo, room)
            job = Job(ctx, cut, [None] * len(cut))
            if not self._store_all(job):
                if not first:
                    return None
                job = None  # the pool cannot keep a cut: run the chain whole, over budget
        if job is None:
            chain = last.path()[k:]
            job = Job(ctx, chain, [None] * len(chain))
            self._store_some(job)
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
        self.fresh += job.num_tokens
        return job

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

    def _store_some(self, job: Job):
        """Keep KV prefix-closed: needed nodes may evict, optional retention never does."""
        after = self._users_after(job)
        for idx, n in enumerate(job.nodes):
            if n.slots is not None:  # recomputed for its logits only; KV already kept
                continue
            if after[idx] > 0:
                slots = self.tree.allocate(len(n.tokens))
            elif self.retain and self.tree.pool.can_allocate(len(n.tokens)):
                slots = self.tree.pool.allocate(len(n.tokens))
            else:
                slots = None
            if slots is None:
                break
            job.store[idx] = slots

    def finish(self, jobs: list[Job]):
        """After the pass ran: stored nodes become resident; served requests unpin."""
        for job in jobs:
            for n, slots in zip(job.nodes, job.store):
                if slots is not None and n.slots is None:
                    n.slots = slots
                self.tree.touch(n)
            for _, r in job.outputs:
                for n in self.ends[r].path():
                    n.pending -= 1
                self.ends[r].ends.remove(r)

