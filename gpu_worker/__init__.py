"""Executor side: the prefill-only inference engine. Never imports pyspark."""
from __future__ import annotations

from .config import EngineConfig, ModelConfig
from .engine import Engine
from .prompts import PromptTooLong

_ENGINES: dict[str, Engine] = {}


def get_engine(config: EngineConfig) -> Engine:
    """One engine per Python worker and configuration, built on first use, then reused."""
    key = config.key()
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = Engine(config)
    return eng


__all__ = ["Engine", "EngineConfig", "ModelConfig", "PromptTooLong", "get_engine"]
