"""quail_kernels.decode_attention against its float32 reference (Triton's interpreter on CPU)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from quail_kernels._util import interpreter_active  # noqa: E402
from quail_kernels.decode_attention import (  # noqa: E402
    decode_attention, decode_attention_ref, plan_decode, seqs_per_item)

DEVICE = "cpu" if interpreter_active() else ("cuda" if torch.cuda.is_available() else None)
if DEVICE is None:
    pytest.skip("needs Triton's interpreter or a CUDA device", allow_module_level=True)


def _run(n_q, n_kv, d, groups, dtype, chunk, spare_items=3, seed=0, programs=0, shared=True):
    """groups: (base keys, [own keys of each sequence]); a sequence's keys are its group's base then its own.
    The slot list holds each base once (shared) and the pool's slots are shuffled."""
    g = torch.Generator().manual_seed(seed)
    n_seq = sum(len(own) for _, own in groups)
    n_slots = sum(b + sum(own) for b, own in groups) + 11
    perm = torch.randperm(n_slots, generator=g)
    k_cache, v_cache = (torch.randn(n_slots, n_kv, d, generator=g).to(dtype) for _ in range(2))
    q = torch.randn(n_seq, n_q, d, generator=g).to(dtype)
    flat, q_lo, q_n, k_lo, k_n, keys = [], [], [], [], [], []
    used, s = 0, 0
    for base, own in groups:
        bs = perm[used:used + base]
        used += base
        q_lo.append(s), q_n.append(len(own)), k_lo.append(len(flat)), k_n.append(base)
        flat.extend(bs.tolist())
        for o in own:
            os_ = perm[used:used + o]
            used += o
            q_lo.append(s), q_n.append(1), k_lo.append(len(flat)), k_n.append(o)
            flat.extend(os_.tolist())
            keys.append(torch.cat([bs, os_]))
            s += 1
    rep = n_q // n_kv
    qb = seqs_per_item(rep, shared)
    plan = plan_decode(q_lo, q_n, k_lo, k_n, n_seq, qb, chunk)
    cap = plan.items.shape[1] + spare_items  # a fixed grid larger than the work: the spare items do nothing
    items = np.full((5, cap), 7, dtype=np.int64)  # (stale values past n_items)
    items[:, :plan.items.shape[1]] = plan.items
    P = plan.n_partials + 2
    dev = lambda x: torch.as_tensor(x).to(DEVICE)  # noqa: E731
    out = decode_attention(dev(q), dev(k_cache), dev(v_cache), dev(np.array(flat, dtype=np.int64)), dev(items),
                           dev(np.array([plan.items.shape[1]])), dev(plan.ptr), dev(plan.ents),
                           torch.zeros(P, n_kv, rep, d, device=DEVICE), torch.zeros(P, n_kv, rep, device=DEVICE),
                           programs=programs, qb=qb)
    ref = decode_attention_ref(q, k_cache, v_cache, keys)
    return out.cpu().float(), ref.float(), plan


@pytest.mark.parametrize("n_q,n_kv,d,groups,chunk", [
    (8, 2, 32, [(70, [3, 1, 9]), (0, [5]), (130, [1])], 64),  # a shared base over 3 sequences; no base
    (9, 3, 16, [(20, [1] * 13)], 256),  # more sequences than one item holds (rep 3: 10 a item)
    (4, 4, 16, [(0, [1]), (200, [70, 2])], 32),  # split-K: keys in chunks of 32
])
def test_decode_attention_matches_reference(n_q, n_kv, d, groups, chunk):
    out, ref, plan = _run(n_q, n_kv, d, groups, torch.float32, chunk)
    torch.testing.assert_close(out, ref, atol=2e-5 if DEVICE == "cpu" else 2e-2, rtol=1e-4)
    assert plan.items.shape[1] > len(groups)  # the cases do split into several items


def test_fewer_programs_than_items_each_take_several():
    """The grid is fixed (a CUDA graph replays it): with 3 programs a KV head over 10+ items, each program
    works through every third item; the same result."""
    out, ref, plan = _run(8, 2, 32, [(150, [3, 1, 9]), (0, [70]), (40, [1, 2])], torch.float32, 32, programs=3)
    assert plan.items.shape[1] > 9
    torch.testing.assert_close(out, ref, atol=2e-5 if DEVICE == "cpu" else 2e-2, rtol=1e-4)


def test_items_of_one_sequence_each_take_fewer_query_rows():
    """Without a shared document (every segment one sequence) a step's items hold fewer query rows
    (`SOLO_ROWS`): the same result."""
    groups = [(0, [3]), (0, [70]), (0, [1]), (0, [40])]
    out, ref, plan = _run(8, 2, 32, groups, torch.float32, 32, shared=False)
    assert seqs_per_item(4, shared=False) < seqs_per_item(4)
    torch.testing.assert_close(out, ref, atol=2e-5 if DEVICE == "cpu" else 2e-2, rtol=1e-4)


def test_decode_attention_bf16():
    out, ref, _ = _run(8, 2, 32, [(90, [4, 1]), (0, [33])], torch.bfloat16, 64, seed=3)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)


def test_plan_reads_a_shared_base_once_per_item_block():
    """A base over 8 sequences (rep 4: 8 a item) is one item per key chunk; the CSR lists every sequence's
    partials (its base chunks, then its own)."""
    plan = plan_decode([0, 0, 1, 2, 3, 4, 5, 6, 7], [8] + [1] * 8, [0] + [100 + 5 * i for i in range(8)],
                       [600] + [5] * 8, 8, seqs_per_item(4), 256)
    base_items = plan.items[:, plan.items[1] == 8]
    assert base_items.shape[1] == 3 and base_items[3].sum() == 600  # 256 + 256 + 88 keys, read once
    assert list(np.diff(plan.ptr)) == [4] * 8  # 3 base chunks + 1 own part each
    assert plan.n_partials == 3 * 8 + 8
