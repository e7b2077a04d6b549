"""A worker's engine cache (gpu_worker.get_engine): reuse, least-recently-used order, room for a new engine."""
from types import SimpleNamespace

import pytest

import gpu_worker
from gpu_worker import EngineConfig, get_engine, make_room


@pytest.fixture
def cache():
    """The worker's cache, emptied for the test and restored after it."""
    saved = dict(gpu_worker._ENGINES)
    gpu_worker._ENGINES.clear()
    yield gpu_worker._ENGINES
    gpu_worker._ENGINES.clear()
    gpu_worker._ENGINES.update(saved)


def _cached(cache, *configs):
    """Cache entries standing for built engines (make_room reads only their configuration)."""
    for c in configs:
        cache[c.key()] = SimpleNamespace(config=c)


def test_a_gpu_engine_replaces_the_one_on_its_device_only(cache):
    a, b = EngineConfig(model="x", device="cuda"), EngineConfig(model="y", device="cuda:1")
    c = EngineConfig(model="z", device="cpu")
    _cached(cache, a, b, c)
    assert make_room(EngineConfig(model="w", device="cuda:0")) == [a.key()]
    assert list(cache) == [b.key(), c.key()]


def test_the_cpu_keeps_the_most_recently_used(cache):
    cfgs = [EngineConfig(model=f"m{i}", device="cpu") for i in range(gpu_worker.CPU_ENGINES_KEPT)]
    _cached(cache, *cfgs)
    assert make_room(EngineConfig(model="new")) == [cfgs[0].key()]  # the least recently used goes
    assert len(cache) == gpu_worker.CPU_ENGINES_KEPT - 1


def test_reuse_moves_an_engine_to_the_most_recent_place(cache):
    tiny = EngineConfig(model="tiny-llama-random", kv_pool_tokens=64)
    others = [EngineConfig(model=f"m{i}") for i in range(gpu_worker.CPU_ENGINES_KEPT - 1)]
    eng = get_engine(tiny)
    _cached(cache, *others)
    assert get_engine(tiny) is eng  # reused, and now the most recent
    assert make_room(EngineConfig(model="new")) == [others[0].key()]
    assert get_engine(tiny) is eng
