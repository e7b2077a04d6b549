"""Triton kernels of the GPU fast path, each beside its pure-torch reference.

Launchers take CUDA tensors, or CPU tensors when TRITON_INTERPRET=1 (Triton's
interpreter). Without triton installed the package still imports but exports
only `triton_available()` (False) and the torch-only `quant_ref`; the CPU path
uses plain torch elsewhere. Nothing here imports gpu_worker.
"""

from __future__ import annotations

import os


def triton_available() -> bool:
    """True when triton imports and there is somewhere to run it.

    That is a CUDA device, or TRITON_INTERPRET=1 for Triton's CPU interpreter.
    """
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes"):
        return True
    import torch

    return torch.cuda.is_available()


try:
    import triton as _triton  # noqa: F401
except ImportError:  # CPU-only install
    _triton = None

if _triton is not None:
    from quail_kernels.seg_attention import seg_attention, seg_attention_ref
    from quail_kernels.gemm_swiglu import gate_up_block, gemm_swiglu, gemm_swiglu_ref, interleave_gate_up
    from quail_kernels.fp8 import fused_add_rmsnorm_fp8, quant_rows, quant_rows_ref, rmsnorm_fp8, silu_and_mul_fp8
    from quail_kernels.lse_merge import merge_attn, merge_attn_ref
    from quail_kernels.rmsnorm import fused_add_rmsnorm, fused_add_rmsnorm_ref, rmsnorm, rmsnorm_ref
    from quail_kernels.rope import qk_norm_rope, qk_norm_rope_ref
    from quail_kernels.silu_mul import silu_and_mul, silu_and_mul_ref
    from quail_kernels.varlen_attention import varlen_attention, varlen_attention_ref
    from quail_kernels.kv_fp8 import gather_fp8, gather_fp8_ref
    from quail_kernels.decode_attention import decode_attention, decode_attention_ref, plan_decode, seqs_per_item

    __all__ = [
        "triton_available",
        "rmsnorm", "rmsnorm_ref", "fused_add_rmsnorm", "fused_add_rmsnorm_ref",
        "qk_norm_rope", "qk_norm_rope_ref",
        "silu_and_mul", "silu_and_mul_ref",
        "gemm_swiglu", "gemm_swiglu_ref", "gate_up_block", "interleave_gate_up",
        "merge_attn", "merge_attn_ref",
        "seg_attention", "seg_attention_ref", "varlen_attention", "varlen_attention_ref",
        "quant_rows", "quant_rows_ref", "rmsnorm_fp8", "fused_add_rmsnorm_fp8", "silu_and_mul_fp8",
        "gather_fp8", "gather_fp8_ref",
        "decode_attention", "decode_attention_ref", "plan_decode", "seqs_per_item",
    ]
else:
    __all__ = ["triton_available"]
