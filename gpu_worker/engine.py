"""The prefill-only engine: requests in, answer-token margins out.

Each call runs as forward passes (passes.py): the scheduler picks the jobs of a pass, the runner
computes them, the scheduler marks what became resident. Everything shared
(system prompt, a document under several predicates, a join anchor, rows
extending earlier rows) lives once in the prefix tree.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time

import numpy as np
import torch

from . import rates, weights
from .chunks import DocumentChunks, leave_a_core
from .config import EngineConfig
from .counters import Counters
from .decode import Decoder
from .decode_requests import cut_at, extract_seqs, extraction, generate_seqs, stop_strings
from .fitting import RequestFitter
from .grammar import Extraction, Grammars, check_fields
from .passes import FIRST_PASS_JOBS, Passes, collector_paused
from .prompts import PromptRenderer, documents
from .runner import KVCache, ModelRunner
from .runtime import Runtime


def _serialized(method):
    """Calls on one Engine from several threads run one at a time (the engine's lock), on its device."""
    @functools.wraps(method)
    def locked(self, *a, **kw):
        with self._lock, self.on_device(), collector_paused():  # no collection pauses between chunks
            try:
                return method(self, *a, **kw)
            finally:
                self.passes.drain()  # nothing an operation launched outlives it (an error between chunks too)
    return locked


class Engine:
    """Prefill-only scoring engine (docs/architecture.md, "Where each part lives"): it owns a
    `ModelRunner` (the device), `Passes` (the prefix tree and the passes of a call), a `RequestFitter`
    and `DocumentChunks`, each holding what its constructor takes.

    Thread safety: the operations (filter, score, chain, join, join_ids,
    pairs, classify, generate, extract, count_tokens) hold the engine's lock, so calls from
    several threads on one Engine are serialized and each returns what it
    would alone. Documents are `str` or None; None, empty or whitespace-only
    documents are NULL and get NaN (-1 for classify); documents, questions,
    instructions and labels are text, tokenized with special-token parsing
    off (only the chat frame has control tokens).

    Decoding (gpu_worker/decode.py: greedy, continuous batching, preemption when the pool is full):

    generate(docs, prompt, *, partners=None, max_tokens=128, stop=(), ignore_eos=False) -> list[str | None]
        One greedy answer per row: `prompt` (a string, or one per row) over docs[i], the document first,
        or over (docs[i], partners[i]) in the join layout. Ends at the model's end-of-text or end-of-turn
        token (unless ignore_eos), before the first `stop` string, or after max_tokens tokens (an end
        token counted). None for a NULL row. The same answer for every batch, order, pool and cache.
    generate_ids(...) -> list[list[int] | None]
        The same answers as token ids (the end token left out).
    extract(docs, fields, instruction=None, *, max_tokens=32) -> list[Extraction | None]
        fields: name -> Spark type in its JSON form ("string", "integer", ..., {"type": "array", ...},
        {"type": "struct", ...}); a type the grammar cannot express raises ValueError naming the field
        before any work. Each field is decoded from the row's one computed document under llguidance's
        grammar of its JSON value (or null), so every finished answer parses; a field cut by max_tokens
        is None and named in `Extraction.cut`.
    Counters (`stats`, a `counters.Counters`): output_tokens, decode_steps, preemptions beside the prefill
    ones; a decode call's prompts count in requested / fresh / reused tokens like any request. decode_context_tokens:
    the cached KV the steps read (a document shared by a row's sequences counted once per step with
    `shared_decode`, else once per sequence); decode_wall_s, decode_admit_s (the host's time in admissions:
    launching their prefill, waiting for their first tokens), decode_capture_s (CUDA graphs captured, once per
    batch bucket of the engine) and, on a GPU, decode_device_s (each step's span on the device, from the queueing
    of its first kernel, after the host has packed the step, to its last kernel's end) and decode_admit_device_s
    (each admission's span there: its prefill and first tokens); decode_ahead_steps (steps queued behind the step
    before, ahead of the host reading its tokens) and decode_dropped_rows (rows of those computed after
    their sequence's end).

    Token level (benchmarks and exactness tests, below the text calls): `margins(reqs)` and
    `answer_logits(reqs)` of (prefix ids, suffix ids) requests, `answer_margins(logits)`, `clear_cache()`,
    `doc_ids(text)`, `encode(docs)`, `chain_blocks(...)`.

    Examples
    --------
    >>> from gpu_worker import Engine, EngineConfig
    >>> eng = Engine(EngineConfig(model="tiny-llama-random"))
    >>> eng.filter(["a red apple"], ["Is the document about fruit?"]).shape
    (1, 1)
    >>> len(eng.generate_ids(["a red apple"], "Name the fruit.", max_tokens=4)[0]) <= 4
    True
    >>> sorted(eng.extract(["Bob is 42"], {"name": "string", "age": "integer"}, max_tokens=8)[0].values)
    ['age', 'name']
    """

    def __init__(self, config: EngineConfig | None = None, **kw):
        self._lock = threading.RLock()
        leave_a_core()  # before the tokenizer starts its threads
        cfg = config or EngineConfig(**kw)
        if config is not None and kw:
            cfg = cfg.replace(**kw)
        self.config = cfg
        t0 = time.time()
        src = weights.resolve(cfg.model, cfg.cache_dir, cfg.seed, cfg.tokenizer)
        self.model_config = src.config
        self.tokenizer = weights.load_tokenizer(src)
        self.renderer = PromptRenderer(self.tokenizer)
        self.rt = Runtime.create(cfg, src.config)  # the device: every allocation and launch goes there
        self.stats = Counters()  # the parts below add to it in place
        with self.on_device():
            model = weights.load_model(src, self.rt.device, self.rt.dtype)
            model.prepare(self.renderer.answers.head_ids, self.rt.max_position, self.rt.device)
            if cfg.quantize == "fp8":
                model.quantize_fp8(keep=False)
            else:
                model.pack(self.rt.ops)
            self.model = model
            self.rt.size_pool(src.config, sum(t.numel() * t.element_size() for t in model.state_dict().values()))
            kv = KVCache(src.config.num_layers, self.rt.kv_slots, src.config.num_kv_heads,
                         src.config.head_dim, self.rt.dtype, self.rt.device)
        # the parts: the runner computes passes, `passes` plans them over the prefix tree (the scheduler
        # side), `fitter` builds requests that fit the context, `chunks` tokenizes documents a chunk ahead
        self.runner = ModelRunner(model, kv, self.rt.ops, self.rt.device)
        self.passes = Passes(self.runner, self.rt.kv_slots, self.rt.token_budget, self.rt.ctx_budget,
                             len(self.renderer.answers.head_ids), cfg.prefix_cache, self.stats,
                             first_jobs=FIRST_PASS_JOBS if self.rt.device.type == "cuda" else 0)
        self.fitter = RequestFitter(self.renderer, self.rt.max_position, cfg.on_overflow == "truncate", self.stats)
        # the renderer's function, not a method of the engine: no reference cycle, so an engine dropped
        # frees its KV pool at once rather than at the next full garbage collection
        self.chunks = DocumentChunks(self.renderer.encode_batch, self.rt.token_budget)
        self.grammars = Grammars(self.tokenizer, src.config.vocab_size)  # llguidance loaded on first extract
        # the tokenizer's decoding as a function, not a bound method: no reference cycle (see `chunks` above)
        self.decoder = Decoder(self.passes, src.config.vocab_size, self.renderer.stop_ids(),
                               functools.partial(_decode_text, self.tokenizer), self.grammars, self.rt.max_position,
                               shared=cfg.shared_decode, graphs=cfg.cuda_graphs)
        self.reset_stats()
        self.rates = None  # the planner's rates of this (model, device, dtype) (gpu_worker/rates.py)
        if cfg.measure_rate:  # once per (model, device, dtype), then cached (the stats reset below)
            key = rates.weights_key(cfg.model, src.folder)
            self.rates = rates.measure(self, weights.cache_root(cfg.cache_dir), key)
        self.reset_stats()
        self.load_s = time.time() - t0

    def on_device(self):
        """Context in which this engine's device is torch's current one (Triton launches there)."""
        if self.rt.device.type != "cuda":
            return contextlib.nullcontext()
        return torch.cuda.device(self.rt.device)

    @property
    def tree(self):
        return self.passes.tree

    @property
    def pool(self):
        return self.passes.pool

    # public contract ---------------------------------------------------------
    @property
    def answer_token_ids(self) -> tuple[list[int], list[int]]:
        a = self.renderer.answers
        return list(a.true_ids), list(a.false_ids)

    def render_filter(self, doc: str, question: str) -> list[int]:
        head, tail = self.renderer.filter_parts(question)
        return head + self.doc_ids(doc) + tail

    def render_join(self, anchor: str, partner: str, question: str) -> list[int]:
        head, mid, post = self.renderer.join_parts(question)
        return head + self.doc_ids(anchor) + mid + self.doc_ids(partner) + post

    def render_classify(self, doc: str, labels: list[str], instruction: str) -> list[int]:
        head, tail = self.renderer.classify_parts(instruction, list(labels))
        return head + self.doc_ids(doc) + tail

    @_serialized
    def filter(self, docs, questions) -> np.ndarray:
        """Margins [n_docs, n_questions]; NaN for a NULL (None, empty, blank) document."""
        docs, questions = documents(docs), _strings(questions, "questions")
        self.tree.op += 1
        parts = [self.renderer.filter_parts(q) for q in questions]
        out = np.full((len(docs), len(questions)), np.nan)
        extra = sum(len(tail) for _, tail in parts)
        done = []
        for lo, toks in self.chunks(docs, extra):  # the next chunk is tokenized while this one runs
            reqs, where = [], []
            for q_i, (head, tail) in enumerate(parts):
                for d_i, ids in enumerate(toks, lo):
                    if ids is not None:
                        reqs.append(self.fitter.fit(d_i, head, ids, tail))
                        where.append((d_i, q_i))
            done.append((where, self._run(reqs, defer=True)))  # its last passes run on into the next chunk
        self._collect(out, done)
        self._stage("filter", questions, out)
        return out

    def score(self, docs, question: str) -> np.ndarray:
        """P(TRUE) = sigmoid(margin) per document; NaN for NULL."""
        return 1.0 / (1.0 + np.exp(-self.filter(docs, [question])[:, 0]))

    @_serialized
    def chain(self, docs, questions, short_circuit: bool = True) -> np.ndarray:
        """AND of predicates in this order. Margins [n_docs, n_q]; NaN where not evaluated.

        A document's KV stays pinned while its next predicate runs; with
        short_circuit a FALSE (margin <= 0) skips the rest for that document.
        """
        docs, questions = documents(docs), _strings(questions, "questions")
        self.tree.op += 1
        out = np.full((len(docs), len(questions)), np.nan)
        if not questions:
            return out
        parts = [self.renderer.filter_parts(q) for q in questions]
        toks: list = [None] * len(docs)
        done = []  # the last predicate's runs: nothing waits on them, so each runs on into the next block
        for lo, chunk in self.chunks(docs, len(parts[0][1])):  # the next chunk is tokenized meanwhile
            toks[lo:lo + len(chunk)] = chunk
            live = [i for i in range(lo, lo + len(chunk)) if toks[i] is not None]
            for block in self.chain_blocks(live, toks, parts[0][0]):
                pins = [self.passes.pin(parts[0][0] + toks[i]) for i in block]
                try:
                    if not short_circuit:  # every predicate on every document: one call, shared words of
                        self._chain_all(block, toks, parts, out)  # the questions computed once
                        continue
                    alive = block
                    for q_i, (head, tail) in enumerate(parts):
                        reqs = [self.fitter.fit(i, head, toks[i], tail) for i in alive]
                        if q_i == len(parts) - 1:
                            done.append(([(i, q_i) for i in alive], self._run(reqs, defer=True)))
                            break
                        m = self.answer_margins(self._run(reqs))
                        out[alive, q_i] = m
                        alive = [i for i, v in zip(alive, m) if v > 0]
                finally:
                    for node in pins:
                        self.passes.unpin(node)
        self._collect(out, done)
        self._stage("filter", questions, out)  # a predicate's margins are set exactly where it was evaluated
        return out

    def _chain_all(self, block, toks, parts, out):
        reqs = [self.fitter.fit(i, head, toks[i], tail) for head, tail in parts for i in block]
        m = self.answer_margins(self._run(reqs)).reshape(len(parts), len(block))
        for q_i in range(len(parts)):
            out[block, q_i] = m[q_i]

    @_serialized
    def join(self, anchors, partners, question: str) -> np.ndarray:
        """Margins [n_anchors, n_partners]; each anchor's KV computed once; NaN where either is NULL."""
        anchors, partners = documents(anchors, "anchors"), documents(partners, "partners")
        p_toks = self.encode(partners)
        out = np.full((len(anchors), len(partners)), np.nan)
        done = []
        head, mid, post = self.renderer.join_parts(question)
        # an anchor's fresh tokens beyond its ids: its partners' (chunks of whole passes: the first pass starts
        # after one or two anchors are prepared, and each later chunk's preparation is short)
        extra = len(head) + len(mid) + sum(len(p) + len(post) for p in p_toks if p is not None)
        n_partners = sum(p is not None for p in p_toks)
        # one scheduler over the chunks: a chunk's last requests share passes with the next chunk's first
        stream = self.passes.stream(len(anchors) * n_partners) if self.passes.share else None
        try:
            for lo, a_toks in self.chunks(anchors, extra, n_partners):  # anchors tokenized a chunk ahead
                self.tree.op += 1
                reqs, where = self.fitter.join_requests(a_toks, p_toks, question, row0=lo)
                if stream is None:
                    done.append((where, self._run(reqs, defer=True)))  # its last passes run on into the next chunk
                else:
                    done.append((where, stream.add(reqs)))
            if stream is not None:
                logits = stream.close()
                done = [(where, logits[a:b]) for where, (a, b) in done]
        except BaseException:
            if stream is not None:
                stream.abort()  # (a prompt too long in a later chunk: requests added before are not served)
            raise
        self._collect(out, done)
        self._stage("join", [question], out.reshape(-1, 1))
        return out

    @_serialized
    def join_ids(self, a_toks, p_toks, question: str) -> np.ndarray:
        """`join` on token ids (None entries give NaN)."""
        return self._join_ids(a_toks, p_toks, question)

    @_serialized
    def pairs(self, anchors, partners, question: str) -> np.ndarray:
        """Margins [n] of the pairs (anchors[i], partners[i]) in the join layout (`render_join`).

        NaN where either side is NULL. Pairs are evaluated in one call: a
        repeated anchor's prefix is computed once and shared by its partners.
        """
        anchors, partners = documents(anchors, "anchors"), documents(partners, "partners")
        if len(anchors) != len(partners):
            raise ValueError(f"pairs needs as many partners as anchors, got {len(anchors)} and {len(partners)}")
        self.tree.op += 1
        a_ids, a_of = self._tokenize_distinct(anchors)
        p_ids, p_of = self._tokenize_distinct(partners)
        head, mid, post = self.renderer.join_parts(question)
        pre = [head + a + mid for a in a_ids]  # one prefix list per distinct anchor: one tree lookup
        reqs, where = [], []
        for i, (k, j) in enumerate(zip(a_of, p_of)):
            if k >= 0 and j >= 0:
                reqs.append(self.fitter.pair_request(i, pre[k], a_ids[k], head, mid, p_ids[j], post))
                where.append(i)
        out = np.full(len(anchors), np.nan)
        out[where] = self.answer_margins(self._run(reqs))
        self._stage("join", [question], out.reshape(-1, 1))
        return out

    def _join_ids(self, a_toks, p_toks, question: str) -> np.ndarray:
        self.tree.op += 1
        reqs, where = self.fitter.join_requests(a_toks, p_toks, question)
        out = np.full((len(a_toks), len(p_toks)), np.nan)
        self._collect(out, [(where, self._run(reqs))])
        return out

    @_serialized
    def classify(self, docs, labels, instruction: str = "Which option describes the document best?"):
        """(label index per doc, -1 for NULL; probabilities [n_docs, n_labels], NaN rows for NULL)."""
        docs, labels = documents(docs), _strings(labels, "labels")
        self.tree.op += 1
        head, tail = self.renderer.classify_parts(instruction, labels)
        toks = self.encode(docs)
        reqs, rows = [], []
        for i, ids in enumerate(toks):
            if ids is not None:
                reqs.append(self.fitter.fit(i, head, ids, tail))
                rows.append(i)
        probs = np.full((len(docs), len(labels)), np.nan)
        idx = np.full(len(docs), -1, dtype=np.int64)
        if reqs:
            logits = torch.from_numpy(self._run(reqs))
            a = self.renderer.answers
            per = torch.stack([torch.logsumexp(logits[:, a.columns(a.letter_ids[k])], dim=-1)
                               for k in range(len(labels))], dim=-1)
            p = torch.softmax(per, dim=-1).numpy()
            probs[rows] = p
            idx[rows] = p.argmax(-1)
        self.stats.stages.append({"op": "classify", "evaluated": len(rows), "passed": len(rows)})
        return idx, probs

    def render_generate(self, doc: str, prompt: str, partner: str | None = None) -> list[int]:
        if partner is None:
            head, tail = self.renderer.generate_parts(prompt)
            return head + self.doc_ids(doc) + tail
        head, mid, post = self.renderer.generate_join_parts(prompt)
        return head + self.doc_ids(doc) + mid + self.doc_ids(partner) + post

    def generate(self, docs, prompt, *, partners=None, max_tokens: int = 128, stop=(),
                 ignore_eos: bool = False) -> list[str | None]:
        """One greedy answer per row (see the class docstring); None for a NULL row."""
        stop = stop_strings(stop)
        seqs = self.generate_ids(docs, prompt, partners=partners, max_tokens=max_tokens, stop=stop,
                                 ignore_eos=ignore_eos)
        return [None if ids is None else cut_at(self._text(ids), stop) for ids in seqs]

    @_serialized
    def generate_ids(self, docs, prompt, *, partners=None, max_tokens: int = 128, stop=(),
                     ignore_eos: bool = False) -> list[list[int] | None]:
        """`generate`'s answers as token ids (the end token left out; with `stop`, up to the token that
        completed a stop string)."""
        docs = documents(docs)
        prompts = [prompt] * len(docs) if isinstance(prompt, str) else _strings(prompt, "prompt")
        if len(prompts) != len(docs) or (partners is not None and len(partners) != len(docs)):
            raise ValueError(f"generate needs one prompt and partner per document ({len(docs)} documents)")
        _check_max_tokens(max_tokens)
        self.tree.op += 1
        p_toks = None if partners is None else self.encode(documents(partners, "partners"))
        seqs = generate_seqs(self.renderer, self.fitter, self.encode(docs), p_toks, prompts, max_tokens,
                             stop_strings(stop), ignore_eos)
        self.decoder.run([s for s in seqs if s is not None])
        return [None if s is None else s.out for s in seqs]

    @_serialized
    def extract(self, docs, fields, instruction: str | None = None, *, max_tokens: int = 32) -> list[Extraction | None]:
        """Per row an `Extraction` of `fields` (name -> Spark JSON type); None for a NULL row."""
        fields = check_fields(fields)
        docs = documents(docs)
        _check_max_tokens(max_tokens)
        self.tree.op += 1
        rows = extract_seqs(self.renderer, self.fitter, self.grammars, self.encode(docs), fields, instruction,
                            max_tokens)
        self.decoder.run([s for r in rows if r is not None for s in r.values()])
        return [None if r is None else extraction(self.grammars, i, fields, r) for i, r in enumerate(rows)]

    @_serialized
    def count_tokens(self, texts) -> list[int]:
        return [0 if t is None else len(t) for t in self.encode(documents(texts, "texts"))]

    def reset_stats(self):
        self.stats.reset()
        self.passes.tree_seen = dict(self.tree.stats)

    # token level: prompts given as ids, below the text calls (benchmarks, exactness tests) -----------
    @_serialized
    def margins(self, reqs) -> np.ndarray:
        """Margins of (prefix ids, suffix ids) requests, each prompt being prefix + suffix, in their order.
        A prefix cached by an earlier call is read, not computed (`clear_cache` to start empty); requests
        sharing a prefix share its KV."""
        return self.answer_margins(self._run(reqs))

    @_serialized
    def answer_logits(self, reqs) -> np.ndarray:
        """The answer tokens' logits [len(reqs), n] of such requests (`margins` before the margin)."""
        return self._run(reqs)

    def answer_margins(self, logits: np.ndarray) -> np.ndarray:
        """The margin of each row of `answer_logits`: logsumexp over the true ids minus over the false ids."""
        if len(logits) == 0:
            return np.zeros(0)
        a = self.renderer.answers
        lg = torch.from_numpy(logits)
        m = torch.logsumexp(lg[:, a.columns(a.true_ids)], -1) - torch.logsumexp(lg[:, a.columns(a.false_ids)], -1)
        return m.double().numpy()

    def clear_cache(self):
        """Drops every cached prefix: the next call computes all it reads."""
        self.passes.new_tree()

    def doc_ids(self, text: str) -> list[int]:
        """Ids of one document as the prompts render it (no NULL rule: an empty text renders as nothing)."""
        documents([text], "document")
        return self.renderer.encode_docs([text])[0] if text else []

    def encode(self, docs: list[str | None]) -> list[list[int] | None]:
        """Ids of checked documents (see `prompts.documents`); None stays None."""
        return self.renderer.encode_batch(docs)

    # internals ---------------------------------------------------------------
    def _run(self, reqs, defer: bool = False) -> np.ndarray:
        """Answer-row logits of (prefix, suffix) requests (`Passes.run`)."""
        return self.passes.run(reqs, defer)

    def _text(self, ids: list[int]) -> str:
        return _decode_text(self.tokenizer, ids)

    def _tokenize_distinct(self, docs: list[str | None]) -> tuple[list[list[int]], list[int]]:
        """(ids of each distinct document, its index per row, -1 for None): a document repeated on
        many rows (a join's anchor or partner in Arrow pairs) is tokenized once."""
        index: dict[str, int] = {}
        of = [-1 if d is None else index.setdefault(d, len(index)) for d in docs]
        return self.encode(list(index)), of

    def chain_blocks(self, live, toks, head):
        """Documents per chain block: as many as half the pool can keep pinned."""
        if not live:
            return
        avg = max(1, len(head) + sum(len(toks[i]) for i in live) // len(live))
        per = max(1, (self.rt.kv_slots // 2) // (avg + 32))
        for s in range(0, len(live), per):
            yield live[s:s + per]

    def _collect(self, out: np.ndarray, done):
        """Read the passes still running, then write each request's margin at its index of `out`.

        done: (indices into out, logits array `_run` returned) per `_run` call."""
        self.stats.wall_s += self.passes.drain()  # the last chunk's last passes
        for where, logits in done:
            if len(where):  # (row, column) per request: one fancy-indexed write, not one per pair
                rows, cols = np.asarray(where, dtype=np.int64).reshape(-1, 2).T
                out[rows, cols] = self.answer_margins(logits)


    def _stage(self, op, questions, out):
        for q_i, q in enumerate(questions):
            col = out[:, q_i]
            ok = ~np.isnan(col)
            self.stats.stages.append({"op": op, "question": q, "evaluated": int(ok.sum()),
                                         "passed": int((col[ok] > 0).sum())})

def _decode_text(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=True)


def _strings(xs, what: str) -> list[str]:
    if isinstance(xs, str):
        return [xs]
    xs = list(xs)
    for i, x in enumerate(xs):
        if not isinstance(x, str):
            raise TypeError(f"{what}[{i}] must be a string, got {type(x).__name__}")
    return xs


def _check_max_tokens(n) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"max_tokens must be an integer >= 1, got {n!r}")
