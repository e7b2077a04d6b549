"""The transformers baseline: Qwen3ForCausalLM (sdpa) on the engine's own weights.

One prompt per row, as a chat-serving stack without prefix reuse would run
it: right-padded batches sorted by length (no mask needed: padding comes
after every real token, so causal attention never sees it), the decoder
body only, and the last real position through the answer rows of the head.
"""
from __future__ import annotations

import time

import numpy as np
import torch


def hf_model(eng):
    """A transformers model whose parameters are views of the engine's (no copy)."""
    import transformers

    mcfg = eng.model_config
    cfg = {k: v for k, v in mcfg.hf_config().items() if k not in ("architectures", "model_type", "torch_dtype")}
    arch = "Qwen3" if mcfg.arch == "qwen3" else "Llama"
    conf = getattr(transformers, f"{arch}Config")(**cfg)
    conf._attn_implementation = "sdpa"
    dev, dtype = eng.rt.device, eng.rt.dtype
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):
            model = getattr(transformers, f"{arch}ForCausalLM")(conf)
    finally:
        torch.set_default_dtype(old)
    body = eng.model.model
    hd, nq, nkv = mcfg.head_dim, mcfg.num_heads, mcfg.num_kv_heads
    state = {"model.embed_tokens.weight": body.embed_tokens.weight, "model.norm.weight": body.norm.weight}
    for i, layer in enumerate(body.layers):
        p = f"model.layers.{i}."
        q, k, v = layer.self_attn.qkv_weight.split([nq * hd, nkv * hd, nkv * hd])
        g, u = layer.mlp.gate_up_stacked().chunk(2)
        state.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                      p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": layer.self_attn.o_proj.weight,
                      p + "mlp.gate_proj.weight": g, p + "mlp.up_proj.weight": u,
                      p + "mlp.down_proj.weight": layer.mlp.down_proj.weight,
                      p + "input_layernorm.weight": layer.input_layernorm.weight,
                      p + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight})
        if layer.self_attn.q_norm is not None:
            state[p + "self_attn.q_norm.weight"] = layer.self_attn.q_norm.weight
            state[p + "self_attn.k_norm.weight"] = layer.self_attn.k_norm.weight
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected or any("lm_head" not in m and "rotary" not in m for m in missing):
        raise RuntimeError(f"baseline weights do not line up: missing {missing[:4]}, unexpected {unexpected[:4]}")
    model.lm_head = None  # only the answer rows are used (the engine's head_rows)
    torch.cuda.empty_cache() if dev.type == "cuda" else None
    return model.eval()


def batches(prompts, order, budget: int):
    """Index lists of right-padded batches of at most `budget` padded tokens (order: longest first)."""
    out, cur, cur_max = [], [], 0
    for i in order:
        n = len(prompts[i])
        if cur and max(cur_max, n) * (len(cur) + 1) > budget:
            out.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, n)
    if cur:
        out.append(cur)
    return out


@torch.inference_mode()
def run_batches(model, head_rows, prompts, idx_batches, device) -> np.ndarray:
    """Answer-row logits [n, n_head] (float32, CPU) for the prompts in idx_batches."""
    out = {}
    for b in idx_batches:
        L = max(len(prompts[i]) for i in b)
        ids = torch.zeros(len(b), L, dtype=torch.long)
        lens = torch.tensor([len(prompts[i]) for i in b])
        for j, i in enumerate(b):
            ids[j, : len(prompts[i])] = torch.tensor(prompts[i])
        ids, lens = ids.to(device, non_blocking=True), lens.to(device)
        h = model.model(input_ids=ids, use_cache=False).last_hidden_state  # [B, L, hidden]
        last = h[torch.arange(len(b), device=device), lens - 1]
        logits = (last @ head_rows.t()).float().cpu()
        for j, i in enumerate(b):
            out[i] = logits[j]
    keys = sorted(out)
    return torch.stack([out[i] for i in keys]).numpy(), keys


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_baseline(model, head_rows, prompts, device, sample: int, max_tokens: int = 200_000,
                  budgets=(8192, 16384, 32768)):
    """Seconds the baseline needs for ALL prompts, from a length-stratified sample.

    The sample: at most `sample` prompts and `max_tokens` tokens, evenly
    spaced in length order. Each batch budget runs the whole sample once
    (after one warm-up batch); the fastest counts. Total = sample time * n / len(sample).
    """
    n = len(prompts)
    lens = np.array([len(p) for p in prompts])
    by_len = np.argsort(lens, kind="stable")
    k = int(min(n, sample, max(8, max_tokens // max(1, int(lens.mean())))))
    pick = by_len if k >= n else by_len[np.linspace(0, n - 1, k).round().astype(int)]
    pick = sorted(set(pick.tolist()), key=lambda i: -len(prompts[i]))
    tried = {}
    for budget in budgets:
        bs = batches(prompts, pick, budget)
        run_batches(model, head_rows, prompts, bs[:1], device)  # warm-up at this shape
        _sync(device)
        t0 = time.perf_counter()
        run_batches(model, head_rows, prompts, bs, device)
        _sync(device)
        tried[budget] = time.perf_counter() - t0
    best = min(tried, key=tried.get)
    t = tried[best]
    tok = sum(len(prompts[i]) for i in pick)
    return {"est_s": t * n / len(pick), "sample_prompts": len(pick), "sample_s": t,
            "tokens_per_s": tok / t, "batch_tokens": best,
            "tried": {str(k): round(v, 4) for k, v in tried.items()}}
