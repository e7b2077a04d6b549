"""Frozen configuration of the engine and of the model shapes it runs.

What is derived at run time (KV slots, token budget) lives in `runtime.py`.
This is the one module of gpu_worker/ that reads the process environment:
the QUAIL_* variables are the defaults of EngineConfig fields, read when a
config is made (on a Spark executor, from the executor's environment).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

ON_OVERFLOW = ("error", "truncate")
CPU_POOL_ENV = "QUAIL_CPU_KV_POOL_MIB"
FP8_ATTENTION_ENV = "QUAIL_FP8_ATTENTION"
CACHE_ENV = "QUAIL_SPARK_CACHE"
TOKENIZER_ENV = "QUAIL_TOKENIZER"
EXTRA_ACT_ENV = "QUAIL_EXTRA_ACT_BYTES"


def env(name: str) -> str | None:
    """The variable's value, None where it is unset or blank."""
    raw = os.environ.get(name, "").strip()
    return raw or None


def env_cpu_pool_mib() -> int | None:
    """QUAIL_CPU_KV_POOL_MIB: the CPU KV pool in MiB (a whole number >= 1), or None."""
    raw = os.environ.get(CPU_POOL_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        mib = int(raw)
    except ValueError:
        mib = 0
    if mib < 1:
        raise ValueError(f"{CPU_POOL_ENV} must be a whole number of MiB >= 1, got {raw!r}")
    return mib


def spark_worker_memory_mb() -> int | None:
    """This Spark Python worker's memory (PYSPARK_EXECUTOR_MEMORY_MB, from spark.executor.pyspark.memory)."""
    raw = env("PYSPARK_EXECUTOR_MEMORY_MB")
    return int(raw) if raw is not None and raw.isdigit() else None


def set_env_unless_set(name: str, value: str, *alternatives: str) -> None:
    """Set a library's variable in this process unless the user set it (or one of its alternatives)."""
    if not any(n in os.environ for n in (name, *alternatives)):
        os.environ[name] = value


def linear_params(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int) -> int:
    """Linear parameters outside embeddings and the LM head (q, k, v, o and gate / up / down) of a dense decoder
    with grouped-query attention and a gated MLP: N_lin of DESIGN.md's speed of light."""
    return layers * (hidden * head_dim * 2 * (heads + kv_heads) + 3 * hidden * ffn)


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a dense decoder (Llama or Qwen3 family)."""

    arch: str  # "llama" | "qwen3"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    tie_embeddings: bool = True
    max_position: int = 8192

    @property
    def qk_norm(self) -> bool:
        return self.arch == "qwen3"

    @property
    def linear_params(self) -> int:
        """Non-embedding linear parameters (N_lin of the speed-of-light model)."""
        return linear_params(self.num_layers, self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim,
                             self.intermediate_size)

    def hf_config(self) -> dict:
        """The config.json a Hugging Face checkpoint of this shape would carry."""
        out = {
            "architectures": ["LlamaForCausalLM" if self.arch == "llama" else "Qwen3ForCausalLM"],
            "model_type": self.arch,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "rms_norm_eps": self.rms_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "max_position_embeddings": self.max_position,
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "float32",
        }
        return out

    @classmethod
    def from_hf_config(cls, cfg: dict, source: str = "config.json") -> "ModelConfig":
        arch = cfg.get("model_type")
        if arch not in ("llama", "qwen3"):
            raise ValueError(
                f"{source}: unsupported model_type {arch!r}; quail-spark runs 'llama' "
                "(SmolLM2, Llama 2/3) and 'qwen3' checkpoints")
        heads = cfg["num_attention_heads"]
        rope = cfg.get("rope_theta")
        if rope is None:
            rope = (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        scaling = cfg.get("rope_scaling") or {}
        rtype = (cfg.get("rope_parameters") or {}).get("rope_type", scaling.get("rope_type", "default"))
        if rtype not in (None, "default"):
            raise ValueError(f"{source}: rope_type {rtype!r} is not supported; expected 'default'")
        return cls(
            arch=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            intermediate_size=cfg["intermediate_size"],
            rope_theta=float(rope),
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_position=int(cfg.get("max_position_embeddings", 8192)),
        )


# Named random shapes: tests use the tiny ones, benchmarks the 4B one. All use
# the SmolLM2 tokenizer (vocabulary 49,152 ids), whose ids fit every vocabulary here.
RANDOM_SHAPES: dict[str, ModelConfig] = {
    "tiny-llama-random": ModelConfig(
        arch="llama", vocab_size=49152, hidden_size=64, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, intermediate_size=128, rope_theta=10000.0,
        rms_eps=1e-5, tie_embeddings=True, max_position=2048),
    "tiny-qwen3-random": ModelConfig(
        arch="qwen3", vocab_size=49152, hidden_size=64, num_layers=3, num_heads=4,
        num_kv_heads=1, head_dim=32, intermediate_size=96, rope_theta=1e6,
        rms_eps=1e-6, tie_embeddings=False, max_position=2048),
    "qwen3-4b-random": ModelConfig(
        arch="qwen3", vocab_size=151936, hidden_size=2560, num_layers=36, num_heads=32,
        num_kv_heads=8, head_dim=128, intermediate_size=9728, rope_theta=1e6,
        rms_eps=1e-6, tie_embeddings=True, max_position=40960),
}
# The shapes of the named models, one definition: the cost model prices them (quail_spark.cost) and the
# random presets above copy theirs; SmolLM2's weights come from its GGUF file, whose configuration a test
# checks against this one (tests/test_one_definition.py).
MODEL_SHAPES: dict[str, ModelConfig] = {
    "smollm2-135m": ModelConfig(
        arch="llama", vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9,
        num_kv_heads=3, head_dim=64, intermediate_size=1536, rope_theta=100000.0,
        rms_eps=9.999999747378752e-06, tie_embeddings=True, max_position=8192),
    "qwen3-4b": RANDOM_SHAPES["qwen3-4b-random"],
}
PRESETS = ("smollm2-135m", *RANDOM_SHAPES)  # model names that are no path


@dataclass(frozen=True)
class EngineConfig:
    """What the user chooses. Everything else is derived at run time.

    model: a preset ("smollm2-135m", "tiny-llama-random", "tiny-qwen3-random",
        "qwen3-4b-random") or a local folder with config.json + *.safetensors
        (+ tokenizer.json), or a path to a .gguf file.
    device: "cpu", "cuda" or "cuda:N".
    dtype: "float32", "bfloat16" or "float16"; default float32 on CPU, bfloat16 on CUDA.
    token_budget: most new tokens per forward pass (default: 2048 on CPU, 32768 on CUDA).
    kv_pool_tokens: KV slots (tokens); default on CUDA sized from free memory, on CPU
        1 GiB of KV (23,296 tokens for SmolLM2 in float32), less where the Python worker's share
        of the machine's memory is smaller (runtime.cpu_pool_bytes; `cpu_kv_pool_mib` sets the
        size), allocated when the engine loads.
    cpu_kv_pool_mib: the CPU KV pool in MiB where kv_pool_tokens is unset; default the
        environment variable QUAIL_CPU_KV_POOL_MIB, else sized from memory (above).
    prefix_cache: share prefixes between prompts (off: every prompt from scratch).
    shared_decode: a decode step reads a document's KV once for every sequence forking from
        it (the fields of one extraction, the calls on one row), merged with each sequence's
        own KV by log-sum-exp; off: once per sequence (same answers, more bytes read).
    cuda_graphs: on a GPU, each decode step's forward is replayed from a CUDA graph captured once
        per batch bucket (gpu_worker/step_graph.py); off: launched kernel by kernel (same answers).
    on_overflow: "error" (name the row) or "truncate" (cut the document, never the question).
    max_prompt_tokens: longest prompt; default the model's context length.
    quantize: None (projections in `dtype`) or "fp8": projection weights and
        activations in float8 e4m3 with per-row scales (torch._scaled_mm;
        Hopper-class GPUs, emulated on CPU); on the GPU a join's attention to
        its shared contexts (an anchor's cached keys) takes its scores from
        float8 keys and queries (quail_kernels/kv_fp8.py; `fp8_attention=False`
        keeps them in `dtype`). Faster, not exact: margins move (see
        BENCHMARKS.md for the measured sign agreement).
    fp8_attention: with quantize='fp8' on the GPU, a join's context attention in float8;
        default on unless the environment variable QUAIL_FP8_ATTENTION is "0".
    cache_dir: where converted GGUF checkpoints are kept; default QUAIL_SPARK_CACHE, else
        ~/.cache/quail_spark.
    tokenizer: tokenizer folder for the random presets; default QUAIL_TOKENIZER, else SmolLM2's.
    extra_activation_bytes: added to the GPU's activation reserve when the KV pool is sized
        from free memory; default QUAIL_EXTRA_ACT_BYTES, else 0.
    measure_rate: on the first load of a (model, device, dtype), time the prefill at two
        prompt lengths and cache the rates beside the weights for the planner's estimates
        (gpu_worker/rates.py); off: nothing is timed.
    """

    model: str = "smollm2-135m"
    device: str = "cpu"
    dtype: str | None = None
    token_budget: int | None = None
    kv_pool_tokens: int | None = None
    prefix_cache: bool = True
    shared_decode: bool = True
    cuda_graphs: bool = True
    on_overflow: str = "error"
    max_prompt_tokens: int | None = None
    seed: int = 0
    cache_dir: str | None = field(default_factory=lambda: env(CACHE_ENV))
    use_triton: bool | None = None  # default: on CUDA when triton imports
    tokenizer: str | None = field(default_factory=lambda: env(TOKENIZER_ENV))
    quantize: str | None = None
    cpu_kv_pool_mib: int | None = field(default_factory=env_cpu_pool_mib)
    fp8_attention: bool = field(default_factory=lambda: os.environ.get(FP8_ATTENTION_ENV, "1") != "0")
    extra_activation_bytes: int = field(default_factory=lambda: int(os.environ.get(EXTRA_ACT_ENV, 0)))
    measure_rate: bool = True  # time the prefill once per (model, device, dtype) for the planner (rates.py)

    def __post_init__(self):
        if self.on_overflow not in ON_OVERFLOW:
            raise ValueError(f"on_overflow must be one of {ON_OVERFLOW}, got {self.on_overflow!r}")
        if self.token_budget is not None and self.token_budget < 16:
            raise ValueError(f"token_budget must be >= 16 tokens, got {self.token_budget}")
        if self.kv_pool_tokens is not None and self.kv_pool_tokens < 16:
            raise ValueError(f"kv_pool_tokens must be >= 16, got {self.kv_pool_tokens}")
        if self.cpu_kv_pool_mib is not None and self.cpu_kv_pool_mib < 1:
            raise ValueError(f"cpu_kv_pool_mib must be a whole number of MiB >= 1, got {self.cpu_kv_pool_mib}")
        if self.quantize not in (None, "fp8"):
            raise ValueError(f"quantize must be None or 'fp8', got {self.quantize!r}")

    def replace(self, **kw) -> "EngineConfig":
        return dataclasses.replace(self, **kw)

    def key(self) -> str:
        """Stable id of this configuration (the per-worker engine cache key)."""
        return repr(sorted(dataclasses.asdict(self).items()))
