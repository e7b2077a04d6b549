"""The MLP's gate/up projection with SwiGLU in the GEMM's epilogue: out = silu(x @ gate.T) * (x @ up.T).

The weight is the stacked [gate; up] ([2F, K]) with its rows interleaved in blocks of `block` rows
(`interleave_gate_up`): block i of the gate, then block i of the up projection. A program's
[BLOCK_M, 2 * block] accumulator then holds `block` gate columns and the matching up columns, and
its epilogue writes silu(g) * u ([BLOCK_M, block]) straight from float32: the [T, 2F] product of
cuBLAS + quail_kernels.silu_mul never reaches memory, and gate and up are not rounded to the input
dtype before the product. Persistent programs (one per multiprocessor) walk the output tiles in
groups of GROUP_M row blocks, so a group's weight blocks stay in L2; operands come through tensor
descriptors (the bulk copy engine; Hopper and later, or Triton's interpreter).

H200, a 32,768-row pass of Qwen3-4B (K = 2,560, F = 9,728, bf16): 4.76 ms against 5.27 ms for
cuBLAS's product (4.83 ms) and the separate SiLU-and-mul kernel; 1.52 ms against 1.67 ms at
10,240 rows (benchmarks/probes/gemm_swiglu_probe.py, probes/results/h200_40e8010/); FILTER 2,048 x 300
words 7.63-7.76 s against 7.89-7.94 s, alternating in one process (probes/swiglu_ab.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quail_kernels._util import check_device, check_tensor, interpreter_active

# launch on CUDA: rows per tile, product columns per tile (2 * block: `block` gate + `block` up), inner
# steps, pipeline depth, warps, row blocks per group
GPU_CONFIG = {"block_m": 128, "block": 128, "block_k": 64, "num_stages": 3, "num_warps": 8, "group_m": 16}
# smaller blocks where F is not a multiple of GPU_CONFIG's (tiles of 2 * block product columns)
GPU_BLOCKS = (128, 64, 32)
# Triton's interpreter (tests on the CPU): small tiles, the same program
CPU_CONFIG = {"block_m": 32, "block": 32, "block_k": 32, "num_stages": 1, "num_warps": 4, "group_m": 4}


@triton.jit(do_not_specialize=["M"])  # every pass has its own row count: one compiled kernel for all of them
def _gemm_swiglu_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                        UPCAST: tl.constexpr):
    # N = 2F product columns (interleaved); tile (pid_m, pid_n) writes output columns
    # [pid_n * BLOCK_N / 2, (pid_n + 1) * BLOCK_N / 2)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    in_group = GROUP_M * num_n
    for tile in tl.range(tl.program_id(0), num_m * num_n, NUM_PROGRAMS, flatten=True):
        first_m = (tile // in_group) * GROUP_M
        group_size = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (tile % in_group) % group_size
        pid_n = (tile % in_group) // group_size
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in range(k_steps):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            if UPCAST:  # Triton's interpreter: its 16-bit products are wrong; float32 of the same values
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)
        g, u = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        y = g / (1.0 + tl.exp(-g)) * u
        c_desc.store([pid_m * BLOCK_M, pid_n * (BLOCK_N // 2)], y.to(c_desc.dtype))


def gate_up_block(weight: torch.Tensor) -> int:
    """Rows per interleaved block for `weight` ([2F, K]) on its device, or 0 where the fused kernel does
    not run there: no tensor descriptors before Hopper (compute capability 9), F not a multiple of any
    block (GPU_BLOCKS), rows of K elements not 16-byte aligned (the bulk copy engine's unit)."""
    if weight.dim() != 2 or weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return 0
    if weight.device.type == "cuda":
        if interpreter_active() or torch.cuda.get_device_capability(weight.device)[0] < 9:
            return 0
        if weight.dtype == torch.float32:  # tf32 products: not the float32 the engine promises there
            return 0
        blocks = GPU_BLOCKS
    elif interpreter_active():
        blocks = (CPU_CONFIG["block"],)
    else:
        return 0
    two_f, k = weight.shape
    if (k * weight.element_size()) % 16:
        return 0
    return next((b for b in blocks if two_f % (2 * b) == 0), 0)


def interleave_gate_up(weight: torch.Tensor, block: int) -> torch.Tensor:
    """[gate; up] ([2F, K]) -> blocks of `block` gate rows each followed by the same rows of up."""
    two_f, k = weight.shape
    f = two_f // 2
    if two_f % 2 or f % block:
        raise ValueError(f"weight: expected [2F, K] with F a multiple of {block}, got {tuple(weight.shape)}")
    g, u = weight[:f].reshape(f // block, block, k), weight[f:].reshape(f // block, block, k)
    return torch.stack([g, u], 1).reshape(two_f, k).contiguous()


def deinterleave_gate_up(weight: torch.Tensor, block: int) -> torch.Tensor:
    """The inverse of `interleave_gate_up`: back to [gate; up]."""
    two_f, k = weight.shape
    w = weight.reshape(two_f // (2 * block), 2, block, k)
    return torch.cat([w[:, 0].reshape(-1, k), w[:, 1].reshape(-1, k)]).contiguous()


_PROGRAMS: dict = {}


def _programs(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _PROGRAMS:
        _PROGRAMS[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _PROGRAMS[key]


def gemm_swiglu(x: torch.Tensor, weight: torch.Tensor, block: int, config: dict | None = None) -> torch.Tensor:
    """out[T, F] = silu(x @ gate.T) * (x @ up.T) for x [T, K] and `weight` = interleave_gate_up([gate; up],
    block) ([2F, K]), in x.dtype. config: launch overrides of GPU_CONFIG / CPU_CONFIG (not `block`)."""
    check_tensor("x", x, ndim=2, dtypes=(torch.bfloat16, torch.float16, torch.float32))
    T, K = x.shape
    check_tensor("weight", weight, ndim=2, shape=(None, K), dtype=x.dtype)
    two_f = weight.shape[0]
    if block <= 0 or two_f % (2 * block):
        raise ValueError(f"weight: expected [2F, K] interleaved in blocks of {block} rows, got {tuple(weight.shape)}")
    check_device(x=x, weight=weight)
    out = torch.empty((T, two_f // 2), dtype=x.dtype, device=x.device)
    if T == 0:
        return out
    if not x.is_contiguous() or x.data_ptr() % 16:  # descriptors read from 16-byte aligned rows
        x = x.clone(memory_format=torch.contiguous_format)
    c = dict(CPU_CONFIG if x.device.type == "cpu" else GPU_CONFIG, **(config or {}))
    bm, bn, bk = c["block_m"], 2 * block, c["block_k"]
    from triton.tools.tensor_descriptor import TensorDescriptor

    a_d = TensorDescriptor.from_tensor(x, [bm, bk])
    b_d = TensorDescriptor.from_tensor(weight, [bn, bk])
    c_d = TensorDescriptor.from_tensor(out, [bm, block])
    # one program per multiprocessor, whatever the tiles: a program with no tile returns at once, and the
    # program count (a compile-time constant of the loop) stays one value per device, not one per small pass
    n_prog = _programs(x.device)
    _gemm_swiglu_kernel[(n_prog,)](a_d, b_d, c_d, T, two_f, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                   GROUP_M=c["group_m"], NUM_PROGRAMS=n_prog, UPCAST=x.device.type == "cpu",
                                   num_warps=c["num_warps"], num_stages=c["num_stages"])
    return out


def gemm_swiglu_ref(x: torch.Tensor, gate_up: torch.Tensor) -> torch.Tensor:
    """float32 reference from the stacked (not interleaved) [gate; up] weight, in x.dtype."""
    f = gate_up.shape[0] // 2
    xf, w = x.float(), gate_up.float()
    return (torch.nn.functional.silu(xf @ w[:f].T) * (xf @ w[f:].T)).to(x.dtype)
