"""Radix tree over token segments, shared by every request of an engine.

A node is a run of tokens after its parent's; `slots` holds their KV when the
node is resident. A node keeps its identity when split (the new node takes the
upper part), so a reference to a node always means "the prefix ending here".
Resident nodes form a subtree: only nodes with no resident child are evicted,
least recently used first, and never while a pending request pins them.
Pure bookkeeping: no torch.
"""
from __future__ import annotations

from .kv_pool import PagePool


class Node:
    __slots__ = ("tokens", "parent", "children", "slots", "start", "pending", "ends",
                 "last_used", "inflight", "op")

    def __init__(self, tokens: list[int], parent: "Node | None", start: int):
        self.tokens = tokens
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.slots: list[int] | None = None
        self.start = start  # absolute position of tokens[0]
        self.pending = 0  # unserved requests through this node (pins it)
        self.ends: list[int] = []  # requests of the current call ending here
        self.last_used = 0
        self.inflight = -1  # forward pass computing this node
        self.op = -1  # last engine operation that computed or lost this node

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)

    def path(self) -> list["Node"]:
        """Nodes from the first below the root down to self."""
        out, n = [], self
        while n.parent is not None:
            out.append(n)
            n = n.parent
        out.reverse()
        return out

    def context_slots(self) -> list[int]:
        """Slots of every token up to this node's end (all must be resident)."""
        out: list[int] = []
        for n in self.path():
            out.extend(n.slots)
        return out


class PrefixTree:
    def __init__(self, pool: PagePool):
        self.pool = pool
        self.roots: dict[object, Node] = {}
        self.clock = 0
        self.passes = 0
        self.op = 0  # id of the engine operation in progress (regret accounting)

    def root(self, key: object = 0) -> Node:
        if key not in self.roots:
            self.roots[key] = Node([], None, 0)
        return self.roots[key]

    def insert(self, tokens: list[int], at: Node | None = None) -> Node:
        """The node ending exactly after `tokens` (placed below `at`, or a root)."""
        node = at if at is not None else self.root()
        i = 0
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                new = Node(list(tokens[i:]), node, node.end)
                node.children[tokens[i]] = new
                return new
            seg = child.tokens
            j = 1
            lim = min(len(seg), len(tokens) - i)
            while j < lim and seg[j] == tokens[i + j]:
                j += 1
            if j < len(seg):
                child = self.split(child, j)
            node, i = child, i + j
        return node

    def split(self, node: Node, k: int) -> Node:
        """Cut `node` after k tokens; returns the new upper node (node keeps its end)."""
        assert 0 < k < len(node.tokens)
        parent = node.parent
        upper = Node(node.tokens[:k], parent, node.start)
        upper.pending, upper.last_used, upper.inflight, upper.op = node.pending, node.last_used, node.inflight, node.op
        parent.children[upper.tokens[0]] = upper
        node.tokens = node.tokens[k:]
        node.start += k
        node.parent = upper
        upper.children[node.tokens[0]] = node
        if node.slots is not None:
            upper.slots, node.slots = node.slots[:k], node.slots[k:]
            ps = self.pool.page_size
            if upper.slots[-1] // ps == node.slots[0] // ps:  # the page now has two holders
                self.pool.retain([node.slots[0]])
        return upper

    def touch(self, node: Node):
        self.clock += 1
        for n in node.path():
            n.last_used = self.clock

    def evictable(self, n: Node) -> bool:
        return (n.slots is not None and n.pending == 0
                and not any(c.slots is not None for c in n.children.values()))

    def evict(self, n: Node):
        self.pool.release(n.slots)
        n.slots = None
        n.op = self.op  # recomputing it within this operation is regret

    def allocate(self, n_tokens: int) -> list[int] | None:
        """Slots for n tokens, evicting unpinned leaves (LRU); None if impossible."""
        while not self.pool.can_allocate(n_tokens):
            victims = self._evictable_by_age()
            if not victims:
                return None
            for n in victims:  # one scan of the tree frees many pages
                self.evict(n)
                if self.pool.can_allocate(n_tokens):
                    break
        return self.pool.allocate(n_tokens)

    def _evictable_by_age(self) -> list[Node]:
        out, stack = [], list(self.roots.values())
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            if self.evictable(n):
                out.append(n)
        out.sort(key=lambda n: n.last_used)
        return out

    def prune(self):
        """Drop nodes that hold nothing and are needed by nobody; merge nothing."""
        for key in list(self.roots):
            root = self.roots[key]
            self._prune(root)
            if key != 0 and not root.children:
                del self.roots[key]

    def _prune(self, n: Node) -> bool:
        for t, c in list(n.children.items()):
            if self._prune(c):
                del n.children[t]
        return n.parent is not None and n.slots is None and n.pending == 0 and not n.children

    def drop_root(self, key: object):
        root = self.roots.pop(key, None)
        if root is None:
            return
        stack = list(root.children.values())
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            if n.slots is not None:
                self.evict(n)

    def trim(self, keep_free: float = 0.25):
        """Evict unpinned leaves, oldest first, until `keep_free` of the pages are free."""
        want = int(self.pool.num_pages * keep_free)
        while self.pool.num_free < want:
            victims = self._evictable_by_age()
            if not victims:
                return
            for n in victims:
                self.evict(n)
                if self.pool.num_free >= want:
                    return
