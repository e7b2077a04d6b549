"""Prompt layout: documents first, so their KV is reusable.

filter:   <chat pre> DOCUMENT:\\n{doc} | \\n\\n{question}\\nAnswer Yes or No. <chat post>
join:     <chat pre> DOCUMENT:\\n{anchor} | \\n\\n{question}\\nAnswer Yes or No.\\n\\nDOCUMENT 2:\\n
          | {partner} <chat post>          (only partner + chat post are fresh per pair)
classify: <chat pre> DOCUMENT:\\n{doc} | \\n\\n{instruction}\\nOptions:\\nA. ...\\nAnswer with the letter. <chat post>
generate: <chat pre> DOCUMENT:\\n{doc} | \\n\\n{prompt} <chat post>   (the answer is decoded after it; with a
          partner, the join layout: ... DOCUMENT:\\n{doc} | \\n\\n{prompt}\\n\\nDOCUMENT 2:\\n | {partner} <chat post>)
extract:  <chat pre> DOCUMENT:\\n{doc} | \\n\\n{instruction}\\nGive the field "{name}" ({type}) ... <chat post>

Each segment is tokenized on its own and the ids are concatenated, so a
document's ids are the same under every question (static segments and each
distinct question are tokenized once). `render_*` return exactly these ids.

Only the model's chat frame (<chat pre>, <chat post>) is parsed for special
tokens. Everything else is text, tokenized with special-token parsing off:
documents, templates (a literal or read from a column), instructions, labels.
`<|im_end|>` in any of them is ordinary characters, so no value can forge a
turn of the chat frame; for text without such markers the ids are the same
either way.
"""
from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass

SENTINEL = "\x00QUAIL\x00"
TRUE_WORDS = ("Yes", " Yes", "yes", " yes", "YES", "True", " True", "true", "TRUE")
FALSE_WORDS = ("No", " No", "no", " no", "NO", "False", " False", "false", "FALSE")
LETTERS = string.ascii_uppercase
CUE = "\nAnswer Yes or No."
# tokens that end a turn in the chat templates of the supported families (beside the tokenizer's eos)
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>", "</s>")
# the words common to every field first, so that the fields forking from one document share their KV too
EXTRACT_CUE = 'Give as JSON the value of the field below, or null if the document does not say.\nField: "{name}" ({type})'
SEGMENT_CACHE = 4096  # distinct segments kept tokenized
ENCODE_BATCH = 128  # documents per call of the Rust tokenizer (encode_docs)
# A longer document is tokenized as pieces of at least this many characters, all in one batched call (the
# Rust tokenizer runs one thread per input: a 5,000-word join anchor took ~30 ms on one core of an H200 host
# however many were idle, and the first pass waits for it). Only where the tokenizer is byte-level BPE with
# its regex word split and no normalizer but NFC: every piece after the first starts with a space between
# two word characters, where that split starts a new word anyway (no match of its regex runs across a
# space after a word character, and what it matches from a position depends only on the text after it),
# so the pieces' ids are the document's own. A probe text checks it once per tokenizer.
PIECE_CHARS = 4096
_PIECE_CUT = re.compile(r"(?<=\w) (?=\w)")
_PIECE_PROBE = ("It's 9:30 -- the   quick\tbrown fox's 12,345 jumps!! Über naïve café ... "
                "emoji 😀 ok\n\n  new paragraph   with  spaces, 'quotes' and \"double\" <|im_end|> x_y 3.14 end ")


def pieces_of(text: str, size: int) -> list[str]:
    """`text` cut before spaces between two word characters into pieces of at least `size` characters
    (the last may be shorter); [text] when size is 0 or the text is no longer."""
    if not size or len(text) <= size:
        return [text]
    out, lo = [], 0
    while len(text) - lo > size:
        m = _PIECE_CUT.search(text, lo + size)
        if m is None:
            break
        out.append(text[lo:m.start()])
        lo = m.start()
    out.append(text[lo:])
    return out


class PromptTooLong(ValueError):
    """A prompt over the limit. ``frame``: the tokens besides the documents when truncation is on and they
    alone exceed the limit (cutting documents cannot help)."""

    def __init__(self, row: int, n_tokens: int, limit: int, what: str = "prompt", frame: int | None = None):
        self.row, self.n_tokens, self.limit, self.frame = row, n_tokens, limit, frame
        super().__init__(f"row {row}: {what} has {n_tokens} tokens, the model's context holds {limit}; "
                         + self.advice("use EngineConfig(on_overflow='truncate')"))

    def advice(self, truncate: str) -> str:
        if self.frame is not None:
            return (f"the template and chat frame alone take {self.frame} tokens, so truncating the documents "
                    "cannot fit it: shorten the template or raise max_prompt_tokens")
        return f"shorten the document or {truncate}"


