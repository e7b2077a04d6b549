"""Qwen3 decoder: the Llama layout plus a per-head RMSNorm of q and k before RoPE."""
from __future__ import annotations

from ..config import ModelConfig
from .layers import DecoderLM


class Qwen3ForPrefill(DecoderLM):
    """Qwen3: `q_norm` / `k_norm` are built by the shared Attention when cfg.qk_norm."""

    def __init__(self, cfg: ModelConfig):
        if cfg.arch != "qwen3":
            raise ValueError(f"Qwen3ForPrefill needs arch 'qwen3', got {cfg.arch!r}")
        super().__init__(cfg)
