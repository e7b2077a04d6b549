"""SwiGLU activation on a fused gate/up projection: silu(gate) * up.

gate_up: [T, 2F], columns [0, F) are the gate and [F, 2F) the up projection
(one GEMM with the two weight matrices stacked). Computed in float32, rounded
once to the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels._util import FLOAT_DTYPES, block_size, check_device, check_tensor


@triton.jit
def _silu_and_mul_kernel(gu_ptr, out_ptr, F, stride_gu, stride_out, BLOCK_F: tl.constexpr):
    # program (t, f-block); gate_up row t: [2F], out row t: [F]
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = cols < F
    g = tl.load(gu_ptr + t * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + t * stride_gu + F + cols, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + t * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def check_gate_up(gate_up: torch.Tensor) -> tuple[int, int]:
    """(T, F) of a [T, 2F] gate/up projection; ValueError naming what is wrong."""
    check_tensor("gate_up", gate_up, ndim=2, dtypes=FLOAT_DTYPES)
    T, two_f = gate_up.shape
    if two_f % 2:
        raise ValueError(f"gate_up: expected an even number of columns [T, 2F], got {two_f}")
    check_device(gate_up=gate_up)
    return T, two_f // 2


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """out[T, F] = silu(gate_up[:, :F]) * gate_up[:, F:], in gate_up.dtype."""
    T, F = check_gate_up(gate_up)
    out = torch.empty((T, F), dtype=gate_up.dtype, device=gate_up.device)
    if T == 0 or F == 0:
        return out
    BLOCK_F = min(block_size(F), 1024)
    grid = (T, triton.cdiv(F, BLOCK_F))
    _silu_and_mul_kernel[grid](gate_up, out, F, gate_up.stride(0), out.stride(0), BLOCK_F=BLOCK_F, num_warps=4)
    return out


def silu_and_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    F = gate_up.shape[-1] // 2
    g, u = gate_up[:, :F].float(), gate_up[:, F:].float()
    return (torch.nn.functional.silu(g) * u).to(gate_up.dtype)
