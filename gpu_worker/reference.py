"""Hugging Face transformers' own forward pass: the truth the engine is held to."""
from __future__ import annotations

import torch


def hf_model(engine):
    """A transformers model with exactly the engine's weights (float32, CPU)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from gpu_worker import weights

    src = weights.resolve(engine.config.model, engine.config.cache_dir, engine.config.seed, engine.config.tokenizer)
    if src.folder is not None:
        return AutoModelForCausalLM.from_pretrained(str(src.folder), dtype=torch.float32).eval()
    cfg = {k: v for k, v in src.config.hf_config().items() if k not in ("architectures", "model_type")}
    cls, conf = ((LlamaForCausalLM, LlamaConfig) if src.config.arch == "llama" else (Qwen3ForCausalLM, Qwen3Config))
    model = cls(conf(**cfg))
    ours = weights.load_model(src, torch.device("cpu"), torch.float32).state_dict()
    if src.config.tie_embeddings:
        ours["lm_head.weight"] = ours["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(ours, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    return model.eval()


@torch.no_grad()
def last_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0, -1].float()


def hf_margin(model, engine, ids: list[int]) -> float:
    return hf_margins(model, engine, [ids])[0]


@torch.no_grad()
def hf_margins(model, engine, prompts: list[list[int]], batch: int = 32) -> list[float]:
    """`hf_margin` of each prompt, `batch` prompts a forward pass: right-padded under an attention mask (a
    padded key weighs exactly 0 and a row's positions are its own), each row's logits read at its last
    token."""
    t, f = engine.answer_token_ids
    out = []
    for lo in range(0, len(prompts), batch):
        group = prompts[lo:lo + batch]
        width = max(map(len, group))
        ids = torch.tensor([p + [0] * (width - len(p)) for p in group])
        mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in group])
        logits = model(ids, attention_mask=mask).logits.float()
        for r, p in enumerate(group):
            lg = logits[r, len(p) - 1]
            out.append(float(torch.logsumexp(lg[t], 0) - torch.logsumexp(lg[f], 0)))
    return out
