"""The CPU KV pool's default size (1 GiB, or the worker's share of memory; EngineConfig.cpu_kv_pool_mib,
whose default is QUAIL_CPU_KV_POOL_MIB),
and an engine dropped gives its pool back at once: no reference cycle keeps it until the next full
garbage collection."""
from __future__ import annotations

import gc
import weakref

import pytest

from gpu_worker import Engine, EngineConfig
from gpu_worker.runner import KVCache
from gpu_worker import runtime
from gpu_worker.config import CPU_POOL_ENV
from gpu_worker.runtime import CPU_POOL_BYTES, CPU_WORKER_OVERHEAD, cpu_pool_bytes

TINY = EngineConfig(model="tiny-llama-random", device="cpu")


MIB = 1 << 20


def test_the_default_pool_is_1_gib_where_memory_allows(monkeypatch):
    monkeypatch.delenv(CPU_POOL_ENV, raising=False)
    monkeypatch.delenv("PYSPARK_EXECUTOR_MEMORY_MB", raising=False)
    monkeypatch.setattr(runtime, "available_memory", lambda: 40 << 30)
    assert runtime.workers_sharing() == 1  # outside a Spark task
    assert cpu_pool_bytes(513 * MIB) == CPU_POOL_BYTES == 1 << 30
    monkeypatch.setattr(runtime, "available_memory", lambda: None)  # not known: the 1 GiB
    assert cpu_pool_bytes(513 * MIB) == CPU_POOL_BYTES


def test_the_default_pool_shrinks_to_the_workers_share(monkeypatch):
    monkeypatch.delenv(CPU_POOL_ENV, raising=False)
    monkeypatch.delenv("PYSPARK_EXECUTOR_MEMORY_MB", raising=False)
    weights = 513 * MIB
    monkeypatch.setattr(runtime, "available_memory", lambda: 1000 * MIB)
    assert cpu_pool_bytes(weights) == 800 * MIB  # one worker: 80% of what is available
    monkeypatch.setattr(runtime, "workers_sharing", lambda: 4)  # three more workers will load their weights
    avail = 8 << 30
    monkeypatch.setattr(runtime, "available_memory", lambda: avail)
    assert cpu_pool_bytes(weights) == int(0.8 * (avail - 3 * (weights + CPU_WORKER_OVERHEAD)) / 4)
    monkeypatch.setattr(runtime, "available_memory", lambda: 3 << 30)
    assert cpu_pool_bytes(weights) == 64 * MIB  # never below the floor
    # spark.executor.pyspark.memory: Spark hands each worker its share; weights and overhead come off it
    monkeypatch.setenv("PYSPARK_EXECUTOR_MEMORY_MB", "2000")
    assert cpu_pool_bytes(weights) == 2000 * MIB - weights - CPU_WORKER_OVERHEAD
    monkeypatch.setenv("PYSPARK_EXECUTOR_MEMORY_MB", "20000")
    assert cpu_pool_bytes(weights) == CPU_POOL_BYTES


def test_the_environment_sets_the_default_pool(monkeypatch):
    monkeypatch.setenv("PYSPARK_EXECUTOR_MEMORY_MB", "1")  # the explicit size wins over any share
    monkeypatch.setenv(CPU_POOL_ENV, "3")
    cfg = EngineConfig(model="tiny-llama-random", device="cpu")  # the environment read when a config is made
    assert cfg.cpu_kv_pool_mib == 3
    eng = Engine(cfg)
    per_slot = KVCache.bytes_per_slot(eng.model_config, eng.rt.dtype)
    assert eng.rt.kv_slots == (3 << 20) // per_slot // 16 * 16
    assert Engine(cfg.replace(kv_pool_tokens=512)).rt.kv_slots == 512  # an explicit size wins
    assert Engine(cfg.replace(cpu_kv_pool_mib=5)).rt.kv_slots == (5 << 20) // per_slot // 16 * 16  # so does the field


@pytest.mark.parametrize("raw", ["0", "-4", "1.5", "lots"])
def test_a_bad_pool_size_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(CPU_POOL_ENV, raw)
    with pytest.raises(ValueError, match=rf"{CPU_POOL_ENV} must be a whole number of MiB >= 1, got '{raw}'"):
        Engine(model="tiny-llama-random", device="cpu")


def test_a_dropped_engine_is_freed_without_a_collection():
    eng = Engine(TINY.replace(kv_pool_tokens=4096))
    eng.filter(["one short document", "another one", None], "Is it short?")
    eng.join(["an anchor text", "a second anchor"], ["p", "q", "r"], "Is DOCUMENT about DOCUMENT 2?")
    pool = weakref.ref(eng.runner.kv.k)
    ref = weakref.ref(eng)
    gc.collect()  # what building the engine left behind (frames of the model's construction)
    gc.disable()
    try:
        del eng
        assert ref() is None and pool() is None
    finally:
        gc.enable()
