"""The CPU KV pool's default size (QUAIL_CPU_KV_POOL_MIB), and an engine dropped gives its pool back
at once: no reference cycle keeps it until the next full garbage collection."""
from __future__ import annotations

import gc
import weakref

import pytest

from gpu_worker import Engine, EngineConfig
from gpu_worker.runner import KVCache
from gpu_worker.runtime import CPU_POOL_BYTES, CPU_POOL_ENV, cpu_pool_bytes

TINY = EngineConfig(model="tiny-llama-random", device="cpu")


def test_the_default_pool_follows_the_environment(monkeypatch):
    monkeypatch.delenv(CPU_POOL_ENV, raising=False)
    assert cpu_pool_bytes() == CPU_POOL_BYTES == 1 << 30
    monkeypatch.setenv(CPU_POOL_ENV, "3")
    eng = Engine(TINY)
    per_slot = KVCache.bytes_per_slot(eng.model_config, eng.rt.dtype)
    assert eng.rt.kv_slots == (3 << 20) // per_slot // 16 * 16
    assert Engine(TINY.replace(kv_pool_tokens=512)).rt.kv_slots == 512  # an explicit size wins


@pytest.mark.parametrize("raw", ["0", "-4", "1.5", "lots"])
def test_a_bad_pool_size_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(CPU_POOL_ENV, raw)
    with pytest.raises(ValueError, match=rf"{CPU_POOL_ENV} must be a whole number of MiB >= 1, got '{raw}'"):
        Engine(TINY)


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
