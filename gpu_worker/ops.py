"""The numerical kernels a forward pass uses, chosen once per engine.

`TorchOps` is plain torch (CPU path, and the truth the Triton kernels are
tested against); `CudaOps` (cuda_ops.py) swaps in quail_kernels/ and device attention.
Semantics follow Hugging Face Llama/Qwen3 exactly, casts included.
"""
from __future__ import annotations

import torch

from .attention import split_attention_torch
from .quant import quant_rows

_ONEDNN: bool | None = None  # whether oneDNN's linear runs here and agrees with matmul (probed once)


def _onednn_ok() -> bool:
    global _ONEDNN
    if _ONEDNN is None:
        try:
            x, w = torch.randn(3, 40), torch.randn(24, 40)
            y = torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
            _ONEDNN = torch.backends.mkldnn.is_available() and bool(torch.allclose(y, x @ w.t(), atol=1e-4))
        except (AttributeError, RuntimeError):
            _ONEDNN = False
    return _ONEDNN


def _onednn_takes(x) -> bool:
    """Whether oneDNN's CPU kernels run a product with `x` as input (float32 or bfloat16 on the CPU)."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and _onednn_ok()


def linear(x, w):
    """x @ w.t() (x: [T, k], w: [n, k]). On the CPU through oneDNN's linear: torch's x86 builds send a
    float32 matmul to MKL, whose kernels on AMD processors take their AVX2 path (SmolLM2's projections
    on one EPYC core: ~95 GFLOP/s through MKL, ~210 through oneDNN with AVX-512, the same float32
    products in another summation order); elsewhere, and where oneDNN is missing, a plain matmul."""
    if _onednn_takes(x):
        return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
    return x @ w.t()


def swiglu(x, gate_up):
    """silu(x @ gate.t()) * (x @ up.t()) for gate_up = [gate; up] ([2 * n, k]). On the CPU through two oneDNN
    linears with the activation and the product fused into their epilogues (the gate's output takes
    SiLU while in cache, the up projection multiplies it in): no [T, 2n] intermediate, no separate
    SiLU and product passes (SmolLM2's MLP on one core: ~5% faster than linear + silu_and_mul); the
    same float32 operations in another rounding order. Elsewhere linear + silu_and_mul."""
    if _onednn_takes(x) and x.shape[0]:
        n = gate_up.shape[0] // 2
        g = torch.ops.mkldnn._linear_pointwise(x, gate_up[:n], None, "swish", [], "")
        return torch.ops.mkldnn._linear_pointwise.binary(x, g, gate_up[n:], None, "mul")
    return TorchOps.silu_and_mul(linear(x, gate_up))


def rmsnorm(x, weight, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if h.dtype == x.dtype:  # float32 (the CPU's dtype): the weight multiplies in place, no second temporary
        return h.mul_(weight) if weight.dtype == h.dtype else weight * h
    return weight * h.to(x.dtype)


def rotate(x, cos, sin):
    """x: [T, h, d]; cos, sin: [T, d/2] -> rotated x (HF rotate_half layout), float32. Both halves written
    into one output (a product, then a fused multiply-add each): no concatenation, no temporaries."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    o1, o2 = out[..., :half], out[..., half:]
    torch.mul(x1, c, out=o1).addcmul_(x2, s, value=-1)
    torch.mul(x2, c, out=o2).addcmul_(x1, s)
    return out


class TorchOps:
    name = "torch"
    linear = staticmethod(linear)

    # quant=True: the result as quantized rows (float8, scales) for an FP8 projection (quant.py)
    @staticmethod
    def rmsnorm(x, weight, eps, quant=False):
        y = rmsnorm(x, weight, eps).to(x.dtype)
        return quant_rows(y) if quant else y

    @staticmethod
    def add_rmsnorm(x, residual, weight, eps, quant=False):
        residual = x + residual
        y = rmsnorm(residual, weight, eps).to(x.dtype)
        return (quant_rows(y) if quant else y), residual

    @staticmethod
    def silu_and_mul(gate_up, quant=False):
        g, u = gate_up.chunk(2, dim=-1)
        y = torch.nn.functional.silu(g) * u
        return quant_rows(y) if quant else y

    @staticmethod
    def pack_gate_up(weight):
        """The MLP's [gate; up] weight as `swiglu` reads it: as it is (block 0)."""
        return weight, 0

    @staticmethod
    def swiglu(x, gate_up, block: int = 0):
        if block:
            raise ValueError(f"gate_up: interleaved in blocks of {block} rows, which only CudaOps reads")
        return swiglu(x, gate_up)

    @staticmethod
    def quant_rows(x):
        return quant_rows(x)

    @staticmethod
    def qk_norm_rope(q, k, v, positions, cos, sin, q_norm_w, k_norm_w, eps, k_cache, v_cache, slots):
        if q_norm_w is not None:
            q = rmsnorm(q, q_norm_w, eps)
            k = rmsnorm(k, k_norm_w, eps)
        c, s = cos.index_select(0, positions), sin.index_select(0, positions)
        q = rotate(q, c, s).to(q.dtype)
        k = rotate(k, c, s).to(k.dtype)
        if k_cache is not None:
            keep = slots >= 0
            if bool(keep.any()):
                idx = slots[keep]
                k_cache.index_copy_(0, idx, k[keep].to(k_cache.dtype))
                v_cache.index_copy_(0, idx, v[keep].to(v_cache.dtype))
        return q, k

    @staticmethod
    def attention(q, k, v, k_cache, v_cache, meta):
        return split_attention_torch(q, k, v, k_cache, v_cache, meta)
