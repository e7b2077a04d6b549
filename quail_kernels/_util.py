"""Shared launcher checks for the Triton kernels.

Every launcher validates its inputs here before launching, so a wrong shape,
stride, dtype or device fails with a ValueError that names the argument and
says what was expected and what came instead.
"""

from __future__ import annotations

import os

import numpy as np
import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def interpret_mode() -> bool:
    """True when TRITON_INTERPRET asks for Triton's CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def interpreter_active() -> bool:
    """True when triton was imported in interpreter mode.

    Triton decides at its own import (its `tl.sum` & co. are jit functions):
    setting TRITON_INTERPRET=1 after `import triton` does not switch modes.
    """
    import triton.language as tl

    return type(tl.sum).__name__ == "InterpretedFunction"


def num_warps_for(block: int) -> int:
    """Warps per program for a row of `block` elements (Liger-Kernel's rule)."""
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def check_tensor(name, t, *, ndim=None, shape=None, dtypes=None, dtype=None, unit_last_stride=True):
    """Check one tensor argument; `shape` entries of None match any size.

    Launch overhead matters (several launches per layer), so the passing path
    is plain comparisons; messages are built only on failure.
    """
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    got = t.shape
    if ndim is not None and len(got) != ndim:
        raise ValueError(f"{name}: expected {ndim} dims, got {len(got)} (shape {_fmt_shape(got)})")
    if shape is not None:
        ok = len(got) == len(shape)
        if ok:
            for want, have in zip(shape, got):
                if want is not None and want != have:
                    ok = False
                    break
        if not ok:
            want = _fmt_shape("*" if e is None else e for e in shape)
            raise ValueError(f"{name}: expected shape {want}, got {_fmt_shape(got)}")
    if dtype is not None and t.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if dtypes is not None and t.dtype not in dtypes:
        want = ", ".join(str(d) for d in dtypes)
        raise ValueError(f"{name}: expected dtype in ({want}), got {t.dtype}")
    if unit_last_stride and len(got) > 0 and got[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: expected the last dim contiguous (stride 1), got strides {tuple(t.stride())}")


def check_device(**tensors) -> torch.device:
    """All tensors on one device: CUDA, or CPU under TRITON_INTERPRET=1."""
    named = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = named[0]
    for name, t in named[1:]:
        if t.device != first.device:
            raise ValueError(f"{name}: expected device {first.device} (that of {first_name}), got {t.device}")
    if first.device.type == "cuda" or (first.device.type == "cpu" and interpreter_active()):
        return first.device
    if first.device.type == "cpu" and interpret_mode():
        raise ValueError(
            f"{first_name}: got a CPU tensor with TRITON_INTERPRET=1 set after triton was imported; "
            "set it before the first `import triton` (or `import transformers` modeling code, which imports triton)"
        )
    raise ValueError(
        f"{first_name}: expected a CUDA tensor (or a CPU tensor with TRITON_INTERPRET=1 "
        f"to run Triton's interpreter), got a tensor on {first.device}"
    )


def block_size(n: int) -> int:
    """Power-of-two block covering n elements (masks handle the tail).

    Same as triton.next_power_of_2, without its per-call overhead.
    """
    return 1 << (max(int(n), 1) - 1).bit_length()


def query_blocks(lens, block_t: int, longest_first: bool = False, keep=None):
    """int64 [2, n_items]: (sequence, first query token) of every `block_t`-token query block.

    The work list of the attention kernels (one program per block and KV head).
    keep: bool per sequence, False leaves it out; longest_first: blocks deep in
    a causal sequence see the most keys, so they start first.
    """
    lens = np.asarray(lens, dtype=np.int64)
    nblk = (lens + block_t - 1) // block_t
    if keep is not None:
        nblk = np.where(keep, nblk, 0)
    seq = np.repeat(np.arange(len(lens), dtype=np.int64), nblk)
    start = (np.arange(int(nblk.sum()), dtype=np.int64) - np.repeat(np.cumsum(nblk) - nblk, nblk)) * block_t
    if longest_first:
        order = np.argsort(-start, kind="stable")
        seq, start = seq[order], start[order]
    return np.stack([seq, start])
