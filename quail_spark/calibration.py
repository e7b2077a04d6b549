"""What the planner's cost model measures about the installed model instead of defaulting it.

- The prompt frame in tokens (``spark.quail.model.frame_*``): the chat template and layout
  words before a document, around a question, between a join's anchor and its partner,
  counted by the model's own renderer (``gpu_worker.prompts.PromptRenderer``); and the
  tokenizer's UTF-8 bytes per token on English prose (``bytes_per_token``), which turns a
  document column's sampled bytes into tokens in the Java rules (``AiSample.java``).
  Only the tokenizer loads, once: the figures are cached in
  ``<cache>/planner/<model>.json`` (``gpu_worker.weights.cache_root``).
- The rates (``rate``, ``attn_rate``): what the engine measured on its first load on that
  device type (``gpu_worker/rates.py``, cached beside the weights); without a measurement, the
  preset (``cost.RATES``: on a GPU the H200's measured bf16 matmul rate, the benchmarks' yardstick).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

# the word pieces AiSample.java counts in a sampled document: runs of letters, single digits, single
# other non-space characters
PIECE = re.compile(r"[^\W\d_]+|\d|[^\w\s]|_")


def pieces(text: str) -> list[str]:
    """The word pieces of ``text`` (as ``AiSample.pieces`` counts them).

    >>> pieces("def f(x): return 12")
    ['def', 'f', '(', 'x', ')', ':', 'return', '1', '2']
    """
    return PIECE.findall(text)


# English prose (from the Python tutorial's style) for the tokenizer's bytes per token
PROSE = ("Python is an easy to learn, powerful programming language. It has efficient high-level data "
         "structures and a simple but effective approach to object-oriented programming. The interpreter and "
         "the extensive standard library are freely available in source or binary form for all major "
         "platforms. When a statement is executed, the expressions are evaluated once, from left to right; "
         "an exception raised while it runs stops it, and the handler that matches its type is searched for "
         "in the enclosing blocks. A function call passes its arguments by assignment: each name in the "
         "definition is bound to an object, so a list changed inside the function is changed outside too.")
QUESTION = "Is the document about loops?"


def _cache(cache_dir: str | None = None) -> Path:
    from gpu_worker import rates

    return rates.root(cache_dir) / "planner"


def frame(model: str, cache_dir: str | None = None, tokenizer: str | None = None) -> dict:
    """The prompt frame and bytes per token of ``model``'s tokenizer (cached after the first call).

    >>> f = frame("smollm2-135m")                                  # doctest: +SKIP
    >>> f["frame_head"] > 0 and 3 < f["bytes_per_token"] < 6        # doctest: +SKIP
    True
    """
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{model}-{tokenizer or ''}")[-120:]
    p = _cache(cache_dir) / f"{name}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        pass
    facts = _measure_frame(model, cache_dir, tokenizer)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(facts, indent=1, sort_keys=True))
    os.replace(tmp, p)
    return facts


def _measure_frame(model: str, cache_dir: str | None, tokenizer: str | None) -> dict:
    from gpu_worker import rates, weights
    from gpu_worker.prompts import PromptRenderer

    src = weights.resolve(model, cache_dir, tokenizer=tokenizer)
    r = PromptRenderer(weights.load_tokenizer(src))
    q = len(r.encode(QUESTION))
    head, tail = r.filter_parts(QUESTION)
    _, mid, post = r.join_parts(QUESTION)
    prose = r.encode_docs([PROSE])[0]
    return {"frame_head": len(head), "frame_ask": len(tail) - q, "frame_join_mid": len(mid) - q,
            "frame_join_tail": len(post), "bytes_per_token": len(PROSE.encode()) / len(prose),
            "tokens_per_piece": len(prose) / len(pieces(PROSE)), "weights_key": rates.weights_key(model, src.folder)}


def measured_rates(facts: dict, device: str, dtype: str | None = None, cache_dir: str | None = None,
                   threads: int | None = None) -> dict | None:
    """The rates the engine measured for the model of ``facts`` on ``device`` (see gpu_worker/rates.py); on a CPU
    those of an engine of ``threads`` threads (a task's), else of the nearest count."""
    from gpu_worker import rates

    kind = "cpu" if device == "cpu" else "cuda"
    dtype = dtype or ("float32" if kind == "cpu" else "bfloat16")
    return rates.cached(rates.root(cache_dir), facts.get("weights_key", ""), kind, dtype, threads)
