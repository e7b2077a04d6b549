"""Session-wide fixtures: one SmolLM2 engine and its Hugging Face reference."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Triton kernels run in its interpreter on CPU; the flag must precede any triton import.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smol_engine():
    from gpu_worker import Engine, EngineConfig

    return Engine(EngineConfig(model="smollm2-135m", device="cpu"))
