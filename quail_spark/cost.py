"""The installed engine's model shape, handed to the planner's cost model.

The cost model itself lives where plans are made, in the Java rules
(``quail_spark/java/io/quailspark/AiCost.java``): speed-of-light seconds of the
tokens each AI call computes,

    FLOPs = 2 * N_lin * fresh_tokens + 4 * L * n_q * d * attended_pairs
            + 2 * d_model * |answer ids| per prompt        (restricted head)
    SoL seconds = FLOPs / dense matmul rate

(docs/architecture.md, "Speed of light"). :func:`session_conf` gives the shape of
the model ``install()`` runs as ``spark.quail.model.*`` settings that the rules read;
the rewritten plan carries the estimates, and ``explain`` prints those.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpu_worker.config import MODEL_SHAPES, RANDOM_SHAPES, linear_params

CONF = "spark.quail.model."


@dataclass(frozen=True)
class ModelShape:
    """Shape of a dense decoder with grouped-query attention and a gated MLP."""

    name: str
    n_layers: int
    hidden: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int

    @property
    def n_lin(self) -> int:
        """Linear parameters outside embeddings and LM head: q, k, v, o and gate/up/down."""
        return linear_params(self.n_layers, self.hidden, self.n_q_heads, self.n_kv_heads, self.head_dim, self.ffn)


def _shape(name: str, m) -> ModelShape:
    return ModelShape(name, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                      m.intermediate_size, m.vocab_size)


DEFAULT_MODEL = "smollm2-135m"  # the embedded default (quail_spark.presets); the rules price it without install()
MODELS = {name: _shape(name, cfg) for name, cfg in MODEL_SHAPES.items()}  # gpu_worker.config's, one definition
# Dense matmul rates in FLOP/s. h200: bf16 measured on the lent H200. cpu: an
# estimate for a few cores of a recent x86 in fp32, not a measurement.
RATES = {"h200": 789e12, "cpu": 1e11}
# settings measured for the installed model (quail_spark.calibration, gpu_worker/rates.py); without them
# the rules price the presets: a rate for attention equal to ``rate``, a chat frame estimate, 4 bytes a token
MEASURED = ("attn_rate", "prompt_s", "rate_source", "frame_head", "frame_ask", "frame_join_mid", "frame_join_tail",
            "bytes_per_token", "tokens_per_piece")


def model_shape(model: str) -> ModelShape:
    """The shape of an engine model preset; a random preset's from its engine config, a model
    the table does not know (a local folder or GGUF file) priced as SmolLM2-135M.

    >>> model_shape("qwen3-4b-random").n_lin
    3633315840
    """
    base = model.removesuffix("-random")
    if base in MODELS:
        return MODELS[base]
    if model in RANDOM_SHAPES:
        return _shape(model, RANDOM_SHAPES[model])
    return MODELS[DEFAULT_MODEL]


def session_conf(model: str, device: str, engine: dict | None = None, threads: int | None = None) -> dict:
    """``spark.quail.model.*`` settings of ``model`` on ``device`` ('cpu', else a GPU): its shape, the rates
    (the engine's measured ones where it measured them, gpu_worker/rates.py; else the preset: a GPU priced
    as the H200)
    and its prompt frame counted by its tokenizer (:mod:`quail_spark.calibration`; ``engine``: the
    EngineConfig fields, for ``cache_dir``, ``tokenizer`` and ``dtype``; ``threads``: a task's, for a CPU's
    rates).

    >>> session_conf("smollm2-135m", "cpu")["spark.quail.model.n_lin"]
    '106168320'
    """
    values = preset_conf(model, device)
    values.update({CONF + k: str(v) for k, v in _measured(model, device, engine or {}, threads).items()})
    return values


def preset_conf(model: str, device: str) -> dict:
    """``spark.quail.model.*`` of ``model`` on ``device`` from its shape and the preset rate alone (nothing
    measured): what :func:`session_conf` starts from, and what the rules price without ``install()``
    (the jar's contract, quail_spark/extension.py)."""
    s = model_shape(model)
    rate = RATES["cpu" if device == "cpu" else "h200"]
    values = {"name": s.name, "n_lin": s.n_lin, "layers": s.n_layers, "q_heads": s.n_q_heads,
              "head_dim": s.head_dim, "hidden": s.hidden, "rate": f"{rate:g}", "attn_rate": f"{rate:g}",
              "rate_source": "preset"}
    return {CONF + k: str(v) for k, v in values.items()}


def _measured(model: str, device: str, engine: dict, threads: int | None = None) -> dict:
    """The frame and the rates measured for ``model`` on ``device``'s type; {} where the tokenizer cannot load."""
    from quail_spark import calibration

    try:
        facts = calibration.frame(model, engine.get("cache_dir"), engine.get("tokenizer"))
    except (OSError, ValueError, ImportError):
        return {}
    out = {k: f"{v:g}" for k, v in facts.items()
           if k.startswith("frame_") or k in ("bytes_per_token", "tokens_per_piece")}
    rates = calibration.measured_rates(facts, device, engine.get("dtype"), engine.get("cache_dir"), threads)
    if rates is not None:
        out.update(rate=f"{rates['rate']:g}", attn_rate=f"{rates['attn_rate']:g}", rate_source="measured")
        if rates.get("prompt_s"):
            out["prompt_s"] = f"{rates['prompt_s']:g}"
    return out
