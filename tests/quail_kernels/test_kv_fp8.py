"""quail_kernels.kv_fp8 (a context's keys gathered into float8) and quail_kernels.seg_attention on them, against torch.

In Triton's interpreter the attention keeps the query in float32 (its float8 conversion is wrong,
quail_kernels/_quant.py), so there it must match the float32 attention over the dequantized keys closely;
compiled on a GPU the query is float8 too, and the error is bounded against the same reference and
against attention over the unquantized context.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from quail_kernels._util import interpreter_active  # noqa: E402
from quail_kernels.kv_fp8 import dequant, gather_fp8, gather_fp8_ref  # noqa: E402
from quail_kernels.seg_attention import seg_attention, seg_attention_ref, seg_block_t, seg_items, segments  # noqa: E402

DEVICE = "cpu" if interpreter_active() else ("cuda" if torch.cuda.is_available() else None)
if DEVICE is None:
    pytest.skip("needs Triton's interpreter or a CUDA device", allow_module_level=True)


def _pool(S, n_kv, d, seed, dtype=torch.bfloat16, spread=True):
    g = torch.Generator().manual_seed(seed)
    if spread:  # channels of very different sizes (as a key norm's weights make them) and one outlier row
        k = torch.randn(S, n_kv, d, generator=g) * torch.linspace(0.05, 8.0, d)
        k[S // 3] *= 20
    else:  # scores of standard deviation ~1, channels within 4x of each other
        k = torch.randn(S, n_kv, d, generator=g) * torch.linspace(0.5, 2.0, d) / 1.3
    v = torch.randn(S, n_kv, d, generator=g)
    return k.to(dtype), v.to(dtype), g


def _rel_rms(a, b):
    return float((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt())


@pytest.mark.parametrize("C", [0, 1, 64, 203])
def test_gather_matches_ref(C):
    k, v, g = _pool(300, 2, 32, C)
    slots = torch.randperm(300, generator=g)[:C].to(torch.int32)
    k8, amax = gather_fp8(k.to(DEVICE), slots.to(DEVICE))
    r8, ramax = gather_fp8_ref(k, slots)
    assert k8.dtype == torch.float8_e4m3fn and tuple(k8.shape) == (C, 2, 32)
    torch.testing.assert_close(amax.cpu(), ramax, rtol=0, atol=0)
    got, want = dequant(k8.cpu(), amax.cpu()), dequant(r8, ramax)
    if DEVICE == "cpu":
        assert torch.equal(got, want)
    else:  # the GPU's float32 division may round a value to the neighbouring float8 step
        assert bool(((got - want).abs() <= 0.13 * want.abs() + 1e-30).all())
    # float8 e4m3: about 2^-4 relative error per value, none lost to the range
    k_ref = k.index_select(0, slots.long()).float()
    if C:
        assert bool(((got - k_ref).abs() <= 0.07 * k_ref.abs() + amax.cpu() / 448 * 2 ** -6).all())


def _attention_case(n_q, n_kv, d, q_lens, k_lens, merge, seed, block_n=16, **launch):
    q_start = np.concatenate([[2], 2 + np.cumsum(np.asarray(q_lens) + 2)[:-1]])
    k_start = np.concatenate([[0], np.cumsum(k_lens)[:-1]])
    seg = segments(q_start, q_lens, k_start, k_lens)
    T, C = int(q_start[-1] + q_lens[-1] + 2), int(sum(k_lens))
    # spread-out keys make the query's float8 rounding move scores by whole units (|score| in the
    # hundreds): the attention cases use scores as a model's are
    k, v, g = _pool(C + 50, n_kv, d, seed, spread=False)
    slots = torch.randperm(C + 50, generator=g)[:C]
    q = torch.randn(T, n_q, d, generator=g).to(torch.bfloat16)
    out0, lse0 = torch.randn(T, n_q, d, generator=g).to(torch.bfloat16), torch.randn(T, n_q, generator=g) + 3
    k8, amax = gather_fp8(k.to(DEVICE), slots.to(DEVICE))
    v16 = v.index_select(0, slots).to(DEVICE)
    bt = seg_block_t(n_q // n_kv, 128)
    items = torch.from_numpy(seg_items(seg[1], bt)).to(DEVICE)
    out, lse = seg_attention(q.to(DEVICE), k8, v16, torch.from_numpy(seg).to(DEVICE), items, bt, merge=merge,
                             out=out0.clone().to(DEVICE), lse=lse0.clone().to(DEVICE), amax=amax, block_n=block_n,
                             **launch)
    rows = np.concatenate([np.arange(s, s + n) for s, n in zip(seg[0], seg[1])])
    other = np.setdiff1d(np.arange(T), rows)
    out, lse = out.cpu(), lse.cpu()
    assert torch.equal(out[other], out0[other]) and torch.equal(lse[other], lse0[other])
    ref_o, ref_l = seg_attention_ref(q, dequant(k8.cpu(), amax.cpu()), v16.cpu(), seg, out=out0, lse=lse0, merge=merge)
    exact_o, _ = seg_attention_ref(q, k.index_select(0, slots), v.index_select(0, slots), seg, out=out0, lse=lse0,
                                   merge=merge)
    return out.float()[rows], lse[rows], ref_o[rows], ref_l[rows], exact_o[rows]


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("lens", [([5, 17], [70, 3]), ([40], [129]), ([1, 9], [64, 1])])
def test_fp8_context_attention_matches_ref(merge, lens):
    # on the GPU as the engine launches head size 32: pointer loads (gpu_worker.cuda_ops.CudaOps._launch)
    o, lse, ref_o, ref_l, exact_o = _attention_case(8, 2, 32, *lens, merge, seed=sum(lens[1]),
                                                    **({} if DEVICE == "cpu" else {"tma": False}))
    if DEVICE == "cpu":  # the query in float32 here: only the output's bf16 rounding
        torch.testing.assert_close(o, ref_o, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse, ref_l, atol=1e-4, rtol=1e-4)
    else:  # the query's float8 rounding on top (0.034-0.06 measured)
        assert _rel_rms(o, ref_o) < 0.08
        torch.testing.assert_close(lse, ref_l, atol=0.15, rtol=0.02)
    assert _rel_rms(o, exact_o) < 0.1  # against the unquantized context


@pytest.mark.skipif(DEVICE != "cuda", reason="the production launch (TMA, 128-key tiles) runs compiled only")
def test_fp8_production_launch():
    """The engine's launch on the H200 (gpu_worker.cuda_ops.CTX_CONFIG, keys through descriptors at d=128)
    on a join's shape."""
    from gpu_worker.cuda_ops import CTX_CONFIG as CFG

    launch = {k: CFG[k] for k in ("num_warps", "num_stages", "tma")}
    o, lse, ref_o, ref_l, exact_o = _attention_case(32, 8, 128, [1013, 45, 7], [5003, 129, 4100], True, seed=3,
                                                    block_n=CFG["block_n"], **launch)
    assert _rel_rms(o, ref_o) < 0.08
    torch.testing.assert_close(lse, ref_l, atol=0.15, rtol=0.02)
    assert _rel_rms(o, exact_o) < 0.1


def test_fp8_bad_arguments():
    k, v, _ = _pool(20, 2, 16, 0)
    k8, amax = gather_fp8(k.to(DEVICE), torch.arange(20, device=DEVICE))
    v = v.to(DEVICE)
    q = torch.randn(6, 4, 16, device=DEVICE).to(torch.bfloat16)
    seg = torch.from_numpy(segments([0], [6], [0], [20])).to(DEVICE)
    items = torch.from_numpy(seg_items([6], 8)).to(DEVICE)
    with pytest.raises(ValueError, match="non-causal"):
        seg_attention(q, k8, v, seg, items, 8, causal=True, amax=amax)
    with pytest.raises(ValueError, match=r"amax: expected shape \(2, 16\)"):
        seg_attention(q, k8, v, seg, items, 8, amax=amax[:1])
    with pytest.raises(ValueError, match="power-of-two head size"):
        gather_fp8(torch.zeros(4, 1, 12, device=DEVICE), torch.arange(4, device=DEVICE))