def is_null(value) -> bool:
    """The one NULL rule: None, '' and whitespace-only text are NULL."""
    return value is None or (isinstance(value, str) and (not value or value.isspace()))  # (strip() would copy)


def documents(texts, what: str = "docs") -> list[str | None]:
    """Documents checked: each `str` or None, encodable as UTF-8; NULL (None, empty or
    whitespace only) becomes None, which every operation answers with NaN (not evaluated)."""
    if isinstance(texts, str):
        raise TypeError(f"{what} must be a list of documents, got one string")
    out: list[str | None] = []
    checked: set[str] = set()  # a text repeated on many rows (a join's anchor) is checked once
    for i, t in enumerate(texts):
        if t is None:
            out.append(None)
            continue
        if t.__class__ is str and t in checked:
            out.append(t)
            continue
        if not isinstance(t, str):
            raise TypeError(f"{what}[{i}] (row {i}) must be a str or None, got {type(t).__name__}: {t!r:.60}")
        if not t.isascii():  # (no copy of an ASCII text: a join's anchor repeats on every pair)
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"{what}[{i}] (row {i}) is not valid Unicode text: {e.reason} at character "
                                 f"{e.start} ({t[max(0, e.start - 20):e.start + 1]!r})") from None
        out.append(None if is_null(t) else t)
        if out[-1] is not None:
            checked.add(t)
    return out


@dataclass(frozen=True)
class Answers:
    true_ids: list[int]
    false_ids: list[int]
    letter_ids: list[list[int]]  # per letter A..Z, its token ids
    head_ids: list[int]  # rows of the restricted LM head, in column order

    def columns(self, ids: list[int]) -> list[int]:
        pos = {t: i for i, t in enumerate(self.head_ids)}
        return [pos[t] for t in ids]


