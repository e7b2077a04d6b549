"""The engine's own prefill rate, measured once per (model, device, dtype) and cached.

The planner prices an AI call as FLOPs over a rate (docs/architecture.md, "Speed of
light"): ``seconds = (2 * N_lin * fresh + head) / rate + 4 * L * n_q * d * pairs / attn_rate
+ prompts * prompt_s``. A preset rate on a CPU is off by one or two orders of magnitude, so on its
first load an engine times two calls of its public path (tokenization included) with the same fresh
tokens at two prompt lengths: many short prompts, then few long ones. The difference
of the two times is the attention term, the rest the linear one. On a CPU a third call, 48 short
questions after one cached document, adds the fixed host seconds of a prompt (``prompt_s``: 0 to
3.4 ms for SmolLM2 in one thread on a 2-core machine, where a join pair's ~15 fresh tokens take
~20 ms); the three terms are fitted by least squares. One engine of a machine measures at a time
(a file lock): measurements at once slow each other. Fresh tokens are the engine's count (the chat frame is
cached, as the planner prices it). The figures go to
``<cache>/rates/<weights>.json`` beside the converted weights (``weights.cache_root``),
keyed ``<device type>/<dtype>`` (on a CPU with the engine's threads after it: an engine in a notebook's
process measures with all the cores, one in a task with the task's); the driver reads them there
(:func:`cached`).

On a CPU the calls are small (512 fresh tokens at 64 and 512 tokens a prompt, the lengths of the documents
a query brings: SmolLM2-135M in a task of one core, about 3 s once; fitted at 32 and 128 tokens the rates
priced 512-token prompts 1.9x slow); on a GPU
they are several passes of the engine's work (256k fresh tokens at 512 and 4,096 tokens a prompt: with
64k, one call's own set-up priced 300-token documents 1.27x slow), each shape run once untimed first
(kernels compile), so the rate is the rate of real work, not of a launch (Qwen3-4B on one H100: about
8 s once). ``EngineConfig(measure_rate=False)``
skips it.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from .config import CACHE_ENV, env

# (short prompt, long prompt, fresh tokens per timed call) in tokens, and the questions of the third call (0: none),
# per device type
SIZES = {"cpu": (64, 512, 512, 48), "cuda": (512, 4096, 262144, 0)}
WORDS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "gravel", "harbor", "island", "juniper",
         "kettle", "lantern", "meadow", "nickel", "orchard", "pepper", "quarry", "river", "saddle", "timber")


def root(explicit: str | None = None) -> Path:
    """The cache folder (``weights.cache_root``'s, read without importing torch)."""
    return Path(explicit or env(CACHE_ENV) or Path.home() / ".cache" / "quail_spark")


def path(cache: Path, key: str) -> Path:
    return cache / "rates" / f"{key}.json"


def weights_key(model: str, folder: Path | None) -> str:
    """The name of a model's rates file: its converted weights' folder, else the preset's name."""
    return folder.name if folder is not None else Path(model).name


def slot(device_type: str, dtype: str, threads: int | None = None) -> str:
    """The figure's key in a rates file: ``<device type>/<dtype>``, on a CPU ``/t<threads>`` after it (an engine
    in a task runs the task's threads; one in a notebook's own process, all the cores)."""
    base = f"{device_type}/{dtype.removeprefix('torch.')}"
    return f"{base}/t{threads}" if device_type == "cpu" and threads else base


def cached(cache: Path, key: str, device_type: str, dtype: str, threads: int | None = None,
           exact: bool = False) -> dict | None:
    """The measured figures of ``key`` on ``device_type`` in ``dtype``, or None. On a CPU those measured with
    ``threads`` threads; unless ``exact``, where none were, those of the nearest thread count (the fewest where
    ``threads`` is None)."""
    try:
        data = json.loads(path(cache, key).read_text())
    except (OSError, ValueError):
        return None
    if device_type != "cpu" or exact:
        return data.get(slot(device_type, dtype, threads))
    base = slot(device_type, dtype) + "/t"
    counts = {int(k[len(base):]): v for k, v in data.items() if k.startswith(base) and k[len(base):].isdigit()}
    if not counts:
        return data.get(slot(device_type, dtype))  # a file of before the thread count was kept
    want = threads or min(counts)
    return counts[min(counts, key=lambda n: (abs(n - want), n))]


def measure(engine, cache: Path, key: str) -> dict:
    """Time the engine at two prompt lengths and, on a CPU, on many short prompts (unless a figure measured
    this way is cached), store and return the fitted rates."""
    device_type, dtype = engine.rt.device.type, str(engine.rt.dtype)
    short, wanted, fresh, questions = SIZES.get(device_type, SIZES["cuda"])
    room = engine.rt.max_position - len(engine.render_filter("", "Is it?")) - 8  # a document's, with a margin
    long = min(wanted, engine.rt.max_position // 2, room)  # a prompt, frame included, within the context
    short = min(short, long // 4)
    sizes = (short, long, fresh, questions)
    threads = _threads() if device_type == "cpu" else None
    hit = cached(cache, key, device_type, dtype, threads, exact=True)
    limited = long < min(wanted, engine.model_config.max_position // 2)  # max_prompt_tokens below the lengths
    if hit is not None and (_same(hit, sizes) or limited):
        return hit  # else measured by an earlier method (other lengths or sizes, no per-prompt term): again
    if limited and hit is None and short < 8:
        return None  # prompts too short to time: the preset prices this model until a wider engine loads
    lock = path(cache, key).with_suffix(".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:  # one engine of this machine measures at a time; the others then read its figure
        fcntl.flock(fh, fcntl.LOCK_EX)
        hit = cached(cache, key, device_type, dtype, threads, exact=True)
        return hit if hit is not None and _same(hit, sizes) else _measure(engine, cache, key, sizes)


def _same(hit: dict, sizes: tuple) -> bool:
    """Whether a cached figure was measured as this method measures at these sizes."""
    short, long, fresh, questions = sizes
    return hit.get("prompt_tokens") == [short, long] and hit.get("call_tokens") == fresh \
        and ("prompt_s" in hit) == bool(questions)


def _measure(engine, cache: Path, key: str, sizes: tuple) -> dict:
    short, long, fresh, questions = sizes
    device_type, dtype = engine.rt.device.type, str(engine.rt.dtype)
    m = engine.model_config
    n_lin = m.linear_params
    attn = 4 * m.num_layers * m.num_heads * m.head_dim
    engine.filter([_text(engine, 8, 99)], ["Is it?"])  # warm-up: first-call set-up is not throughput
    rows = []  # (fresh tokens, attended pairs, prompts, seconds) of a call
    for length in (short, long):
        if device_type != "cpu":  # the shape once untimed: kernels compile for it (other texts: no cache hit)
            engine.filter([_text(engine, length, 10_000 + k + length) for k in range(max(1, fresh // 8 // length))],
                          ["Is it?"])
        docs = [_text(engine, length, k + length) for k in range(fresh // length)]
        lengths = [len(engine.render_filter(d, "Is it?")) for d in docs]
        rows.append(_timed(engine, docs, ["Is it?"], lengths))
    if questions:  # many short prompts after one cached document: the per-prompt term
        doc = _text(engine, short, 77_777)
        engine.filter([doc], ["Is it?"])  # the document's KV, cached for the timed questions
        asks = [f"Is {WORDS[k % len(WORDS)]} {k} in it?" for k in range(questions)]
        rows.append(_timed(engine, [doc], asks, [len(engine.render_filter(doc, q)) for q in asks]))
    a, b, c = _fit(rows)
    rate = 2 * n_lin / a
    fig = {"rate": rate, "attn_rate": attn / b if b > 0 else rate,
           "tokens_per_s": [round(f / t) for f, _, _, t in rows[:2]], "prompt_tokens": [short, long],
           "call_tokens": fresh, "threads": _threads(), "measured_s": round(sum(r[-1] for r in rows), 3)}
    if questions:
        fig["prompt_s"] = c
    _store(cache, key, slot(device_type, dtype, fig["threads"]), fig)
    return fig


def _timed(engine, docs: list, asks: list, lengths: list) -> tuple:
    """(fresh tokens, attended pairs, prompts, seconds) of ``engine.filter(docs, asks)``; ``lengths``: the
    prompts' whole lengths. Fresh tokens as the engine counts them (the frame and a cached document are not)."""
    before = engine.stats["fresh_tokens"]
    _sync(engine)
    t0 = time.perf_counter()
    engine.filter(docs, asks)
    _sync(engine)
    seconds = time.perf_counter() - t0
    fresh = engine.stats["fresh_tokens"] - before
    per = fresh / len(lengths)  # each prompt's fresh tokens attend to its cached part and to those before them
    pairs = sum(per * (n - per) + per * (per + 1) / 2 for n in lengths)
    return fresh, pairs, len(lengths), seconds


def _fit(rows: list) -> tuple:
    """(a, b, c) of t = fresh * a + pairs * b + prompts * c over the timed calls, b and c >= 0 (noise can hide
    a small term: it is dropped and the others fitted again by least squares)."""
    import numpy as np

    x = np.array([r[:3] if len(rows) > 2 else r[:2] for r in rows], dtype=float)  # two calls: no per-prompt term
    t = np.array([r[3] for r in rows], dtype=float)
    for cols in ((0, 1, 2), (0, 2), (0, 1), (0,)):
        cols = [k for k in cols if k < x.shape[1]]
        sol = np.linalg.lstsq(x[:, cols], t, rcond=None)[0]
        if all(v >= 0 for v in sol[1:]):
            out = [0.0, 0.0, 0.0]
            for k, v in zip(cols, sol):
                out[k] = float(v)
            return max(out[0], 1e-12), out[1], out[2]
    return max(float(t.sum() / x[:, 0].sum()), 1e-12), 0.0, 0.0


def _sync(engine) -> None:
    if engine.rt.device.type == "cuda":
        import torch

        torch.cuda.synchronize(engine.rt.device)


def _text(engine, tokens: int, seed: int) -> str:
    """A document of ``tokens`` tokens (give or take the few that a cut word's re-tokenization moves) of
    words no other text has (no shared prefix): a word is a name and the seed's digits, which the
    tokenizer may split into one token each, so the words are cut at ``tokens`` of the engine's ids."""
    words = [f"{WORDS[(seed * 7 + i) % len(WORDS)]}{seed}" for i in range(max(1, tokens // 2))]
    return engine.tokenizer.decode(engine.doc_ids(" ".join(words))[:tokens])


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _store(cache: Path, key: str, slot_key: str, fig: dict) -> None:
    p = path(cache, key)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        data = {}
    data[slot_key] = fig
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, p)  # several workers may measure at once: each writes a whole file
