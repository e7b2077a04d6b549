"""RMSNorm and fused residual-add + RMSNorm (Llama / Qwen3 layer norms).

Casting follows Hugging Face's LlamaRMSNorm exactly:
    y = weight * (h.float() * rsqrt(mean(h.float()^2) + eps)).to(x.dtype)
i.e. the normalised row is rounded to the input dtype BEFORE the weight
multiply; the product is rounded to x.dtype again. The residual add is done in
the input dtype (as the unfused model does: `h = residual + x` in bf16), so the
fused path gives bit-for-bit the same h as the unfused one.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels._util import (
    FLOAT_DTYPES,
    block_size,
    check_device,
    check_tensor,
    num_warps_for,
)
from quail_kernels._quant import finish, quant_buffers, store_quant


@triton.jit
def _rmsnorm_kernel(
    x_ptr, res_ptr, w_ptr, y_ptr, new_res_ptr, scale_ptr,
    D, stride_x, stride_res, stride_y, stride_new_res, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK_D: tl.constexpr, QUANT: tl.constexpr,
):
    # one program per row t; x: [T, D]
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
        # add in float32, round to the input dtype like `residual + x` does
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(new_res_ptr + row * stride_new_res + cols, x, mask=mask)
    h = x.to(tl.float32)
    mean_sq = tl.sum(h * h, axis=0) / D
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    normed = (h * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (w * normed).to(x_ptr.dtype.element_ty)
    if QUANT:  # float8 row with its scale: y ~= q * scale (quail_kernels/_quant.py)
        store_quant(y_ptr, scale_ptr, row, stride_y, cols, mask, y.to(tl.float32))
    else:
        tl.store(y_ptr + row * stride_y + cols, y, mask=mask)


def _check(x, residual, weight, eps):
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    T, D = x.shape
    if residual is not None:
        check_tensor("residual", residual, shape=(T, D), dtype=x.dtype)
    check_tensor("weight", weight, shape=(D,), dtypes=FLOAT_DTYPES)
    if not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps: expected a non-negative float, got {eps!r}")
    check_device(x=x, residual=residual, weight=weight)


def _launch(x, residual, weight, eps, quant=False):
    """(y, new_residual); quant: y is (float8 rows, float32 scales [T, 1]) instead."""
    T, D = x.shape
    y, scale = quant_buffers(T, D, x.device) if quant else (torch.empty((T, D), dtype=x.dtype, device=x.device), None)
    new_res = torch.empty_like(x) if residual is not None else x
    if T == 0:
        return (finish(y, scale) if quant else y), new_res
    res = residual if residual is not None else x  # placeholder when absent; never read
    BLOCK_D = block_size(D)
    _rmsnorm_kernel[(T,)](
        x, res, weight, y, new_res, scale if quant else x,
        D, x.stride(0), res.stride(0), y.stride(0), new_res.stride(0), float(eps),
        HAS_RESIDUAL=residual is not None, BLOCK_D=BLOCK_D, QUANT=quant, num_warps=num_warps_for(BLOCK_D),
    )
    return (finish(y, scale) if quant else y), new_res


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x: [T, D] -> y: [T, D] in x.dtype.

    Examples
    --------
    >>> y = rmsnorm(torch.randn(6, 96, device="cuda"), torch.ones(96, device="cuda"), 1e-6)
    """
    _check(x, None, weight, eps)
    return _launch(x, None, weight, eps)[0]


def fused_add_rmsnorm(x, residual, weight, eps):
    """new_residual = x + residual; y = rmsnorm(new_residual) * weight.

    x, residual: [T, D] (same dtype) -> (y, new_residual), both [T, D] in x.dtype.
    """
    _check(x, residual, weight, eps)
    return _launch(x, residual, weight, eps)


def rmsnorm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    normed = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (weight * normed).to(x.dtype)


def fused_add_rmsnorm_ref(x, residual, weight, eps):
    new_residual = x + residual
    return rmsnorm_ref(new_residual, weight, eps), new_residual
