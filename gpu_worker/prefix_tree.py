"""Radix tree over token segments, shared by every request of an engine.

A node is a run of tokens after its parent's; `slots` holds their KV when the
node is resident. A node keeps its identity when split (the new node takes the
upper part), so a reference to a node always means "the prefix ending here".
Resident nodes form a subtree: only nodes with no resident child are evicted,
least recently used first, and never while a pending request pins them.

Eviction never walks the tree (SGLang's radix cache): evictable nodes sit in
a heap keyed by last use, with lazy deletion (an entry whose node was touched,
pinned or evicted since it was pushed is dropped when popped); a node enters
when it may have become evictable (stored, unpinned, its last resident child
evicted). Nodes that hold nothing and are needed by nobody are unlinked where
that happens (`unlink_upward`: after an eviction, an unpin, a finished request),
walking up from the node, never down.
`stats["evict_visited"]` counts the heap entries eviction looked at. Pure
bookkeeping: no torch.
"""
from __future__ import annotations

import heapq

from .kv_pool import PagePool


class Node:
    __slots__ = ("tokens", "parent", "children", "slots", "start", "pending", "ends",
                 "last_used", "inflight", "op", "resident_kids", "prefix", "read", "optional", "key")

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
        self.resident_kids = 0  # children holding KV
        self.prefix = False  # ends inside a request's prefix (a document, an anchor): worth keeping
        self.read = False  # its KV was read as a later job's context since it was stored
        self.optional = False  # stored with no pending user (retention)
        self.key: object = None  # a root's key in PrefixTree.roots

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


