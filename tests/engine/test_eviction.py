"""Eviction at scale: bounded by the tree's visited-nodes counter (never a clock), deep trees, retention."""
from __future__ import annotations

import sys

from gpu_worker.kv_pool import PagePool
from gpu_worker.prefix_tree import PrefixTree
from gpu_worker.scheduler import Scheduler


def _serve(tree, reqs, budget=256, prefixes=None):
    """Run a call's scheduling to the end (bookkeeping only: no model)."""
    ends = []
    for i, r in enumerate(reqs):
        if prefixes is not None:
            at = tree.insert(prefixes[i])
            tree.mark_prefix(at)
            ends.append(tree.insert(r, at=at))
        else:
            ends.append(tree.insert(r))
    sched = Scheduler(tree, ends, budget=budget)
    served = []
    while not sched.done:
        jobs = sched.next_pass()
        assert jobs
        sched.finish(jobs)
        served += [r for j in jobs for _, r in j.outputs]
    tree.trim()
    assert sorted(served) == list(range(len(reqs)))
    return sched


def test_eviction_visits_a_bounded_number_of_nodes_per_evicted_node():
    """A full pool and many small nodes (a join's shape): each eviction pops O(1) heap entries,
    where a scan of the tree would visit every resident node per allocation."""
    pool = PagePool(16 * 64)  # 64 pages
    tree = PrefixTree(pool)
    for call in range(30):  # 30 calls, each 8 anchors x 40 partners: far more than the pool holds
        anchors = [[1000 + call * 8 + a] * 40 for a in range(8)]
        prefixes = [a for a in anchors for _ in range(40)]
        suffixes = [[2, 3 + p % 5, 100 + p] for _ in anchors for p in range(40)]
        _serve(tree, suffixes, budget=64, prefixes=prefixes)
    st = tree.stats
    assert st["evicted_nodes"] > 150
    # heap entries looked at (stale ones included) per evicted node: a constant, not the tree's size
    assert st["evict_visited"] <= 4 * st["evicted_nodes"] + 256, st
    assert tree.nodes() < 200  # nodes holding nothing are unlinked as calls end, not kept forever


def test_single_use_suffixes_are_never_kept():
    """Optional retention keeps prefixes (documents, anchors) only: partner suffixes never fill the pool."""
    pool = PagePool(16 * 256)
    tree = PrefixTree(pool)
    prefixes = [[7] * 50 for _ in range(100)]
    _serve(tree, [[300 + p, 1, 2] for p in range(100)], budget=64, prefixes=prefixes)
    resident = tree.pool.used_pages()
    assert resident == tree.pool.pages_for(50)  # the anchor only
    assert tree.stats["kept_tokens"] == 0  # the anchor was kept for its pending users, not optionally
    # a filter's documents (prefixes of one request each) are kept optionally and reported
    docs = [[500 + d] * 30 for d in range(5)]
    _serve(tree, [[9, 9] for _ in docs], prefixes=docs)
    assert tree.stats["kept_tokens"] == 5 * 30
    tree.trim(keep_free=1.0)
    assert tree.stats["kept_unread_tokens"] == 5 * 30  # kept optionally, evicted unread (the anchor was read)
    assert tree.pool.used_pages() == 0


def test_deep_tree_of_cumulative_rows_needs_no_recursion():
    """Agent-trace rows: each row extends the last (2,000 deep). Scheduling, eviction, unlinking and
    dropping are iterative: no RecursionError, nothing left behind."""
    assert sys.getrecursionlimit() < 3000
    pool = PagePool(16 * 40)  # far smaller than the trace
    tree = PrefixTree(pool)
    trace = list(range(10, 10 + 2 * 2000))
    prefixes = [trace[: 2 * (k + 1)] for k in range(2000)]
    _serve(tree, [[1, 2] for _ in prefixes], budget=128, prefixes=prefixes)
    _serve(tree, [[3, 4] for _ in prefixes[:1500]], budget=128, prefixes=prefixes[:1500])
    tree.trim(keep_free=1.0)
    assert pool.used_pages() == 0
    tree.drop_root(0)
    assert tree.nodes() == 0


def test_deep_solo_root_is_dropped_iteratively():
    pool = PagePool(16 * 8)
    tree = PrefixTree(pool)
    node = tree.root(("solo", 0))
    for t in range(3000):  # a chain 3,000 nodes deep
        node = tree.insert([t], at=node)
    tree.drop_root(("solo", 0))
    assert ("solo", 0) not in tree.roots
