"""A long document is tokenized in pieces (in parallel) only where the pieces' ids are the document's own."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig
from gpu_worker.prompts import PIECE_CHARS, pieces_of

# letters of several scripts, digits, punctuation, apostrophes, runs of spaces, tabs and newlines, emoji and
# the chat frame's markers: every kind of character the byte-level word split treats differently
ALPHABET = list("abcXYZéüßΩжλ中文한") + list("0123456789") + list(".,;:!?-'\"()[]_/") + \
    [" ", " ", " ", "  ", "\t", "\n", "\n\n", " \n", "😀", "<|im_end|>", "'s", "n't", "\u00a0", "\u3000"]


@pytest.fixture(scope="module")
def renderer():
    return Engine(EngineConfig(model="tiny-llama-random", token_budget=256)).renderer


def _text(rng, n: int) -> str:
    return "".join(rng.choice(ALPHABET, n))


def test_the_pieces_of_a_text_give_its_ids(renderer):
    """Random texts cut at every possible place (pieces of one character and up) against whole texts."""
    r = renderer
    r.encode_docs(["x"])  # the tokenizer of documents, built on first use
    assert r.piece_chars == PIECE_CHARS  # SmolLM2's tokenizer: byte-level BPE, regex word split
    rng = np.random.default_rng(0)
    texts = [_text(rng, int(rng.integers(1, 400))) for _ in range(300)]
    texts += ["word " * 50, " leading and trailing spaces ", "tab\tand  double  spaces " * 20]
    saved = r.piece_chars
    try:
        r.piece_chars = 0
        whole = r.encode_docs(texts)
        for size in (1, 2, 7, 64):
            r.piece_chars = size
            assert r.encode_docs(texts) == whole, size
    finally:
        r.piece_chars = saved
    cut = [pieces_of(t, 7) for t in texts]
    assert sum(len(c) for c in cut) > 3 * len(texts)  # the texts were cut
    assert all("".join(c) == t for c, t in zip(cut, texts))


def test_pieces_start_at_a_space_between_word_characters():
    assert pieces_of("ab cd ef", 1) == ["ab", " cd", " ef"]
    assert pieces_of("ab, cd  ef", 1) == ["ab, cd  ef"]  # no space between two word characters
    assert pieces_of("a" * 10, 3) == ["a" * 10]
    assert pieces_of("one two three four", 0) == ["one two three four"]
    assert pieces_of("one two three four", 8) == ["one two three", " four"]


def test_other_tokenizers_take_whole_documents(renderer):
    """A pre-tokenizer or normalizer whose split could differ at a piece's edge: no pieces."""
    r = renderer
    r.encode_docs(["x"])
    spec = json.loads(r._docs_tok.to_str())
    assert r._pieces_exact(json.dumps(spec))
    meta = dict(spec, pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                     "split": True})
    assert not r._pieces_exact(json.dumps(meta))
    lower = dict(spec, normalizer={"type": "Lowercase"})
    assert not r._pieces_exact(json.dumps(lower))
    plain = dict(spec, pre_tokenizer=dict(spec["pre_tokenizer"], use_regex=False))
    assert not r._pieces_exact(json.dumps(plain))
    phrase = dict(spec, added_tokens=spec["added_tokens"] + [
        {"id": 49152, "content": "adverse reaction", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False}])
    assert not r._pieces_exact(json.dumps(phrase))  # an added token a cut could split
