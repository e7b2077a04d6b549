"""A worker's engine cache (gpu_worker.get_engine): reuse, least-recently-used order, room for a new engine."""
from types import SimpleNamespace

import gpu_worker
from gpu_worker import EngineConfig, get_engine, make_room


def _cached(*configs):
    """Cache entries standing for built engines (make_room reads only their configuration)."""
    gpu_worker._ENGINES.clear()
    for c in configs:
        gpu_worker._ENGINES[c.key()] = SimpleNamespace(config=c)


def test_a_gpu_engine_replaces_the_one_on_its_device_only():
    a, b = EngineConfig(model="x", device="cuda"), EngineConfig(model="y", device="cuda:1")
    c = EngineConfig(model="z", device="cpu")
    saved = dict(gpu_worker._ENGINES)
    try:
        _cached(a, b, c)
        assert make_room(EngineConfig(model="w", device="cuda:0")) == [a.key()]
        assert list(gpu_worker._ENGINES) == [b.key(), c.key()]
    finally:
        gpu_worker._ENGINES.clear()
        gpu_worker._ENGINES.update(saved)


def test_the_cpu_keeps_the_most_recently_used():
    saved = dict(gpu_worker._ENGINES)
    try:
        cfgs = [EngineConfig(model=f"m{i}", device="cpu") for i in range(gpu_worker.CPU_ENGINES_KEPT)]
        _cached(*cfgs)
        assert make_room(EngineConfig(model="new")) == [cfgs[0].key()]  # the least recently used goes
        assert len(gpu_worker._ENGINES) == gpu_worker.CPU_ENGINES_KEPT - 1
    finally:
        gpu_worker._ENGINES.clear()
        gpu_worker._ENGINES.update(saved)


def test_reuse_moves_an_engine_to_the_most_recent_place():
    saved = dict(gpu_worker._ENGINES)
    try:
        tiny = EngineConfig(model="tiny-llama-random", kv_pool_tokens=64)
        others = [EngineConfig(model=f"m{i}") for i in range(gpu_worker.CPU_ENGINES_KEPT - 1)]
        gpu_worker._ENGINES.clear()
        eng = get_engine(tiny)
        for c in others:
            gpu_worker._ENGINES[c.key()] = SimpleNamespace(config=c)
        assert get_engine(tiny) is eng  # reused, and now the most recent
        assert make_room(EngineConfig(model="new")) == [others[0].key()]
        assert get_engine(tiny) is eng
    finally:
        gpu_worker._ENGINES.clear()
        gpu_worker._ENGINES.update(saved)
