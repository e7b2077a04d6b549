"""quail_kernels.seg_attention against its float32 reference (Triton's interpreter on CPU)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from quail_kernels._util import interpreter_active  # noqa: E402
from quail_kernels.seg_attention import seg_attention, seg_attention_ref, seg_block_t, seg_items, segments  # noqa: E402

DEVICE = "cpu" if interpreter_active() else ("cuda" if torch.cuda.is_available() else None)
if DEVICE is None:
    pytest.skip("needs Triton's interpreter or a CUDA device", allow_module_level=True)

# float32: exact math in the interpreter; Triton's float32 dot on a GPU is tf32 (10-bit mantissa)
F32_TOL = 1e-5 if DEVICE == "cpu" else 2e-2
# (n_q, n_kv, d, segments as (q_len, k_len)): odd lengths, empty segments, GQA factors 1, 3, 4
CASES = [
    (8, 2, 32, [(5, 70), (17, 3)]),
    (4, 4, 16, [(1, 64)]),
    (6, 2, 16, [(9, 0), (0, 20), (4, 129)]),
    (8, 2, 32, [(40, 200)]),
]
CAUSAL_CASES = [(8, 2, 32, [37, 5]), (6, 2, 16, [70]), (4, 4, 16, [1, 64, 65])]


def _layout(q_lens, k_lens, gap=3):
    """Segments placed with gaps between them (rows outside segments must stay untouched)."""
    q_start = np.concatenate([[gap], gap + np.cumsum(np.asarray(q_lens) + gap)[:-1]]) if len(q_lens) else []
    k_start = np.concatenate([[1], 1 + np.cumsum(np.asarray(k_lens) + 2)[:-1]]) if len(k_lens) else []
    T = int(q_start[-1] + q_lens[-1] + gap)
    C = int(k_start[-1] + k_lens[-1] + 2)
    return segments(q_start, q_lens, k_start, k_lens), T, C


def _check(n_q, n_kv, d, seg, T, C, causal, dtype, merge, block_m, tol, fused_step=None):
    g = torch.Generator().manual_seed(T * 31 + C)
    q = torch.randn(T, n_q, d, generator=g).to(dtype)
    if causal:
        k, v = (torch.randn(T, n_kv, d, generator=g).to(dtype) for _ in range(2))
    else:
        k, v = (torch.randn(C, n_kv, d, generator=g).to(dtype) for _ in range(2))
    out0 = torch.randn(T, n_q, d, generator=g).to(dtype)
    lse0 = torch.randn(T, n_q, generator=g)
    bt = seg_block_t(n_q // n_kv, block_m)
    items = torch.from_numpy(seg_items(seg[1], bt, longest_first=causal)).to(DEVICE)
    out, lse = seg_attention(*(x.to(DEVICE) for x in (q, k, v)), torch.from_numpy(seg).to(DEVICE), items, bt,
                             causal=causal, out=out0.clone().to(DEVICE), lse=lse0.clone().to(DEVICE), merge=merge,
                             block_n=16, fused_step=fused_step)
    ref_o, ref_l = seg_attention_ref(q, k, v, seg, causal=causal, out=out0, lse=lse0, merge=merge)
    rows = np.concatenate([np.arange(s, s + n) for s, n in zip(seg[0], seg[1])] + [np.zeros(0, np.int64)])
    other = np.setdiff1d(np.arange(T), rows)
    out, lse = out.cpu(), lse.cpu()
    torch.testing.assert_close(out.float()[rows], ref_o[rows], atol=tol, rtol=tol)
    finite = torch.isfinite(ref_l[rows])
    lse_tol = 1e-4 if DEVICE == "cpu" else 2e-2
    torch.testing.assert_close(lse[rows][finite], ref_l[rows][finite], atol=lse_tol, rtol=lse_tol)
    assert torch.isneginf(lse[rows][~finite]).all()
    assert torch.equal(out[other], out0[other]) and torch.equal(lse[other], lse0[other])


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("fused_step", [False, True], ids=["plain", "fused"])
def test_grouped_context_matches_ref(case, dtype, merge, fused_step):
    n_q, n_kv, d, lens = CASES[case]
    seg, T, C = _layout([a for a, _ in lens], [b for _, b in lens])
    # bf16: inputs and probabilities rounded to 8 bits, output once more
    _check(n_q, n_kv, d, seg, T, C, False, dtype, merge, 32, F32_TOL if dtype == torch.float32 else 3e-2, fused_step)


@pytest.mark.parametrize("case", range(len(CAUSAL_CASES)))
@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("fused_step", [False, True], ids=["plain", "fused"])
def test_causal_segments_match_ref(case, block_m, fused_step):
    n_q, n_kv, d, lens = CAUSAL_CASES[case]
    seg, T, _ = _layout(lens, lens)
    seg[2] = seg[0]  # a sequence's own keys: same rows as its queries
    _check(n_q, n_kv, d, seg, T, T, True, torch.float32, True, block_m, F32_TOL, fused_step)


def test_bad_arguments():
    q = torch.randn(6, 4, 16, device=DEVICE)
    k = torch.randn(6, 2, 16, device=DEVICE)
    seg = torch.from_numpy(segments([0], [6], [0], [6])).to(DEVICE)
    items = torch.from_numpy(seg_items([6], 8)).to(DEVICE)
    with pytest.raises(ValueError, match=r"seg must be a contiguous int32 \[4, n_seg\]"):
        seg_attention(q, k, k, seg[:3], items, 8)
    with pytest.raises(ValueError, match=r"merge=True needs the partial out and lse"):
        seg_attention(q, k, k, seg, items, 8, merge=True)
    with pytest.raises(ValueError, match=r"need n_q % n_kv == 0"):
        seg_attention(torch.randn(6, 5, 16, device=DEVICE), k, k, seg, items, 8)
    with pytest.raises(ValueError, match=r"k must have contiguous heads"):
        seg_attention(q, k.transpose(0, 1).contiguous().transpose(0, 1), k, seg, items, 8)


@pytest.mark.skipif(DEVICE != "cuda", reason="the production launch (TMA, 128-key tiles) runs compiled only")
@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("fused_step", [None, True], ids=["default", "fused"])
def test_production_launch_matches_ref(merge, fused_step):
    """The launch the engine uses for shared contexts on the H200 (gpu_worker.cuda_ops.CTX_CONFIG):
    d=128, 32 query / 8 KV heads, 128-row query tiles, 128-key tiles, 3 stages, keys through TMA
    descriptors; bf16, a join's shape (one anchor's partners against its context, odd lengths)."""
    from gpu_worker.cuda_ops import CTX_CONFIG

    n_q, n_kv, d = 32, 8, 128
    seg, T, C = _layout([1013, 45, 7], [5003, 129, 4100])
    g = torch.Generator().manual_seed(7)
    q = torch.randn(T, n_q, d, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(C, n_kv, d, generator=g).to(torch.bfloat16) for _ in range(2))
    out0, lse0 = torch.randn(T, n_q, d, generator=g).to(torch.bfloat16), torch.randn(T, n_q, generator=g)
    bt = seg_block_t(n_q // n_kv, CTX_CONFIG["block_m"])
    items = torch.from_numpy(seg_items(seg[1], bt)).cuda()
    out, lse = seg_attention(q.cuda(), k.cuda(), v.cuda(), torch.from_numpy(seg).cuda(), items, bt,
                             out=out0.clone().cuda(), lse=lse0.clone().cuda(), merge=merge,
                             block_n=CTX_CONFIG["block_n"], num_warps=CTX_CONFIG["num_warps"],
                             num_stages=CTX_CONFIG["num_stages"], tma=CTX_CONFIG["tma"], fused_step=fused_step)
    ref_o, ref_l = seg_attention_ref(q, k, v, seg, out=out0, lse=lse0, merge=merge)
    rows = np.concatenate([np.arange(s, s + n) for s, n in zip(seg[0], seg[1])])
    torch.testing.assert_close(out.cpu().float()[rows], ref_o[rows], atol=3e-2, rtol=3e-2)  # bf16 inputs
    torch.testing.assert_close(lse.cpu()[rows], ref_l[rows], atol=2e-2, rtol=2e-2)
