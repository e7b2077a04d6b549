"""Triton kernels vs their pure-torch references, and the references vs
independent formulations (Hugging Face modules, complex rotation, softmax).

Runs in Triton's CPU interpreter (TRITON_INTERPRET=1, the default here) or, with
TRITON_INTERPRET=0 on a machine with CUDA, on the GPU with compiled kernels.
"""

import os

# Triton picks interpreter or compiler when it is first imported (its tl.sum &
# co. are jit functions), so the flag must be set before anything imports
# triton, transformers' modeling code included. conftest.py sets it too.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import quail_kernels as kernels  # noqa: E402
from quail_kernels import (  # noqa: E402
    fused_add_rmsnorm,
    fused_add_rmsnorm_ref,
    merge_attn,
    merge_attn_ref,
    qk_norm_rope,
    qk_norm_rope_ref,
    rmsnorm,
    rmsnorm_ref,
    silu_and_mul,
    silu_and_mul_ref,
)
from quail_kernels._util import interpreter_active  # noqa: E402

if interpreter_active():
    DEVICE = "cpu"
elif torch.cuda.is_available():
    DEVICE = "cuda"
else:
    pytest.skip(
        "triton was imported before TRITON_INTERPRET=1 was set and there is no CUDA device; "
        "set TRITON_INTERPRET=1 before the first `import triton` (e.g. in tests/conftest.py)",
        allow_module_level=True,
    )

# Tolerances.
# float32: kernel and reference do the same float32 math in a different order
# (tree-shaped tl.sum vs torch's reduction, 1/sqrt vs rsqrt), a few float32
# ulps apart: rtol = atol = 1e-5.
# bfloat16 keeps 8 significant bits, so one rounding moves a value by up to
# 2^-8 relative (to nearest). Torch and the GPU round float32 -> bfloat16 to
# nearest even, but Triton's interpreter truncates, so every bf16 rounding step
# of an op may land one bf16 ulp (at most 2^-7 relative) away from torch's.
# An op with n rounding steps gets rtol = atol = n * 2^-7 (rmsnorm: 2, fused
# add + rmsnorm: 3, silu_and_mul and merge: 1, rope: 1, plus 2 with QK-norm).
BF16_STEP = 2.0**-7


def assert_matches(out, ref, bf16_steps=1):
    assert out.dtype == ref.dtype, f"dtype {out.dtype} != {ref.dtype}"
    assert out.shape == ref.shape, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    tol = 1e-5 if ref.dtype == torch.float32 else bf16_steps * BF16_STEP
    torch.testing.assert_close(out.float().cpu(), ref.float().cpu(), rtol=tol, atol=tol)


def randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype).to(DEVICE)


DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["f32", "bf16"]
ROWS = [(1, 64), (6, 96), (42, 123), (123, 576)]  # (T, D), odd D included


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- rmsnorm


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("T,D", ROWS)
def test_rmsnorm_matches_ref(T, D, dtype):
    x, w = randn(T, D, dtype=dtype, scale=3.0), randn(D, dtype=dtype)
    assert_matches(rmsnorm(x, w, 1e-6), rmsnorm_ref(x, w, 1e-6), bf16_steps=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("T,D", ROWS)
def test_fused_add_rmsnorm_matches_ref(T, D, dtype):
    x, res, w = randn(T, D, dtype=dtype), randn(T, D, dtype=dtype), randn(D, dtype=dtype)
    y, new_res = fused_add_rmsnorm(x, res, w, 1e-5)
    y_ref, new_res_ref = fused_add_rmsnorm_ref(x, res, w, 1e-5)
    assert_matches(new_res, new_res_ref, bf16_steps=1)
    assert_matches(y, y_ref, bf16_steps=3)


def test_rmsnorm_strided_rows_and_float32_weight():
    # x: every other row of a wider buffer (row stride 2*D); weight kept in float32
    buf = randn(12, 2 * 96, dtype=torch.bfloat16)
    x = buf[:, :96]
    w = randn(96)
    assert_matches(rmsnorm(x, w, 1e-6), rmsnorm_ref(x, w, 1e-6), bf16_steps=2)


def test_rmsnorm_empty():
    x = randn(0, 64)
    assert rmsnorm(x, randn(64), 1e-6).shape == (0, 64)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rmsnorm_ref_equals_hf_llama(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf = LlamaRMSNorm(123, eps=1e-6)
    with torch.no_grad():
        hf.weight.copy_(torch.randn(123))
    hf = hf.to(dtype)
    x = torch.randn(6, 123).to(dtype)
    with torch.no_grad():
        assert torch.equal(rmsnorm_ref(x, hf.weight, 1e-6), hf(x))
        y, new_res = fused_add_rmsnorm_ref(x, x.flip(0), hf.weight, 1e-6)
        assert torch.equal(new_res, x + x.flip(0))
        assert torch.equal(y, hf(x + x.flip(0)))


# ---------------------------------------------------------------- rope


def rope_tables(max_pos, d, base=10000.0):
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv_freq)
    return freqs.cos(), freqs.sin()  # [max_pos, d/2] each


def rope_case(T, n_q, n_kv, d, dtype, qk_norm):
    # q, k, v: views of one fused qkv projection [T, (n_q + 2 n_kv) * d]
    qkv = randn(T, (n_q + 2 * n_kv) * d, dtype=dtype)
    q = qkv[:, : n_q * d].view(T, n_q, d)
    k = qkv[:, n_q * d : (n_q + n_kv) * d].view(T, n_kv, d)
    v = qkv[:, (n_q + n_kv) * d :].view(T, n_kv, d)
    cos, sin = (t.to(DEVICE) for t in rope_tables(300, d))
    positions = torch.randint(0, 300, (T,)).to(DEVICE)
    weights = (None, None)
    if qk_norm:
        weights = (1.0 + randn(d, dtype=dtype, scale=0.1), 1.0 + randn(d, dtype=dtype, scale=0.1))
    return q, k, v, positions, cos, sin, weights


ROPE_CASES = [  # (T, n_q, n_kv, d, qk_norm)
    (1, 9, 3, 64, True),
    (6, 9, 3, 64, False),  # GQA 3:1, Llama
    (6, 9, 3, 64, True),  # GQA 3:1, Qwen3
    (42, 4, 2, 128, True),
    (6, 3, 1, 42, True),  # d/2 = 21: masked tail
    (123, 2, 1, 96, False),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("T,n_q,n_kv,d,qk_norm", ROPE_CASES)
def test_qk_norm_rope_matches_ref(T, n_q, n_kv, d, qk_norm, dtype):
    q, k, v, pos, cos, sin, (qw, kw) = rope_case(T, n_q, n_kv, d, dtype, qk_norm)
    n_slots = T + 5
    slots = torch.randperm(n_slots)[:T].to(DEVICE)
    kc, vc = randn(n_slots, n_kv, d, dtype=dtype), randn(n_slots, n_kv, d, dtype=dtype)
    kc_ref, vc_ref = kc.clone(), vc.clone()
    q_out, k_out = qk_norm_rope(q, k, v, pos, cos, sin, qw, kw, 1e-6, kc, vc, slots)
    q_ref, k_ref = qk_norm_rope_ref(q, k, v, pos, cos, sin, qw, kw, 1e-6, kc_ref, vc_ref, slots)
    steps = 3 if qk_norm else 1
    assert_matches(q_out, q_ref, bf16_steps=steps)
    assert_matches(k_out, k_ref, bf16_steps=steps)
    assert_matches(kc, kc_ref, bf16_steps=steps)
    assert torch.equal(vc, vc_ref)  # v is copied, not rounded


def test_qk_norm_rope_without_cache():
    q, k, v, pos, cos, sin, (qw, kw) = rope_case(6, 4, 2, 128, torch.float32, True)
    q_out, k_out = qk_norm_rope(q, k, None, pos, cos, sin, qw, kw, 1e-6, None, None, None)
    q_ref, k_ref = qk_norm_rope_ref(q, k, None, pos, cos, sin, qw, kw, 1e-6, None, None, None)
    assert_matches(q_out, q_ref)
    assert_matches(k_out, k_ref)


def test_qk_norm_rope_skips_slot_minus_one_and_out_of_range():
    q, k, v, pos, cos, sin, (qw, kw) = rope_case(6, 9, 3, 64, torch.float32, False)
    kc = torch.full((10, 3, 64), 7.0, device=DEVICE)
    vc = torch.full((10, 3, 64), 7.0, device=DEVICE)
    slots = torch.tensor([4, -1, 0, -1, 9, 10], device=DEVICE)  # 10 == n_slots: out of range
    _, k_out = qk_norm_rope(q, k, v, pos, cos, sin, None, None, 1e-6, kc, vc, slots)
    stored = {4: 0, 0: 2, 9: 4}  # slot -> token
    for slot in range(10):
        if slot in stored:
            assert torch.equal(kc[slot], k_out[stored[slot]])
            assert torch.equal(vc[slot], v[stored[slot]])
        else:
            assert (kc[slot] == 7.0).all() and (vc[slot] == 7.0).all(), f"slot {slot} was written"


def test_rope_ref_equals_hf_apply_rotary_pos_emb():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    T, n_q, n_kv, d = 6, 4, 2, 64
    q, k = torch.randn(T, n_q, d), torch.randn(T, n_kv, d)
    cos, sin = rope_tables(50, d)
    pos = torch.randint(0, 50, (T,))
    q_ref, k_ref = qk_norm_rope_ref(q, k, None, pos, cos, sin, None, None, 1e-6, None, None, None)
    # HF: q [B, H, S, d], cos/sin [B, S, d] with the half-table repeated
    cos_hf = torch.cat((cos[pos], cos[pos]), dim=-1)[None]
    sin_hf = torch.cat((sin[pos], sin[pos]), dim=-1)[None]
    q_hf, k_hf = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos_hf, sin_hf)
    torch.testing.assert_close(q_ref, q_hf[0].transpose(0, 1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(k_ref, k_hf[0].transpose(0, 1), rtol=1e-6, atol=1e-6)


def test_rope_ref_equals_complex_rotation():
    # rotate_half pairs element i with i + d/2: z = x1 + i x2, rotated z * e^(i pos theta)
    T, H, d = 6, 3, 64
    q = torch.randn(T, H, d, dtype=torch.float64)
    pos = torch.randint(0, 50, (T,))
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = pos[:, None].double() * inv_freq[None, :]  # [T, d/2]
    z = torch.complex(q[..., : d // 2], q[..., d // 2 :]) * torch.polar(torch.ones_like(angle), angle)[:, None, :]
    expected = torch.cat((z.real, z.imag), dim=-1).float()
    cos, sin = rope_tables(50, d)
    q_ref, _ = qk_norm_rope_ref(q.float(), q.float(), None, pos, cos, sin, None, None, 1e-6, None, None, None)
    # float32 tables: angle rounding (pos * theta up to ~50) costs ~1e-5 absolute
    torch.testing.assert_close(q_ref, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_qk_norm_ref_equals_hf_qwen3_rmsnorm(dtype):
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    T, H, d = 6, 3, 64
    norm = Qwen3RMSNorm(d, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.1 * torch.randn(d))
    norm = norm.to(dtype)
    q = torch.randn(T, H, d).to(dtype)
    zeros = torch.zeros(1, d // 2)  # position 0: the rotation is the identity
    pos = torch.zeros(T, dtype=torch.int64)
    with torch.no_grad():
        q_ref, _ = qk_norm_rope_ref(q, q, None, pos, zeros + 1, zeros, norm.weight, norm.weight, 1e-6, None, None, None)
        assert torch.equal(q_ref, norm(q))


# ---------------------------------------------------------------- silu_and_mul


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("T,F", [(1, 64), (6, 123), (42, 576), (7, 1100)])  # 1100: two column blocks
def test_silu_and_mul_matches_ref(T, F, dtype):
    gate_up = randn(T, 2 * F, dtype=dtype, scale=4.0)
    assert_matches(silu_and_mul(gate_up), silu_and_mul_ref(gate_up), bf16_steps=1)


def test_silu_and_mul_ref_equals_sigmoid_form():
    gate_up = torch.randn(6, 2 * 123, dtype=torch.float64) * 10
    g, u = gate_up[:, :123], gate_up[:, 123:]
    expected = g * torch.sigmoid(g) * u
    torch.testing.assert_close(silu_and_mul_ref(gate_up.float()).double(), expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- merge_attn


def partial_attention(scores, values):
    # scores: [T, H, N], values: [T, H, N, d] -> out [T, H, d], lse [T, H]
    return torch.einsum("thn,thnd->thd", torch.softmax(scores, dim=-1), values), torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("T,H,d", [(1, 1, 64), (6, 9, 64), (42, 4, 128), (123, 3, 42)])
def test_merge_attn_matches_ref(T, H, d, dtype):
    out_a, out_b = randn(T, H, d, dtype=dtype), randn(T, H, d, dtype=dtype)
    lse_a, lse_b = randn(T, H, scale=3.0), randn(T, H, scale=3.0)
    lse_a[0, 0] = float("-inf")
    out, lse = merge_attn(out_a, lse_a, out_b, lse_b)
    out_ref, lse_ref = merge_attn_ref(out_a, lse_a, out_b, lse_b)
    assert_matches(out, out_ref, bf16_steps=1)
    assert_matches(lse, lse_ref)


def test_merge_attn_transposed_lse():
    # flash-style lse comes as [H, T]; a transposed view must work as is
    out_a, out_b = randn(6, 4, 64), randn(6, 4, 64)
    lse_a, lse_b = randn(4, 6).t(), randn(4, 6).t()
    out, lse = merge_attn(out_a, lse_a, out_b, lse_b)
    out_ref, lse_ref = merge_attn_ref(out_a, lse_a, out_b, lse_b)
    assert_matches(out, out_ref)
    assert_matches(lse, lse_ref)


def test_merge_attn_minus_inf_parts():
    T, H, d = 4, 2, 40
    out_a, out_b = randn(T, H, d), randn(T, H, d)
    lse_a, lse_b = randn(T, H), randn(T, H)
    inf = float("-inf")
    lse_a[0], out_a[0] = inf, float("nan")  # a saw no key (its out may be garbage)
    lse_b[1], out_b[1] = inf, float("nan")  # b saw no key
    lse_a[2], lse_b[2] = inf, inf  # neither: out 0, lse -inf
    out_a[2], out_b[2] = float("nan"), float("nan")
    lse_a[3], lse_b[3] = 1000.0, 0.0  # far apart: no overflow, b vanishes
    for impl in (merge_attn, merge_attn_ref):
        out, lse = impl(out_a, lse_a, out_b, lse_b)
        assert not out.isnan().any() and not lse.isnan().any(), impl.__name__
        torch.testing.assert_close(out[0], out_b[0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out[1], out_a[1], rtol=1e-6, atol=1e-6)
        assert (out[2] == 0).all() and (lse[2] == inf).all()
        torch.testing.assert_close(out[3], out_a[3], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(lse[:2], torch.stack((lse_b[0], lse_a[1])))
        torch.testing.assert_close(lse[3], lse_a[3])


def test_merge_ref_equals_softmax_over_concatenated_keys():
    T, H, d, n_a, n_b = 6, 3, 16, 7, 5
    s_a, s_b = torch.randn(T, H, n_a, dtype=torch.float64) * 4, torch.randn(T, H, n_b, dtype=torch.float64) * 4
    v_a, v_b = torch.randn(T, H, n_a, d, dtype=torch.float64), torch.randn(T, H, n_b, d, dtype=torch.float64)
    s_a[0] = float("-inf")  # token 0: the cached part is fully masked
    out_all, lse_all = partial_attention(torch.cat((s_a, s_b), -1), torch.cat((v_a, v_b), -2))
    out_a, lse_a = partial_attention(s_a, v_a)  # token 0: out NaN, lse -inf
    out_b, lse_b = partial_attention(s_b, v_b)
    out, lse = merge_attn_ref(out_a.float(), lse_a.float(), out_b.float(), lse_b.float())
    torch.testing.assert_close(out.double(), out_all, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), lse_all, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- validation


def _rope_args(**override):
    q, k, v, pos, cos, sin, (qw, kw) = rope_case(6, 4, 2, 64, torch.float32, True)
    args = dict(q=q, k=k, v=v, positions=pos, cos=cos, sin=sin, q_norm_weight=qw, k_norm_weight=kw, eps=1e-6,
                k_cache=None, v_cache=None, slots=None)
    args.update(override)
    return args


BAD_CALLS = [
    ("rmsnorm 3d x", lambda: rmsnorm(randn(2, 3, 64), randn(64), 1e-6), r"x: expected 2 dims, got 3"),
    ("rmsnorm weight size", lambda: rmsnorm(randn(6, 123), randn(122), 1e-6),
     r"weight: expected shape \(123\), got \(122\)"),
    ("rmsnorm int x", lambda: rmsnorm(torch.ones(6, 64, dtype=torch.int32, device=DEVICE), randn(64), 1e-6),
     r"x: expected dtype in .*got torch.int32"),
    ("rmsnorm transposed x", lambda: rmsnorm(randn(64, 6).t(), randn(64), 1e-6),
     r"x: expected the last dim contiguous"),
    ("rmsnorm eps", lambda: rmsnorm(randn(6, 64), randn(64), -1.0), r"eps: expected a non-negative float"),
    ("fused residual dtype",
     lambda: fused_add_rmsnorm(randn(6, 64), randn(6, 64, dtype=torch.bfloat16), randn(64), 1e-6),
     r"residual: expected dtype torch.float32, got torch.bfloat16"),
    ("fused residual shape", lambda: fused_add_rmsnorm(randn(6, 64), randn(5, 64), randn(64), 1e-6),
     r"residual: expected shape \(6, 64\), got \(5, 64\)"),
    ("rope int32 positions", lambda: qk_norm_rope(**_rope_args(positions=torch.zeros(6, dtype=torch.int32))),
     r"positions: expected dtype torch.int64, got torch.int32"),
    ("rope cos width", lambda: qk_norm_rope(**_rope_args(cos=randn(50, 64), sin=randn(50, 64))),
     r"cos: expected shape \(\*, 32\), got \(50, 64\)"),
    ("rope k head size", lambda: qk_norm_rope(**_rope_args(k=randn(6, 2, 32))),
     r"k: expected shape \(6, \*, 64\), got \(6, 2, 32\)"),
    ("rope odd d", lambda: qk_norm_rope(**_rope_args(q=randn(6, 4, 63))), r"q: expected an even head size"),
    ("rope one norm weight", lambda: qk_norm_rope(**_rope_args(k_norm_weight=None)),
     r"q_norm_weight, k_norm_weight: expected both"),
    ("rope k_cache alone", lambda: qk_norm_rope(**_rope_args(k_cache=randn(10, 2, 64))),
     r"k_cache, v_cache, slots: expected all three"),
    ("rope k_cache heads",
     lambda: qk_norm_rope(**_rope_args(k_cache=randn(10, 3, 64), v_cache=randn(10, 3, 64),
                                       slots=torch.arange(6, device=DEVICE))),
     r"k_cache: expected shape \(\*, 2, 64\), got \(10, 3, 64\)"),
    ("silu odd width", lambda: silu_and_mul(randn(6, 123)), r"gate_up: expected an even number of columns"),
    ("merge lse dtype", lambda: merge_attn(randn(6, 4, 64), randn(6, 4, dtype=torch.bfloat16), randn(6, 4, 64),
                                           randn(6, 4)), r"lse_a: expected dtype torch.float32, got torch.bfloat16"),
    ("merge out_b shape", lambda: merge_attn(randn(6, 4, 64), randn(6, 4), randn(6, 4, 32), randn(6, 4)),
     r"out_b: expected shape \(6, 4, 64\), got \(6, 4, 32\)"),
]


@pytest.mark.parametrize("call,match", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.skipif(DEVICE != "cpu", reason="checks the CPU-tensor rules of the interpreter")
def test_cpu_tensor_needs_the_interpreter(monkeypatch):
    import quail_kernels._util as util

    monkeypatch.setattr(util, "interpreter_active", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"x: expected a CUDA tensor .*got a tensor on cpu"):
        rmsnorm(randn(6, 64), randn(64), 1e-6)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match=r"TRITON_INTERPRET=1 set after triton was imported"):
        rmsnorm(randn(6, 64), randn(64), 1e-6)


def test_triton_available():
    assert kernels.triton_available()
