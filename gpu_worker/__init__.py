"""Executor side: the prefill-only inference engine. Never imports pyspark.

Importing the package (or ``gpu_worker.ai_calls``) loads no torch: ``Engine`` is imported on first use.
"""
from __future__ import annotations

from .config import EngineConfig, ModelConfig
from .prompts import PromptTooLong

_ENGINES: dict[str, Engine] = {}


def get_engine(config: EngineConfig) -> Engine:
    """One engine per Python worker and configuration, built on first use, then reused."""
    from .engine import Engine

    key = config.key()
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = Engine(config)
    return eng


def __getattr__(name):
    if name == "Engine":
        from .engine import Engine

        return Engine
    raise AttributeError(f"module 'gpu_worker' has no attribute {name!r}")


__all__ = ["Engine", "EngineConfig", "ModelConfig", "PromptTooLong", "get_engine"]
