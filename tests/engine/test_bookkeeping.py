"""Pool and prefix tree bookkeeping (pure Python)."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_worker.kv_pool import PagePool
from gpu_worker.prefix_tree import PrefixTree
from gpu_worker.scheduler import Scheduler


def test_pool_pages_are_reference_counted():
    pool = PagePool(64)
    a = pool.allocate(20)  # two pages
    assert len(a) == 20 and pool.num_free == 2
    pool.retain(a[15:17])  # pages 0 and 1 get a second holder
    pool.release(a)
    assert pool.num_free == 2
    pool.release(a[15:17])
    assert pool.num_free == 4
    with pytest.raises(ValueError):
        PagePool(8)


def test_split_keeps_identity_and_shares_the_straddling_page():
    pool = PagePool(64)
    tree = PrefixTree(pool)
    end = tree.insert(list(range(20)))
    end.slots = pool.allocate(20)
    other = tree.insert(list(range(10)) + [99])
    upper = end.parent
    assert end.tokens == list(range(10, 20)) and upper.tokens == list(range(10))
    assert other.parent is upper and upper.slots == end.slots[:0] + upper.slots
    assert pool.refs[0] == 2  # page 0 holds slots of both halves
    tree.evict(end)
    tree.evict(upper)
    assert pool.num_free == 4


def test_scheduler_serves_every_request_once_under_a_tiny_budget():
    pool = PagePool(256)
    tree = PrefixTree(pool)
    reqs = [list(range(40)) + [100 + i] * 5 for i in range(6)] + [list(range(40))]
    ends = [tree.insert(r) for r in reqs]
    sched = Scheduler(tree, ends, budget=16)
    seen = []
    while not sched.done:
        jobs = sched.next_pass()
        assert jobs and sum(j.num_tokens for j in jobs) <= 16
        sched.finish(jobs)
        seen += [r for j in jobs for _, r in j.outputs]
    assert sorted(seen) == list(range(len(reqs)))
    assert sched.fresh == 40 + 6 * 5 and sched.regret == 0


# [7, 13, 1] and [400, 9] (the square causal call, >= 384 rows): unequal lengths, one call per sequence;
# [9, 9, 8]: nearly equal, one padded call
@pytest.mark.parametrize("lens", [[7, 13, 1], [400, 9], [9, 9, 8]])
def test_folded_and_split_context_attention_agree(lens):
    """A short context folded into the causal call equals the split + LSE-merge path (float32 math)."""
    import torch

    from gpu_worker.attention import PREFIXED_CAUSAL_FROM, AttnMeta, Group, attend, split_attention_torch

    assert max(lens) >= PREFIXED_CAUSAL_FROM or max(lens) < 20
    g = torch.Generator().manual_seed(0)
    n_q, n_kv, d, C = 6, 2, 16, 40
    T = sum(lens)
    q, k, v = (torch.randn(T, h, d, generator=g) for h in (n_q, n_kv, n_kv))
    kc, vc = (torch.randn(C + 5, n_kv, d, generator=g) for _ in range(2))
    slots = torch.arange(3, C + 3)
    cu = [0] + np.cumsum(lens).tolist()
    meta = AttnMeta(cu_seqlens=cu, groups=[Group(slots, 0, len(lens), 0, T)],
                    write_slots=torch.full((T,), -1), logit_index=torch.zeros(0, dtype=torch.long))
    folded = split_attention_torch(q, k, v, kc, vc, meta, fold_ctx=C)
    split = split_attention_torch(q, k, v, kc, vc, meta, fold_ctx=0)
    # dense reference: each sequence attends to the whole context and causally to itself
    for i, (a, b) in enumerate(zip(cu, cu[1:])):
        keys = torch.cat([kc[slots], k[a:b]]).transpose(0, 1)[None]
        vals = torch.cat([vc[slots], v[a:b]]).transpose(0, 1)[None]
        qq = torch.cat([torch.zeros(C, n_q, d, dtype=q.dtype), q[a:b]]).transpose(0, 1)[None]
        ref = attend(qq, keys, vals, torch.tensor([C + b - a]))[0][0, :, C:].transpose(0, 1)
        assert torch.allclose(split[a:b], ref, atol=1e-5), (split[a:b] - ref).abs().max()
        assert torch.allclose(folded[a:b], ref, atol=1e-5), (folded[a:b] - ref).abs().max()


def test_folded_attention_padded_or_per_sequence_agree(monkeypatch):
    """A folded group's sequences in one padded call or one call each: the same result."""
    import torch

    from gpu_worker import attention
    from gpu_worker.attention import AttnMeta, Group, split_attention_torch

    g = torch.Generator().manual_seed(1)
    lens = [30, 4, 17, 1, 22]
    T, C = sum(lens), 12
    q, k, v = (torch.randn(T, h, 16, generator=g) for h in (6, 2, 2))
    kc, vc = (torch.randn(C, 2, 16, generator=g) for _ in range(2))
    meta = AttnMeta(cu_seqlens=[0] + np.cumsum(lens).tolist(), groups=[Group(torch.arange(C), 0, len(lens), 0, T)],
                    write_slots=torch.full((T,), -1), logit_index=torch.zeros(0, dtype=torch.long))
    each = split_attention_torch(q, k, v, kc, vc, meta)
    monkeypatch.setattr(attention, "UNPADDED_MAX_SEQS", 0)
    padded = split_attention_torch(q, k, v, kc, vc, meta)
    torch.testing.assert_close(each, padded, rtol=1e-5, atol=1e-5)


