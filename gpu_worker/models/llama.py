"""Llama-family decoder (SmolLM2, Llama 2/3): pre-norm, GQA, RoPE, SwiGLU."""
from __future__ import annotations

from ..config import ModelConfig
from .layers import DecoderLM


class LlamaForPrefill(DecoderLM):
    """Llama without QK-norm; layers shared with Qwen3 (see layers.py)."""

    def __init__(self, cfg: ModelConfig):
        if cfg.arch != "llama":
            raise ValueError(f"LlamaForPrefill needs arch 'llama', got {cfg.arch!r}")
        super().__init__(cfg)
