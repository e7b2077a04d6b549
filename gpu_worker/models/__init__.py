"""Model definitions written for prefill (not Hugging Face modeling code)."""
from __future__ import annotations

from ..config import ModelConfig
from .layers import DecoderLM
from .llama import LlamaForPrefill
from .qwen3 import Qwen3ForPrefill

ARCHS = {"llama": LlamaForPrefill, "qwen3": Qwen3ForPrefill}


def model_class(cfg: ModelConfig) -> type[DecoderLM]:
    try:
        return ARCHS[cfg.arch]
    except KeyError:
        raise ValueError(f"unsupported architecture {cfg.arch!r}; expected one of {sorted(ARCHS)}") from None