class PromptRenderer:
    """The layouts above as token ids; the chat frame alone is parsed for special tokens."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self._cache: dict[str, list[int]] = {}
        self._docs_tok = None  # the tokenizer of text (special-token parsing off), built on first use
        self.piece_chars = 0  # pieces of a long document (PIECE_CHARS) where the tokenizer allows, 0: whole
        pre, post = self._chat_frame()
        # the frame comes from the model's chat template: its control tokens are meant
        self.pre = self.tok.encode(pre, add_special_tokens=False)
        self.post = self.tok.encode(post, add_special_tokens=False)
        self.answers = self._answers()

    def _chat_frame(self) -> tuple[str, str]:
        if getattr(self.tok, "chat_template", None):
            text = self.tok.apply_chat_template([{"role": "user", "content": SENTINEL}],
                                                tokenize=False, add_generation_prompt=True)
            a, b = text.split(SENTINEL)
            return a, b
        return "User: ", "\nAssistant:"

    def encode(self, text: str) -> list[int]:
        """Ids of a segment around the documents: layout words and a question, instruction or
        labels (cached). Text, as a document is: special-token parsing off."""
        ids = self._cache.get(text)
        if ids is None:
            if len(self._cache) >= SEGMENT_CACHE:  # templates read from a column may all differ
                self._cache.clear()
            ids = self._cache[text] = self.encode_docs([text])[0] if text else []
        return ids

    def encode_batch(self, texts: list[str | None]) -> list[list[int] | None]:
        """Ids of documents (special-token parsing off), one batched call; None stays None."""
        idx = [i for i, t in enumerate(texts) if t is not None and t != ""]
        out: list[list[int] | None] = [None if t is None else [] for t in texts]
        if idx:
            for i, ids in zip(idx, self.encode_docs([texts[i] for i in idx])):
                out[i] = ids
        return out

    def encode_docs(self, texts: list[str]) -> list[list[int]]:
        """Ids of texts (documents, and through `encode` the other segments). Special tokens
        are not parsed: `<|im_start|>` is ordinary text, so no text can forge turns of the chat frame.
        The Rust tokenizer's batch call releases the GIL (it overlaps the engine's work)."""
        if self._docs_tok is None:
            backend = getattr(self.tok, "backend_tokenizer", None)
            if backend is not None and hasattr(backend, "encode_special_tokens"):
                from tokenizers import Tokenizer

                spec = backend.to_str()
                self._docs_tok = Tokenizer.from_str(spec)
                self._docs_tok.encode_special_tokens = True
                self._docs_tok.no_padding()
                self._docs_tok.no_truncation()
                self.piece_chars = PIECE_CHARS if self._pieces_exact(spec) else 0
            else:
                self._docs_tok = False
        if self._docs_tok is False:
            return [list(x) for x in self.tok(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]]
        # in batches: the Rust call hands its results to Python in one step that holds the GIL (~20 us a
        # document), so a thread launching the device's work meanwhile waits at most one batch's worth
        n = ENCODE_BATCH
        pieces, owner = [], []
        for k, t in enumerate(texts):
            for p in pieces_of(t, self.piece_chars):
                pieces.append(p)
                owner.append(k)
        out: list[list[int]] = [[] for _ in texts]
        for i in range(0, len(pieces), n):
            for k, e in zip(owner[i:i + n], self._docs_tok.encode_batch(pieces[i:i + n], add_special_tokens=False)):
                out[k].extend(e.ids)
        return out

    def _pieces_exact(self, spec: str) -> bool:
        """Whether this tokenizer gives a document's ids from its pieces (PIECE_CHARS): a byte-level
        regex word split and no normalizer but NFC, no added token with a space inside (matched before the
        split, one could straddle a cut), confirmed on a probe text cut at every place."""
        cfg = json.loads(spec)
        norm, pre = cfg.get("normalizer"), cfg.get("pre_tokenizer") or {}
        if (norm is not None and norm.get("type") != "NFC") or pre.get("type") != "ByteLevel" or not pre.get("use_regex"):
            return False
        if any(" " in t.get("content", "") for t in cfg.get("added_tokens") or []):
            return False
        whole = self._docs_tok.encode(_PIECE_PROBE, add_special_tokens=False).ids
        parts = self._docs_tok.encode_batch(pieces_of(_PIECE_PROBE, 1), add_special_tokens=False)
        return [i for e in parts for i in e.ids] == whole

    def _single(self, words) -> list[int]:
        out = []
        for w in words:
            ids = self.tok.encode(w, add_special_tokens=False)
            if len(ids) == 1 and ids[0] not in out:
                out.append(ids[0])
        return out

    def _answers(self) -> Answers:
        t, f = self._single(TRUE_WORDS), self._single(FALSE_WORDS)
        if not t or not f or set(t) & set(f):
            raise ValueError(f"tokenizer has no clean single-token Yes/No answers (true {t}, false {f})")
        letters = [self._single((c, " " + c)) for c in LETTERS]
        head: list[int] = []
        for ids in [t, f, *letters]:
            head.extend(i for i in ids if i not in head)
        return Answers(t, f, letters, head)

    # segments --------------------------------------------------------------
    def filter_parts(self, question: str):
        head = self.pre + self.encode("DOCUMENT:\n")
        tail = self.encode("\n\n" + question + CUE) + self.post
        return head, tail

    def join_parts(self, question: str):
        head = self.pre + self.encode("DOCUMENT:\n")  # as a filter's: an anchor's KV serves both
        mid = self.encode("\n\n" + question + CUE + "\n\nDOCUMENT 2:\n")
        return head, mid, self.post

    def classify_parts(self, instruction: str, labels: list[str]):
        if not 2 <= len(labels) <= len(LETTERS):
            raise ValueError(f"classify needs 2 to {len(LETTERS)} labels, got {len(labels)}")
        opts = "".join(f"\n{LETTERS[i]}. {lab}" for i, lab in enumerate(labels))
        head = self.pre + self.encode("DOCUMENT:\n")
        tail = self.encode(f"\n\n{instruction}\nOptions:{opts}\nAnswer with the letter of one option.") + self.post
        return head, tail

    def generate_parts(self, prompt: str):
        """(head, tail) of a generate prompt over one document (the filter layout, no answer cue)."""
        return self.pre + self.encode("DOCUMENT:\n"), self.encode("\n\n" + prompt) + self.post

    def generate_join_parts(self, prompt: str):
        """(head, mid, post) of a generate prompt over (document, partner): the join layout."""
        return self.pre + self.encode("DOCUMENT:\n"), self.encode("\n\n" + prompt + "\n\nDOCUMENT 2:\n"), self.post

    def extract_parts(self, name: str, type_words: str, instruction: str | None = None):
        """(head, tail) of one extracted field's prompt; the answer is the field's JSON value."""
        lead = "\n\n" + (instruction + "\n" if instruction else "")
        return self.pre + self.encode("DOCUMENT:\n"), self.encode(
            lead + EXTRACT_CUE.format(name=name, type=type_words)) + self.post

    def stop_ids(self) -> list[int]:
        """Ids that end an answer: the tokenizer's eos and the chat frame's end-of-turn tokens."""
        out = [] if self.tok.eos_token_id is None else [self.tok.eos_token_id]
        vocab = self.tok.get_vocab()
        for t in END_OF_TURN:
            if t in vocab and vocab[t] not in out:
                out.append(vocab[t])
        return out
