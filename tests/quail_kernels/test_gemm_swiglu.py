"""The fused SwiGLU GEMM (quail_kernels/gemm_swiglu.py) against float32 of the stacked weight.

Triton's interpreter on the CPU (small tiles: CPU_CONFIG), compiled on a Hopper GPU (GPU_CONFIG, the
engine's launch); both tile sizes run in the interpreter too, so the engine's launch is checked here.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from quail_kernels._util import interpreter_active  # noqa: E402
from quail_kernels.gemm_swiglu import (  # noqa: E402
    CPU_CONFIG,
    GPU_CONFIG,
    deinterleave_gate_up,
    gate_up_block,
    gemm_swiglu,
    gemm_swiglu_ref,
    interleave_gate_up,
)

DEVICE = "cpu" if interpreter_active() else ("cuda" if torch.cuda.is_available() else None)
if DEVICE is None:
    pytest.skip("needs Triton's interpreter or a CUDA device", allow_module_level=True)
HOPPER = DEVICE == "cuda" and torch.cuda.get_device_capability()[0] >= 9
if DEVICE == "cuda" and not HOPPER:
    pytest.skip("the fused SwiGLU GEMM reads through tensor descriptors: Hopper or later", allow_module_level=True)
BLOCK = CPU_CONFIG["block"] if DEVICE == "cpu" else GPU_CONFIG["block"]
DTYPES = [torch.float16, torch.bfloat16] if DEVICE == "cuda" else [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _case(T, K, F, dtype):
    x = torch.randn(T, K).to(dtype).to(DEVICE)
    w = (torch.randn(2 * F, K) * K ** -0.5).to(dtype).to(DEVICE)
    return x, w


def _check(got, want, dtype):
    # float32: the same float32 products in another order. bf16 (inputs exact in both): the reference
    # rounds once, the kernel once; the interpreter truncates where the GPU rounds: one bf16 step of the
    # output's scale
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = want.float().abs().max().item() + 1e-6
    tol = 1e-5 if dtype == torch.float32 else 2.0**-7
    err = (got.float() - want.float()).abs().max().item() / scale
    assert err <= tol, f"max error {err:.3g} of the output's scale (tolerance {tol:.3g})"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("T,K,F", [(1, 64, BLOCK), (37, 64, 3 * BLOCK), (130, 96, 2 * BLOCK), (300, 40, BLOCK),
                                   (50, 64, 96)])
def test_matches_the_stacked_weight_in_float32(T, K, F, dtype):
    """Rows not a multiple of the tile, K not a multiple of the inner step (40: zero-filled by the
    descriptors), several output blocks, F = 96 (the block gate_up_block picks for it)."""
    x, w = _case(T, K, F, dtype)
    block = gate_up_block(w)
    assert block
    _check(gemm_swiglu(x, interleave_gate_up(w, block), block), gemm_swiglu_ref(x, w), dtype)


@pytest.mark.skipif(DEVICE != "cpu", reason="the GPU runs its own launch in the test above")
def test_the_engines_gpu_launch_in_the_interpreter():
    """GPU_CONFIG's tiles (128 x 256 x 64) on the CPU: rows, columns and K all past one tile."""
    x, w = _case(200, 136, 2 * GPU_CONFIG["block"], torch.float32)
    got = gemm_swiglu(x, interleave_gate_up(w, GPU_CONFIG["block"]), GPU_CONFIG["block"],
                      config={k: v for k, v in GPU_CONFIG.items() if k != "block"})
    _check(got, gemm_swiglu_ref(x, w), torch.float32)


def test_a_view_that_is_not_aligned_or_contiguous():
    """x starting 3 elements into its storage (not 16-byte aligned), and x as every other row."""
    dtype = DTYPES[-1]
    x, w = _case(20, 64, BLOCK, dtype)
    buf = torch.zeros(3 + x.numel(), dtype=dtype, device=DEVICE)
    buf[3:] = x.reshape(-1)
    shifted = buf[3:].view(20, 64)
    w_il = interleave_gate_up(w, BLOCK)
    _check(gemm_swiglu(shifted, w_il, BLOCK), gemm_swiglu_ref(x, w), dtype)
    _check(gemm_swiglu(x[::2], w_il, BLOCK), gemm_swiglu_ref(x[::2], w), dtype)


def test_no_rows_gives_no_rows():
    x, w = _case(0, 64, BLOCK, DTYPES[-1])
    out = gemm_swiglu(x, interleave_gate_up(w, BLOCK), BLOCK)
    assert out.shape == (0, BLOCK)


def test_interleave_round_trip_and_layout():
    w = torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3)  # F = 4, blocks of 2 rows
    il = interleave_gate_up(w, 2)
    assert il[:, 0].tolist() == [0, 3, 12, 15, 6, 9, 18, 21]  # gate rows 0-1, up rows 0-1, gate 2-3, up 2-3
    assert torch.equal(deinterleave_gate_up(il, 2), w)
    with pytest.raises(ValueError, match=r"F a multiple of 3"):
        interleave_gate_up(w, 3)


def test_block_rules():
    """Where the fused kernel runs (its block) and where the engine keeps cuBLAS + SiLU-and-mul (0)."""
    dtype = DTYPES[-1]
    assert gate_up_block(torch.zeros(2 * BLOCK, 64, dtype=dtype, device=DEVICE)) == BLOCK
    assert gate_up_block(torch.zeros(2 * BLOCK + 2, 64, dtype=dtype, device=DEVICE)) == 0  # F not a multiple
    if DEVICE == "cuda":  # a smaller block where F is not a multiple of the largest
        assert gate_up_block(torch.zeros(2 * 96, 64, dtype=dtype, device=DEVICE)) == 32
    assert gate_up_block(torch.zeros(2 * BLOCK, 63, dtype=dtype, device=DEVICE)) == 0  # rows not 16-byte aligned
    assert gate_up_block(torch.zeros(2 * BLOCK, 64, dtype=torch.float64, device=DEVICE)) == 0
    if DEVICE == "cuda":  # float32 would take tf32 products
        assert gate_up_block(torch.zeros(2 * BLOCK, 64, dtype=torch.float32, device=DEVICE)) == 0


def test_errors_name_the_argument():
    x, w = _case(4, 64, BLOCK, DTYPES[-1])
    with pytest.raises(ValueError, match=r"weight: expected shape \(\*, 64\)"):
        gemm_swiglu(x, w[:, :32].contiguous(), BLOCK)
    with pytest.raises(ValueError, match=r"interleaved in blocks of 7 rows"):
        gemm_swiglu(x, w, 7)
    with pytest.raises(ValueError, match=r"weight: expected dtype"):
        gemm_swiglu(x, w.double(), BLOCK)