class PrefixTree:
    def __init__(self, pool: PagePool):
        self.pool = pool
        self.roots: dict[object, Node] = {}
        self.clock = 0
        self.passes = 0
        self.op = 0  # id of the engine operation in progress (regret accounting)
        self.heap: list[tuple[int, int, Node]] = []  # (last_used, tie, node), lazy deletion
        self.tie = 0
        self.stats = {"evict_visited": 0, "evicted_nodes": 0, "pruned_nodes": 0,
                      "kept_tokens": 0, "kept_unread_tokens": 0}

    def root(self, key: object = 0) -> Node:
        if key not in self.roots:
            r = self.roots[key] = Node([], None, 0)
            r.key = key
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

    def mark_prefix(self, node: Node):
        """`node` ends a request's prefix: it and its ancestors are worth keeping."""
        while node.parent is not None and not node.prefix:
            node.prefix = True
            node = node.parent

    def split(self, node: Node, k: int) -> Node:
        """Cut `node` after k tokens; returns the new upper node (node keeps its end)."""
        assert 0 < k < len(node.tokens)
        parent = node.parent
        upper = Node(node.tokens[:k], parent, node.start)
        upper.pending, upper.last_used, upper.inflight, upper.op = node.pending, node.last_used, node.inflight, node.op
        upper.prefix, upper.read, upper.optional = node.prefix, node.read, node.optional
        parent.children[upper.tokens[0]] = upper
        node.tokens = node.tokens[k:]
        node.start += k
        node.parent = upper
        upper.children[node.tokens[0]] = node
        if node.slots is not None:
            upper.slots, node.slots = node.slots[:k], node.slots[k:]
            upper.resident_kids = 1  # parent's count is unchanged: upper replaces node there
            ps = self.pool.page_size
            if upper.slots[-1] // ps == node.slots[0] // ps:  # the page now has two holders
                self.pool.retain([node.slots[0]])
        return upper

    # residency ----------------------------------------------------------------
    def set_slots(self, n: Node, slots: list[int], optional: bool = False):
        """`n` now holds KV in `slots` (stored by a forward pass)."""
        n.slots, n.read, n.optional = slots, False, optional
        if n.parent is not None:
            n.parent.resident_kids += 1
        if optional:
            self.stats["kept_tokens"] += len(n.tokens)
        self.push(n)

    def mark_read(self, ctx: Node):
        """A job reads the KV of `ctx` and its ancestors as context."""
        n = ctx
        while n is not None and not n.read:
            n.read = True
            n = n.parent

    def touch(self, node: Node):
        self.clock += 1
        for n in node.path():
            n.last_used = self.clock
        self.push(node)

    def evictable(self, n: Node) -> bool:
        return n.slots is not None and n.pending == 0 and n.resident_kids == 0

    def push(self, n: Node):
        """Offer `n` to eviction if it is evictable now (stale entries are dropped later)."""
        if self.evictable(n):
            self.tie += 1
            heapq.heappush(self.heap, (n.last_used, self.tie, n))
            if len(self.heap) > 64 and len(self.heap) > 4 * (self.pool.num_pages - self.pool.num_free) + 64:
                self._compact()

    def _compact(self):
        """Drop stale heap entries (amortized: runs when the heap outgrows the resident pages)."""
        self.stats["evict_visited"] += len(self.heap)
        live = {}
        for lu, t, n in self.heap:
            if self.evictable(n) and lu == n.last_used:
                live[id(n)] = (lu, t, n)
        self.heap = list(live.values())
        heapq.heapify(self.heap)

    def evict(self, n: Node):
        self.pool.release(n.slots)
        if n.optional and not n.read:
            self.stats["kept_unread_tokens"] += len(n.tokens)
        n.slots = None
        n.op = self.op  # recomputing it within this operation is regret
        self.stats["evicted_nodes"] += 1
        p = n.parent
        if p is not None:
            p.resident_kids -= 1
            self.push(p)
        self.unlink_upward(n)

    def _pop_victim(self) -> Node | None:
        while self.heap:
            lu, _, n = heapq.heappop(self.heap)
            self.stats["evict_visited"] += 1
            if self.evictable(n) and lu == n.last_used:
                return n
        return None

    def allocate(self, n_tokens: int) -> list[int] | None:
        """Slots for n tokens, evicting unpinned leaves (LRU); None if impossible."""
        return self.pool.allocate(n_tokens) if self.make_room(n_tokens) else None

    def make_room(self, n_tokens: int) -> bool:
        """Evict unpinned leaves (LRU) until n tokens' pages are free; whether they are."""
        while not self.pool.can_allocate(n_tokens):
            victim = self._pop_victim()
            if victim is None:
                return False
            self.evict(victim)
        return True

    def trim(self, keep_free: float = 0.25):
        """Evict unpinned leaves, oldest first, until `keep_free` of the pages are free."""
        want = int(self.pool.num_pages * keep_free)
        while self.pool.num_free < want:
            victim = self._pop_victim()
            if victim is None:
                return
            self.evict(victim)

    # structure ----------------------------------------------------------------
    def unlink_upward(self, n: Node):
        """Unlink `n` and then its ancestors while they hold nothing and nobody needs them."""
        while (n.parent is not None and n.slots is None and n.pending == 0 and not n.children
               and not n.ends):
            p = n.parent
            if p.children.get(n.tokens[0]) is n:
                del p.children[n.tokens[0]]
            n.parent = None  # detached: a stale heap entry or reference sees a non-evictable node
            self.stats["pruned_nodes"] += 1
            n = p
        if n.parent is None and n.key not in (None, 0) and not n.children:
            self.roots.pop(n.key, None)

    def drop_root(self, key: object):
        """Evict and unlink a whole root (a request of its own, prefix_cache off)."""
        root = self.roots.pop(key, None)
        if root is None:
            return
        stack = list(root.children.values())
        post = []
        while stack:  # iterative: trees of any depth
            n = stack.pop()
            post.append(n)
            stack.extend(n.children.values())
        for n in reversed(post):  # leaves first, so every eviction is of a leaf
            if n.slots is not None:
                self.pool.release(n.slots)
                n.slots = None
            n.children.clear()
            n.parent = None

    def nodes(self) -> int:
        """Number of nodes (a whole-tree walk: tests and diagnostics only)."""
        count, stack = 0, list(self.roots.values())
        while stack:
            n = stack.pop()
            count += 1
            stack.extend(n.children.values())
        return count
