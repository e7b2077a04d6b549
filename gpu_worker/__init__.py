"""Executor side: the prefill-only inference engine. Never imports pyspark.

Importing the package (or ``gpu_worker.ai_calls``) loads no torch: ``Engine`` is imported on first use.
"""
from __future__ import annotations

from .config import EngineConfig, ModelConfig
from .grammar import Extraction
from .prompts import PromptTooLong

_ENGINES: dict[str, Engine] = {}  # least recently used first
CPU_ENGINES_KEPT = 4  # CPU engines a worker keeps (weights and pool each); on a GPU one per device


def get_engine(config: EngineConfig) -> Engine:
    """One engine per Python worker and configuration, built on first use, then reused.

    A GPU engine's pool takes the device's free memory, so a new configuration on a device first
    drops the engine already there; on the CPU the CPU_ENGINES_KEPT most recently used stay."""
    from .engine import Engine

    key = config.key()
    eng = _ENGINES.pop(key, None)
    if eng is None:
        make_room(config)
        eng = Engine(config)
    _ENGINES[key] = eng
    return eng


def _device(config) -> str:
    d = str(config.device)
    return "cuda:0" if d == "cuda" else d  # the engine binds "cuda" to the current device, 0 in a worker


def make_room(config) -> list[str]:
    """Drop the cached engines a new engine of `config` replaces; returns their keys."""
    dev = _device(config)
    if dev.startswith("cuda"):
        gone = [k for k, e in _ENGINES.items() if _device(e.config) == dev]
    else:
        cpu = [k for k, e in _ENGINES.items() if not _device(e.config).startswith("cuda")]
        gone = cpu[:max(0, len(cpu) - CPU_ENGINES_KEPT + 1)]
    for k in gone:
        del _ENGINES[k]  # its pool goes back once the last reference does (the engine holds no cycle)
    return gone


def __getattr__(name):
    if name == "Engine":
        from .engine import Engine

        return Engine
    raise AttributeError(f"module 'gpu_worker' has no attribute {name!r}")


__all__ = ["Engine", "EngineConfig", "Extraction", "ModelConfig", "PromptTooLong", "get_engine"]