def test_one_token_rows_after_their_contexts_in_padded_batches_equal_each_alone():
    """A decode step's rows (one token after a cached context each, two of them at one node, contexts of
    3 to 300 tokens so that they fall in several length batches) equal dense attention of each row over its
    context and itself; a group of longer sequences in the same pass is attended as before."""
    import torch

    from gpu_worker.attention import AttnMeta, Group, attend, split_attention_torch

    g = torch.Generator().manual_seed(2)
    n_q, n_kv, d, P = 6, 2, 16, 400
    kc, vc = (torch.randn(P, n_kv, d, generator=g) for _ in range(2))
    ctx_lens = [3, 300, 40, 41, 7, 150]
    rows_per = [1, 1, 2, 1, 1, 1]
    lens = [1] * sum(rows_per) + [9]
    T = sum(lens)
    q, k, v = (torch.randn(T, h, d, generator=g) for h in (n_q, n_kv, n_kv))
    groups, ctxs, s = [], [], 0
    for c, n in zip(ctx_lens, rows_per):
        slots = torch.randperm(P, generator=g)[:c]
        groups.append(Group(slots, s, s + n, s, s + n))
        ctxs += [slots] * n
        s += n
    groups.append(Group(torch.arange(20), s, s + 1, s, s + 9))
    cu = [0] + np.cumsum(lens).tolist()
    meta = AttnMeta(cu_seqlens=cu, groups=groups, write_slots=torch.full((T,), -1),
                    logit_index=torch.zeros(0, dtype=torch.long))
    got = split_attention_torch(q, k, v, kc, vc, meta)
    assert len(meta.device_meta["one_token"]) >= 3  # contexts of 3, ~40 and 150-300 tokens: apart
    for t, slots in enumerate(ctxs):
        keys = torch.cat([kc[slots], k[t:t + 1]]).transpose(0, 1)[None]
        vals = torch.cat([vc[slots], v[t:t + 1]]).transpose(0, 1)[None]
        ref = attend(q[t:t + 1].transpose(0, 1)[None], keys, vals)[0][0, :, 0]
        torch.testing.assert_close(got[t], ref, rtol=1e-5, atol=1e-5)
    a = cu[-2]
    keys = torch.cat([kc[:20], k[a:]]).transpose(0, 1)[None]
    vals = torch.cat([vc[:20], v[a:]]).transpose(0, 1)[None]
    qq = torch.cat([torch.zeros(20, n_q, d), q[a:]]).transpose(0, 1)[None]
    ref = attend(qq, keys, vals, torch.tensor([29]))[0][0, :, 20:].transpose(0, 1)
    torch.testing.assert_close(got[a:], ref, rtol=1e-5, atol=1e-5)
