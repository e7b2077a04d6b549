"""Layers shared by the Llama and Qwen3 decoders, written for packed prefill.

Parameter names follow the Hugging Face checkpoints, so their safetensors load
as they are. A forward pass sees one packed batch: `h: [T, hidden]`, no padding.
The numerical kernels come from an `ops` namespace (plain torch on CPU, Triton
on CUDA); the attention metadata comes from the runner (`attention.AttnMeta`).
"""
from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..quant import fp8_linear, quantize_weight


def project(x, weight, fp8_weight, dtype, ops):
    """x @ weight.t() (ops.linear); with an FP8 weight, x is quantized rows (q, scale) (gpu_worker/quant.py)."""
    if fp8_weight is None:
        return ops.linear(x, weight)
    return fp8_linear(x, fp8_weight, dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.n_q, self.n_kv, self.head_dim = cfg.num_heads, cfg.num_kv_heads, hd
        self.q_proj = nn.Linear(d, self.n_q * hd, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv * hd, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv * hd, bias=False)
        self.o_proj = nn.Linear(self.n_q * hd, d, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_eps)
        else:
            self.q_norm = self.k_norm = None
        self.eps = cfg.rms_eps
        self.qkv_weight: torch.Tensor | None = None
        self.qkv_fp8 = self.o_fp8 = None  # (float8 weight, scales) after DecoderLM.quantize_fp8

    def fuse(self):
        """One [q; k; v] projection instead of three (after weights are loaded)."""
        self.qkv_weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]).contiguous()
        del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x, positions, rope, meta, kv, layer: int, ops, fp8: bool = False, rows=None, residual=None):
        """x: [T, hidden], or its quantized rows (q, scale) when fp8. rows: int64 [n] packed rows whose
        output is wanted (the last layer's answer positions: every row's K and V are still stored,
        only these rows go through the output projection), or None for all. residual: the output is
        added into it in place (`ops.linear_add`) and it is returned."""
        T = x[0].shape[0] if fp8 else x.shape[0]
        dtype = self.o_proj.weight.dtype
        qkv = project(x, self.qkv_weight, self.qkv_fp8 if fp8 else None, dtype, ops)  # [T, (n_q + 2 n_kv) * d]
        hd = self.head_dim
        q, k, v = qkv.split([self.n_q * hd, self.n_kv * hd, self.n_kv * hd], dim=-1)
        q = q.view(T, self.n_q, hd)  # q: [T, n_q, d]
        k = k.view(T, self.n_kv, hd)  # k, v: [T, n_kv, d]
        v = v.view(T, self.n_kv, hd)
        qn = self.q_norm.weight if self.q_norm is not None else None
        kn = self.k_norm.weight if self.k_norm is not None else None
        k_cache, v_cache = kv.layer(layer) if kv is not None else (None, None)
        q, k = ops.qk_norm_rope(q, k, v, positions, rope[0], rope[1], qn, kn, self.eps,
                                k_cache, v_cache, meta.write_slots)
        o = ops.attention(q, k, v, k_cache, v_cache, meta).reshape(T, self.n_q * hd)  # [T, n_q * d]
        if rows is not None:
            o = o.index_select(0, rows)  # [n, n_q * d]
        if fp8:
            return project(ops.quant_rows(o), None, self.o_fp8, dtype, ops)
        if residual is not None:
            return ops.linear_add(o, self.o_proj.weight, residual)
        return ops.linear(o, self.o_proj.weight)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.gate_up_weight: torch.Tensor | None = None
        self.gate_up_block = 0  # 0: gate_up_weight is [gate; up]; n: its rows interleaved in blocks of n (ops.pack_gate_up)
        self.gate_up_fp8 = self.down_fp8 = None

    def fuse(self):
        self.gate_up_weight = torch.cat([self.gate_proj.weight, self.up_proj.weight]).contiguous()
        del self.gate_proj, self.up_proj

    def pack(self, ops):
        """The gate/up weight in the layout `ops.swiglu` reads fastest (after `fuse`)."""
        self.gate_up_weight, self.gate_up_block = ops.pack_gate_up(self.gate_up_stacked())

    def gate_up_stacked(self) -> torch.Tensor:
        """[gate; up] whatever the layout `pack` chose."""
        if not self.gate_up_block:
            return self.gate_up_weight
        from quail_kernels.gemm_swiglu import deinterleave_gate_up

        return deinterleave_gate_up(self.gate_up_weight, self.gate_up_block)

    def forward(self, x, ops, fp8: bool = False, residual=None):
        """The MLP's output; residual: added into it in place (`ops.linear_add`) and returned instead."""
        if fp8:
            dtype = self.down_proj.weight.dtype
            gate_up = project(x, None, self.gate_up_fp8, dtype, ops)
            return project(ops.silu_and_mul(gate_up, quant=True), None, self.down_fp8, dtype, ops)
        act = ops.swiglu(x, self.gate_up_weight, self.gate_up_block)
        if residual is not None:
            return ops.linear_add(act, self.down_proj.weight, residual)
        return ops.linear(act, self.down_proj.weight)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.eps = cfg.rms_eps


class DecoderBody(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)


