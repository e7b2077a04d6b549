"""What is derived at run time from an EngineConfig: device, dtype, kernels,
token budget and the number of KV slots."""
from __future__ import annotations

import gc
import logging
import os
import sys
from dataclasses import dataclass

import torch

from .config import CPU_POOL_ENV, EngineConfig, ModelConfig, spark_worker_memory_mb
from .ops import TorchOps
from .runner import KVCache

log = logging.getLogger("gpu_worker")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Default KV pool on CPU: 1 GiB per engine (SmolLM2 in float32: 23,296 tokens of 45 KiB), less where
# this Python worker's share of the machine's memory is smaller (`cpu_pool_bytes`); a Spark Python
# worker needs the model + the pool + its own overhead (docs/gpu.md, "CPU memory").
# EngineConfig.cpu_kv_pool_mib (default QUAIL_CPU_KV_POOL_MIB in the environment of the driver, or
# spark.executorEnv.*) sets the size.
CPU_POOL_BYTES = 1 << 30
CPU_POOL_MIN_BYTES = 64 << 20
# one Spark Python worker's Python, torch, pyspark and Arrow beside weights and pool (~870 MiB measured)
CPU_WORKER_OVERHEAD = 900 << 20


def available_memory() -> int | None:
    """Bytes the machine can still give (Linux MemAvailable, capped by a cgroup v2 limit), or None."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) << 10
                    break
    except (OSError, ValueError):
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max" and avail is not None:
            avail = min(avail, int(limit) - used)
    except (OSError, ValueError):
        pass
    return avail


def workers_sharing() -> int:
    """Python workers that may load an engine on this machine at once: inside a Spark task, the
    cores this process may run on divided by the task's cpus (what local[N] or one executor per host
    runs at once); outside Spark, one."""
    if "pyspark.taskcontext" not in sys.modules:  # not a Spark Python worker (they import it first)
        return 1
    tc = sys.modules["pyspark.taskcontext"].TaskContext.get()
    if tc is None:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, tc.cpus()))


def cpu_pool_bytes(weights_bytes: int = 0, mib: int | None = None) -> int:
    """The CPU KV pool of an engine whose config leaves kv_pool_tokens unset: `mib` MiB
    (EngineConfig.cpu_kv_pool_mib), else 1 GiB, or less where this worker's share of memory is smaller.
    The share: Spark's PYSPARK_EXECUTOR_MEMORY_MB (spark.executor.pyspark.memory split among the
    executor's workers), less the weights and a worker's overhead; else 80% of what the machine has
    available less the weights and overhead of the other workers sharing it, split among them all.
    At least 64 MiB."""
    if mib is not None:
        return mib << 20
    spark_mb = spark_worker_memory_mb()
    if spark_mb is not None:
        share = (spark_mb << 20) - weights_bytes - CPU_WORKER_OVERHEAD
    else:
        avail = available_memory()
        if avail is None:
            return CPU_POOL_BYTES
        n = workers_sharing()
        share = int(0.8 * (avail - (n - 1) * (weights_bytes + CPU_WORKER_OVERHEAD)) / n)
    if share < CPU_POOL_BYTES:
        log.info("CPU KV pool below 1 GiB: this worker's share of memory is %d MiB (%s sets the size)",
                 max(share, 0) >> 20, CPU_POOL_ENV)
    return max(CPU_POOL_MIN_BYTES, min(CPU_POOL_BYTES, share))


CUDA_POOL_MAX_TOKENS = 1 << 23  # a small model does not take the whole GPU (8M tokens: 1.1 TiB for Qwen3-4B)
CTX_PER_BUDGET = 16  # context tokens a pass may read (distinct, gathered per layer) per token of its budget


def check_fp8_gpu(capability: tuple[int, int], name: str):
    """quantize='fp8' needs FP8 tensor cores: compute capability 8.9 (Ada) or newer (Hopper, Blackwell)."""
    if tuple(capability) < (8, 9):
        raise ValueError(f"quantize='fp8' needs a GPU with FP8 tensor cores (compute capability 8.9+, e.g. "
                         f"L4, H100, H200); {name} has {capability[0]}.{capability[1]}: leave quantize unset")


@dataclass
class Runtime:
    config: EngineConfig
    device: torch.device
    dtype: torch.dtype
    ops: object
    token_budget: int
    max_position: int
    kv_slots: int = 0
    ctx_budget: int = 0  # most distinct context tokens one pass reads (scheduler.Scheduler)

    @classmethod
    def create(cls, cfg: EngineConfig, mcfg: ModelConfig) -> "Runtime":
        device = torch.device(cfg.device)
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError(f"device {cfg.device!r} asked for, but torch sees no CUDA GPU; use device='cpu'")
            if device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
            if device.index >= torch.cuda.device_count():
                raise ValueError(f"device {cfg.device!r} asked for, but torch sees {torch.cuda.device_count()} "
                                 "CUDA GPU(s) (CUDA_VISIBLE_DEVICES numbers them from 0)")
            # no torch.cuda.set_device: the engine makes its device current around its own work only
        elif device.type != "cpu":
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {cfg.device!r}")
        if cfg.quantize == "fp8" and device.type == "cuda":
            check_fp8_gpu(torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
        name = cfg.dtype or ("bfloat16" if device.type == "cuda" else "float32")
        if name not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
        ops = TorchOps()
        if device.type == "cuda" and cfg.use_triton is not False:
            from .cuda_ops import CudaOps

            # FP8: a join's context attention scores from float8 keys too, unless fp8_attention is off
            fp8_attn = cfg.quantize == "fp8" and cfg.fp8_attention
            ops = CudaOps(use_triton=cfg.use_triton, ctx_fp8=fp8_attn)
        # CUDA: 32768 measured ~2% faster than 16384 on FILTER and JOIN (H200, BENCHMARKS.md)
        budget = cfg.token_budget or (32768 if device.type == "cuda" else 2048)
        max_pos = min(cfg.max_prompt_tokens or mcfg.max_position, mcfg.max_position)
        return cls(cfg, device, DTYPES[name], ops, budget, max_pos, ctx_budget=CTX_PER_BUDGET * budget)

    def size_pool(self, mcfg: ModelConfig, weights_bytes: int = 0):
        """KV slots: the configured number (`kv_pool_tokens`), else on CUDA what free memory
        allows and on CPU 1 GiB or this worker's share of memory (`cpu_pool_bytes`)."""
        per_slot = KVCache.bytes_per_slot(mcfg, self.dtype)
        if self.config.kv_pool_tokens:
            slots = self.config.kv_pool_tokens
        elif self.device.type == "cuda":
            # beside the pool: two passes' activations (one runs while the next is planned and launched)
            # and the largest context gather a pass can plan (one layer's K and V of ctx_budget tokens)
            gc.collect()  # engines dropped earlier in this process: their pools go back first
            torch.cuda.empty_cache()
            free, _ = torch.cuda.mem_get_info(self.device)
            act = self.activation_bytes(mcfg)
            gather = self.ctx_budget * (per_slot // mcfg.num_layers)
            slots = min(CUDA_POOL_MAX_TOKENS, int((free - 2 * act - gather - (2 << 30)) * 0.9) // per_slot)
            if slots < 4096:
                raise RuntimeError(f"GPU has {free / 2**30:.1f} GiB free after weights: too little for the KV pool")
        else:
            slots = cpu_pool_bytes(weights_bytes, self.config.cpu_kv_pool_mib) // per_slot
        self.kv_slots = max(16, slots // 16 * 16)
        log.info("KV pool: %d slots (%.2f GiB), token budget %d, context budget %d", self.kv_slots,
                 self.kv_slots * per_slot / 2**30, self.token_budget, self.ctx_budget)

    def activation_bytes(self, mcfg: ModelConfig) -> int:
        """Peak activation bytes of one forward pass at the token budget (rough, generous)."""
        width = max(2 * mcfg.intermediate_size, (mcfg.num_heads + 2 * mcfg.num_kv_heads) * mcfg.head_dim)
        per_tok = (4 * mcfg.hidden_size + 2 * width) * 4
        return self.token_budget * per_tok + self.config.extra_activation_bytes
