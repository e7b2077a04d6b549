"""quail_kernels.varlen_attention against its float32 reference (Triton's interpreter on CPU, compiled on a GPU)."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from quail_kernels._util import interpreter_active, query_blocks  # noqa: E402
from quail_kernels.varlen_attention import varlen_attention, varlen_attention_ref  # noqa: E402

DEVICE = "cpu" if interpreter_active() else ("cuda" if torch.cuda.is_available() else None)
if DEVICE is None:
    pytest.skip("needs Triton's interpreter or a CUDA device", allow_module_level=True)

TOL = {torch.float32: 1e-5 if DEVICE == "cpu" else 2e-2, torch.bfloat16: 3e-2}
# (n_q, n_kv, d, sequence lengths, folded context lengths or None): GQA factors 1, 2, 3, 4, odd lengths
CASES = [(8, 2, 32, [13, 1, 40, 7], None), (6, 2, 16, [5, 33], [30, 0]), (4, 4, 16, [64, 65, 2], [1, 128, 9]),
         (12, 4, 32, [3, 3, 3, 3, 3], [12, 12, 12, 12, 12])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n_q,n_kv,d,lens,folds", CASES)
def test_varlen_attention_matches_reference(n_q, n_kv, d, lens, folds, dtype):
    g = torch.Generator().manual_seed(sum(lens) * 7 + n_q)
    T = sum(lens)
    q = torch.randn(T, n_q, d, generator=g).to(dtype)
    k, v = (torch.randn(T, n_kv, d, generator=g).to(dtype) for _ in range(2))
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32)
    rep = n_q // n_kv
    block_t = max(1, 64 // rep)
    items = torch.from_numpy(query_blocks(lens, block_t, longest_first=True)).to(torch.int32)
    kf = vf = fold = None
    if folds is not None:
        F = sum(folds)
        kf, vf = (torch.randn(F, n_kv, d, generator=g).to(dtype) for _ in range(2))
        fold = torch.tensor(np.stack([np.concatenate([[0], np.cumsum(folds)[:-1]]), folds]), dtype=torch.int32)
    dev = lambda x: None if x is None else x.to(DEVICE).contiguous()  # noqa: E731
    out, lse = varlen_attention(dev(q), dev(k), dev(v), dev(items), dev(cu), dev(cu), block_t, causal=True,
                                kf=dev(kf), vf=dev(vf), fold=dev(fold))
    ref_o, ref_l = varlen_attention_ref(q, k, v, cu, cu, causal=True, kf=kf, vf=vf, fold=fold)
    tol = TOL[dtype]
    torch.testing.assert_close(out.float().cpu(), ref_o, atol=tol, rtol=tol)
    torch.testing.assert_close(lse.cpu(), ref_l, atol=tol, rtol=tol)


def test_varlen_attention_unmasked_context():
    """causal=False: each query sequence over its own key rows (a group's partners over a context)."""
    g = torch.Generator().manual_seed(3)
    q_lens, k_lens = [9, 30], [50, 17]
    q = torch.randn(sum(q_lens), 8, 32, generator=g)
    k, v = (torch.randn(sum(k_lens), 2, 32, generator=g) for _ in range(2))
    cu_q, cu_k = (torch.tensor(np.concatenate([[0], np.cumsum(x)]), dtype=torch.int32) for x in (q_lens, k_lens))
    items = torch.from_numpy(query_blocks(q_lens, 16)).to(torch.int32)
    out, lse = varlen_attention(*(x.to(DEVICE) for x in (q, k, v, items, cu_q, cu_k)), 16, causal=False)
    ref_o, ref_l = varlen_attention_ref(q, k, v, cu_q, cu_k, causal=False)
    torch.testing.assert_close(out.cpu(), ref_o, atol=TOL[torch.float32], rtol=TOL[torch.float32])
    torch.testing.assert_close(lse.cpu(), ref_l, atol=TOL[torch.float32], rtol=TOL[torch.float32])


def test_varlen_attention_names_a_cpu_tensor_on_the_gpu_path():
    if DEVICE == "cpu":
        pytest.skip("checks a device mismatch on a GPU")
    q = torch.randn(4, 2, 16, device="cuda")
    k = torch.randn(4, 2, 16)
    cu = torch.tensor([0, 4], dtype=torch.int32, device="cuda")
    items = torch.zeros(2, 1, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="k: expected device"):
        varlen_attention(q, k, k, items, cu, cu, 16, causal=True)
