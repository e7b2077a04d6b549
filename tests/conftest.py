"""Session-wide fixtures: one SmolLM2 engine and its Hugging Face reference."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def smol_engine():
    from gpu_worker import Engine, EngineConfig

    return Engine(EngineConfig(model="smollm2-135m", device="cpu"))