class DecoderLM(nn.Module):
    """Embedding, decoder layers, final norm and a head restricted to answer rows (the whole vocabulary's
    head for a pass that asks for it: decoding)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.model = DecoderBody(cfg)
        if not cfg.tie_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.head_rows: torch.Tensor | None = None
        self.head_all: torch.Tensor | None = None  # [vocab, hidden]: full-vocabulary logits (decode passes)
        self.rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self.fp8 = False  # projections in float8 (quantize_fp8)

    def head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.cfg.tie_embeddings else self.lm_head.weight

    def prepare(self, answer_ids: list[int], max_position: int, device):
        """Fuse projections, cut the head to the answer rows, build the RoPE table."""
        for layer in self.model.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()
        ids = torch.tensor(answer_ids, dtype=torch.long, device=self.head_weight().device)
        self.head_rows = self.head_weight().index_select(0, ids).contiguous()  # [n_ans, hidden]
        self.head_all = self.head_weight().detach()  # the embedding itself when tied: no copy
        if not self.cfg.tie_embeddings:
            del self.lm_head
        self.rope = rope_table(self.cfg.head_dim, self.cfg.rope_theta, max_position, device)

    def pack(self, ops):
        """Weights in the layouts `ops` reads fastest (after `prepare`; the MLP's gate/up on a GPU with the
        fused SwiGLU GEMM, quail_kernels/gemm_swiglu.py)."""
        for layer in self.model.layers:
            layer.mlp.pack(ops)

    @torch.no_grad()
    def quantize_fp8(self, keep: bool = False):
        """Projection weights to float8 e4m3 with per-output-row scales; the forward then runs them
        through torch._scaled_mm on quantized activation rows. keep: also keep the original weights
        (`self.fp8` switches between the two)."""
        for layer in self.model.layers:
            at, mlp = layer.self_attn, layer.mlp
            at.qkv_fp8, at.o_fp8 = quantize_weight(at.qkv_weight), quantize_weight(at.o_proj.weight)
            mlp.gate_up_fp8, mlp.down_fp8 = quantize_weight(mlp.gate_up_stacked()), quantize_weight(mlp.down_proj.weight)
            if not keep:  # only the dtype is read from these from now on
                at.qkv_weight = mlp.gate_up_weight = None
                at.o_proj.weight = nn.Parameter(at.o_proj.weight.new_empty(0), requires_grad=False)
                mlp.down_proj.weight = nn.Parameter(mlp.down_proj.weight.new_empty(0), requires_grad=False)
        self.fp8 = True

    @torch.inference_mode()
    def forward(self, input_ids, positions, meta, kv, ops, full: bool = False, out=None):
        """Answer-row logits at `meta.logit_index`: [n_out, n_answer_ids] float32; full: the whole
        vocabulary's [n_out, vocab] instead (a decode pass; the same cost elsewhere); out: written into
        this [n_out, vocab] tensor in the model's dtype instead (a decode step's static buffer)."""
        h = self.model.embed_tokens(input_ids)  # [T, hidden]
        layers = self.model.layers
        q8 = self.fp8
        x, residual = ops.rmsnorm(h, layers[0].input_layernorm.weight, self.cfg.rms_eps, quant=q8), h
        out_rows = meta.logit_index
        in_gemm = getattr(ops, "residual_gemm", False) and not q8  # the residual added by the projections
        for i, layer in enumerate(layers):
            last_layer = i + 1 == len(layers)
            if in_gemm and not last_layer:
                residual = layer.self_attn(x, positions, self.rope, meta, kv, i, ops, residual=residual)
                x = ops.rmsnorm(residual, layer.post_attention_layernorm.weight, layer.eps)
                residual = layer.mlp(x, ops, residual=residual)
                x = ops.rmsnorm(residual, layers[i + 1].input_layernorm.weight, layer.eps)
                continue
            # the last layer's output matters at the answer positions only: its K and V are stored for
            # every row, the output projection, residual and MLP run on those rows (no later layer reads
            # the others)
            a = layer.self_attn(x, positions, self.rope, meta, kv, i, ops, q8, rows=out_rows if last_layer else None)
            if last_layer and out_rows.numel() == 0:  # a pass of prompts' earlier chunks: K and V stored, no answer
                head = self.head_all if full else self.head_rows
                return out if out is not None else h.new_zeros((0, head.shape[0]), dtype=torch.float32)
            if last_layer:
                residual = residual.index_select(0, out_rows)  # [n_out, hidden]
            x, residual = ops.add_rmsnorm(a, residual, layer.post_attention_layernorm.weight, layer.eps, quant=q8)
            m = layer.mlp(x, ops, q8)
            nxt = layers[i + 1].input_layernorm.weight if i + 1 < len(layers) else None
            if nxt is not None:
                x, residual = ops.add_rmsnorm(m, residual, nxt, layer.eps, quant=q8)
            else:
                residual = m + residual
        last = ops.rmsnorm(residual, self.model.norm.weight, self.cfg.rms_eps)  # [n_out, hidden]
        head = self.head_all if full else self.head_rows
        if out is not None:
            if out.device.type == "cuda":
                return torch.mm(last, head.t(), out=out)
            return out.copy_(ops.linear(last, head))
        return ops.linear(last, head).float()


def rope_table(head_dim: int, theta: float, max_position: int, device):
    """cos, sin: float32 [max_position, head_dim // 2] (HF rotate-half layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(max_position, dtype=torch.int64).float()
    freqs = torch.outer(t, inv)
    return freqs.cos().to(device), freqs.sin().to(device)
