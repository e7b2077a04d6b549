"""The sequences of a generate or extract call (prompts rendered document first, fitted to the context)
and their answers read back: text cut at stop strings, extracted fields converted."""
from __future__ import annotations

from .decode import Seq
from .grammar import Extraction, answer, describe


def stop_strings(stop) -> tuple:
    """Stop strings as a tuple (one string or several); TypeError naming the one that is no string."""
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    for i, x in enumerate(stop):
        if not isinstance(x, str):
            raise TypeError(f"stop[{i}] must be a string, got {type(x).__name__}")
    return stop


def cut_at(text: str, stop: tuple) -> str:
    """`text` cut before the first occurrence of any stop string."""
    cut = min((i for i in (text.find(x) for x in stop if x) if i >= 0), default=len(text))
    return text[:cut]


def generate_seqs(renderer, fitter, toks, p_toks, prompts, max_tokens, stop, ignore_eos) -> list[Seq | None]:
    """One sequence per row (None where the document or its partner is NULL); p_toks None: no partners."""
    seqs: list[Seq | None] = [None] * len(toks)
    for i, ids in enumerate(toks):
        p = None if p_toks is None else p_toks[i]
        if ids is None or (p_toks is not None and p is None):
            continue
        if p_toks is None:
            head, tail = renderer.generate_parts(prompts[i])
            prefix, suffix = fitter.fit(i, head, ids, tail)
        else:  # the join layout: the document's prefix is shared by its partners
            head, mid, post = renderer.generate_join_parts(prompts[i])
            prefix, suffix = fitter.pair_request(i, head + ids + mid, ids, head, mid, p, post)
        seqs[i] = Seq(prefix, suffix, max_tokens, stop=stop, ignore_eos=ignore_eos, label=f"row {i}")
    return seqs


def extract_seqs(renderer, fitter, grammars, toks, fields: dict, instruction, max_tokens) -> list[dict | None]:
    """Per row {field: sequence} (None for a NULL row): every field's prompt after the row's one document."""
    parts = {name: renderer.extract_parts(name, describe(t), instruction) for name, t in fields.items()}
    head = next(iter(parts.values()))[0]
    longest = max(len(tail) for _, tail in parts.values())
    rows: list[dict | None] = []
    for i, ids in enumerate(toks):
        if ids is None:
            rows.append(None)
            continue
        prefix = fitter.fit(i, head, ids, [0] * longest)[0]  # one document list for every field's prompt
        rows.append({name: Seq(prefix, parts[name][1], max_tokens, key=("extract", name, str(t)),
                               matcher=grammars.matcher(t, f"field {name!r}"), label=f"row {i} field {name!r}")
                     for name, t in fields.items()})
    return rows


def extraction(grammars, row: int, fields: dict, seqs: dict) -> Extraction:
    """A row's Extraction: each finished answer converted, a field cut by max_tokens None and named."""
    values = {name: None if s.cut else answer(fields[name], grammars.text(s.out), f"row {row} field {name!r}")
              for name, s in seqs.items()}
    return Extraction(values, tuple(name for name, s in seqs.items() if s.cut))
