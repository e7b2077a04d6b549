"""One rendering of an AI-SQL call and one NULL rule, for every path.

The SQL functions (plain ``spark.sql``, DataFrames, the optimized plans of the
Spark extension, QuailSession) and the enrichment job all evaluate
``ai_if`` / ``ai_score`` / ``ai_classify`` and the decode calls ``ai_generate`` /
``ai_extract`` / ``ai_summarize`` through :func:`evaluate`, so the same call on
the same row gives the same prompt, the same margin and the same answer on
every path. Never imports pyspark.

Decode calls: ``ai_generate`` renders its template as ai_if does and answers with
``Engine.generate`` (greedy text, at most ``max_tokens``, cut before a ``stop``
string); ``ai_summarize`` is ``ai_generate`` over one column with the fixed
instruction :data:`SUMMARIZE` ("at most ``max_words`` words"); ``ai_extract``
answers with ``Engine.extract`` (one JSON value per field of ``schema``, Spark's
JSON of a struct type), its result an ``Extraction`` (``values``, ``cut``,
``to_json()``).

Rendering of ``template`` over column values (``{i}`` is the i-th column):

- one column: the filter layout; ``{0}`` reads "the document";
- two or more: the join layout; the first placed column is the DOCUMENT whose
  KV is shared (a join's anchor), the others form DOCUMENT 2 (DOCUMENT 3 ...
  follow it inside the partner segment); each placeholder reads the name of its
  column's place ("DOCUMENT", "DOCUMENT 2", ...).

Placement of a two-column call (:meth:`Call.order`): the column the ``anchor``
hint names (``Call.anchor``, an argument position) first; else the longer of
the row's two values (characters; a tie keeps template order). So
``ai_if('Is {0} mentioned in {1}?', term, body)`` and ``ai_if('Does {1}
mention {0}?', body, term)`` put the body first, and the prompt of a pair
depends only on the call and the row, never on a plan. Three or more columns
keep template order.

NULL rule: a row whose referenced column is NULL, empty or whitespace-only in
any column gives NULL (a filter drops the row, a join drops the pair) and is
never sent to the model.
"""
from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass

import numpy as np

from .prompts import PromptTooLong, is_null  # is_null: the one NULL rule, also the engine's document check

PLACEHOLDER = re.compile(r"\{(\d+)\}")
KINDS = ("if", "score", "classify", "generate", "extract", "summarize")
DECODE_KINDS = ("generate", "extract", "summarize")
# Spark SQL type of each kind; an extract call's is the struct of its schema (Call.result_type)
RESULT_TYPES = {"if": "boolean", "score": "double", "classify": "string", "generate": "string",
                "extract": "struct", "summarize": "string"}
# The AI functions of SQL, the one table every path reads (the Spark extension reads it from the jar's
# contract: quail_spark/extension.py, Contract.java): public name -> kind (ai_filter is an alias of
# ai_if), and the internal functions the optimizer rules make.
FUNCTIONS = {"ai_if": "if", "ai_filter": "if", "ai_score": "score", "ai_classify": "classify",
             "ai_generate": "generate", "ai_extract": "extract", "ai_summarize": "summarize"}
INTERNAL = ("quail_chain", "quail_join", "quail_eval", "quail_match", "quail_match_score", "quail_join_score")
# The UDF that install() registers for ai_extract: the JSON text of each row's object, which the Spark
# extension's ai_extract function reads with Spark's from_json into the struct of the schema.
EXTRACT_UDF = "quail_extract"
DEFAULT_INSTRUCTION = "Which option describes the document best?"
RESPOND = "Respond to the document."  # the question of ai_generate('{0}', col): the column is the request
SUMMARIZE = "Summarize the document in at most {n} words."
DEFAULT_MAX_TOKENS = {"generate": 128, "extract": 32}  # extract: per field
DEFAULT_MAX_WORDS = 50
DECODE_HINTS = {"generate": ("max_tokens", "stop"), "extract": ("max_tokens",), "summarize": ()}


def placeholders(template: str) -> tuple[int, ...]:
    """Placeholder indices in order of appearance.

    >>> placeholders('Does {0} mention {1}?')
    (0, 1)
    """
    return tuple(int(m.group(1)) for m in PLACEHOLDER.finditer(template))


def doc_name(i: int, n_cols: int) -> str:
    if n_cols == 1:
        return "the document"
    return "DOCUMENT" if i == 0 else f"DOCUMENT {i + 1}"


@dataclass(frozen=True)
class Call:
    """One AI call, the model of every path (SQL functions, dialect front end, enrichment spec,
    ArrowMapper): kind, template text, number of column arguments, labels of ai_classify, the
    anchor's argument position; for a call read from SQL (:meth:`of`), its column arguments as
    Spark SQL text and its hints.

    >>> c = Call.of("ai_filter", "Is {0} about {1}?", ("r.text", "t.term"), hints=(("selectivity", 0.2),))
    >>> c.fn, c.kind, c.n_cols, c.hint("selectivity"), c.result_type
    ('ai_if', 'if', 2, 0.2, 'boolean')
    """

    kind: str
    template: str
    n_cols: int
    labels: tuple = ()
    anchor: int | None = None  # argument position placed first (the `anchor` hint), two columns only
    args: tuple = ()   # the column arguments as Spark SQL text, when read from SQL
    hints: tuple = ()  # ((key, value), ...) as written: selectivity, anchor (a table alias), max_tokens, stop
    schema: str = ""   # ai_extract: Spark's JSON of the struct type (StructType.jsonValue()), as text
    instruction: str | None = None  # ai_extract: the optional instruction
    max_tokens: int | None = None   # decode calls: output tokens (ai_extract: per field); None: the default
    stop: tuple = ()                # ai_generate: stop strings (the text is cut before the first)
    max_words: int | None = None    # ai_summarize: words of the summary; None: DEFAULT_MAX_WORDS

    @classmethod
    def of(cls, fn: str, template: str, args, labels=(), hints=(), anchor: int | None = None,
           schema: str = "", instruction: str | None = None, max_words: int | None = None) -> "Call":
        """The call ``fn(template, *args ...)`` of SQL; ``fn`` any name of :data:`FUNCTIONS`. A decode
        call's ``max_tokens`` and ``stop`` come from its hints (ai_extract / ai_summarize: template '{0}').

        >>> Call.of("ai_generate", "Reply to {0}", ("body",), hints=(("max_tokens", 16),)).max_tokens
        16
        """
        kind = FUNCTIONS.get(fn.lower())
        if kind is None:
            raise ValueError(f"unknown AI function {fn!r}; expected one of {sorted(FUNCTIONS)}")
        hints = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in hints)
        h = dict(hints)
        stop, n = h.get("stop", ()), h.get("max_tokens")
        with contextlib.suppress(TypeError, ValueError):  # a map hint's number may come as 64.0 or '64'
            n = int(float(n)) if n is not None and not isinstance(n, bool) and float(n).is_integer() else n
        return cls(kind, template, len(args), tuple(labels), anchor, tuple(args), hints, schema, instruction,
                   n, (stop,) if isinstance(stop, str) else tuple(stop), max_words)

    @property
    def fn(self) -> str:
        """The SQL function's name: ai_if, ai_score, ai_classify, ai_generate, ai_extract or ai_summarize."""
        return f"ai_{self.kind}"

    @property
    def result_type(self) -> str:
        """Spark SQL type of the result; an extract call's is its schema's struct (``struct<name:string>``)."""
        return type_ddl(json.loads(self.schema)) if self.kind == "extract" else RESULT_TYPES[self.kind]

    @property
    def fields(self) -> dict:
        """ai_extract: field name -> Spark JSON type, in schema order (what ``Engine.extract`` takes)."""
        return {f["name"]: f["type"] for f in json.loads(self.schema)["fields"]} if self.schema else {}

    @property
    def output_tokens(self) -> int:
        """A decode call's output tokens (ai_extract: per field): the hint, else the default; ai_summarize's
        from its words (about two tokens a word and a margin)."""
        if self.kind == "summarize":
            return 2 * (self.max_words or DEFAULT_MAX_WORDS) + 16
        return self.max_tokens or DEFAULT_MAX_TOKENS[self.kind]

    def hint(self, key: str, default=None):
        return dict(self.hints).get(key, default)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown AI call kind {self.kind!r}; expected one of {KINDS}")
        if self.args and len(self.args) != self.n_cols:
            raise ValueError(f"ai_{self.kind}: {len(self.args)} column arguments {list(self.args)} for n_cols={self.n_cols}")
        if self.n_cols < 1:
            raise ValueError(f"ai_{self.kind}: expected at least one column argument after the template")
        used = set(placeholders(self.template))
        bad = sorted(i for i in used if i >= self.n_cols)
        if self.kind != "classify" or self.template.strip() != "{0}":
            if bad or used != set(range(self.n_cols)):
                raise ValueError(
                    f"ai_{self.kind}: template {self.template!r} must use placeholders "
                    f"{{0}}..{{{self.n_cols - 1}}}, one per column argument ({self.n_cols}); "
                    f"found {sorted(used) or 'none'}")
        if self.kind == "classify" and len(self.labels) < 2:
            raise ValueError(f"ai_classify: expected at least 2 labels, got {list(self.labels)}")
        if self.anchor is not None and (self.n_cols != 2 or self.anchor not in (0, 1)):
            raise ValueError(f"ai_{self.kind}: the anchor hint names column argument {self.anchor + 1}; "
                             f"expected 1 or 2 of a call with two column arguments (it has {self.n_cols})")
        if self.kind in DECODE_KINDS:
            self._check_decode()

    def _check_decode(self) -> None:
        fn = self.fn
        if self.kind != "generate" and (self.n_cols != 1 or self.template != "{0}"):
            raise ValueError(f"{fn}: expected one document column (template '{{0}}'), got {self.n_cols} "
                             f"column(s) and template {self.template!r}")
        for key, value in (("max_tokens", self.max_tokens), ("max_words", self.max_words)):
            if value is not None and (isinstance(value, bool) or not float(value).is_integer() or value < 1):
                raise ValueError(f"{fn}: {key} expected a whole number >= 1, got {value!r}")
        if any(not isinstance(x, str) or not x for x in self.stop):
            raise ValueError(f"{fn}: stop expected a string or an array of non-empty strings, got {list(self.stop)}")
        if self.kind != "extract":
            return
        try:
            schema = json.loads(self.schema)
            ok = schema.get("type") == "struct" and len(schema["fields"]) > 0
        except (ValueError, AttributeError, KeyError, TypeError):
            ok = False
        if not ok:
            raise ValueError(f"ai_extract: schema expected Spark's JSON of a struct type with at least one "
                             f"field, got {self.schema[:80]!r}")
        if self.instruction is not None and not isinstance(self.instruction, str):
            raise ValueError(f"ai_extract: instruction expected a string, got {self.instruction!r}")

    def order(self, values) -> tuple:
        """Column positions in prompt order for one row: with two columns the anchor's first,
        else the longer value's (a tie keeps template order).

        >>> Call("if", "Is {0} in {1}?", 2).order(["cat", "The cat sat."])
        (1, 0)
        """
        if self.n_cols != 2:
            return tuple(range(self.n_cols))
        first = self.anchor if self.anchor is not None else int(len(values[1]) > len(values[0]))
        return (first, 1 - first)

    def question_for(self, order) -> str:
        """The template's text with each placeholder replaced by the name of its column's place."""
        if self.kind == "classify" and self.template.strip() == "{0}":
            return DEFAULT_INSTRUCTION
        if self.kind == "summarize":
            return SUMMARIZE.format(n=self.max_words or DEFAULT_MAX_WORDS)
        if self.kind == "extract":
            return self.instruction or ""
        if self.kind == "generate" and self.template.strip() == "{0}":
            return RESPOND
        place = {col: i for i, col in enumerate(order)}
        return PLACEHOLDER.sub(lambda m: doc_name(place[int(m.group(1))], self.n_cols), self.template)

    @property
    def question(self) -> str:
        """The question with the columns in template order (one column: "the document")."""
        return self.question_for(range(self.n_cols))

    def partner_text(self, values) -> str:
        """DOCUMENT 2 (and following) of a multi-column row already in prompt order."""
        out = values[1]
        for i in range(2, self.n_cols):
            out += f"\n\nDOCUMENT {i + 1}:\n{values[i]}"
        return out

    def classify_text(self, values) -> str:
        """The document of a multi-column ai_classify row already in prompt order."""
        return values[0] if self.n_cols == 1 else values[0] + "\n\nDOCUMENT 2:\n" + self.partner_text(values)


def render(eng, call: Call, values) -> list[int]:
    """The exact prompt ids of one row (a row that is NULL by the rule raises)."""
    if any(is_null(v) for v in values):
        raise ValueError("a NULL, empty or whitespace-only value is not rendered: its result is NULL")
    if call.kind in DECODE_KINDS:
        raise ValueError(f"{call.fn}: a decode call's prompts are rendered by Engine.generate / Engine.extract")
    order = call.order(values)
    values, question = [values[i] for i in order], call.question_for(order)
    if call.kind == "classify":
        return eng.render_classify(call.classify_text(values), list(call.labels), question)
    if call.n_cols == 1:
        return eng.render_filter(values[0], question)
    return eng.render_join(values[0], call.partner_text(values), question)


def evaluate(eng, call: Call, columns, errors: list | None = None, where=str) -> list:
    """Results of ``call`` on rows given column-wise (lists of str or None).

    Returns a list: bool (if), float P(yes) (score), label (classify), text
    (generate, summarize) or ``Extraction`` (extract: ``values``, ``cut``,
    ``to_json()``); None for NULL rows. An over-long prompt raises a ``PromptTooLong`` naming
    ``where(row)``; with ``errors`` (a list of len n_rows) the row's result is
    None and ``errors[row]`` says why, and the other rows are still evaluated.
    """
    n = len(columns[0]) if columns else 0
    if len(columns) != call.n_cols or any(len(c) != n for c in columns):
        raise ValueError(f"ai_{call.kind}: expected {call.n_cols} columns of equal length")
    _check_values(call, columns, where)
    rows = [r for r in range(n) if not any(is_null(col[r]) for col in columns)]
    out: list = [None] * n
    while rows:
        try:
            values = _margins_or_labels(eng, call, columns, rows)
        except PromptTooLong as e:
            bad = rows[e.row]
            if errors is None:
                raise _too_long(where(bad), e) from None
            errors[bad] = f"prompt too long: {e.n_tokens} tokens, the model's context holds {e.limit}"
            rows = [r for r in rows if r != bad]
            continue
        for r, v in zip(rows, values):
            out[r] = v
        break
    return out


def evaluate_together(eng, items, wheres=None) -> list:
    """Results of several calls, each as :func:`evaluate` gives it alone (its NULL rule on its
    own columns, an over-long prompt raising with ``wheres[i](row)``).

    ``items`` is a list of (Call, columns). The one-column ai_if / ai_score calls over the same
    document values ask their questions in one ``Engine.filter`` call, so each document is
    computed once; the other calls run after it, their prompts starting with the same document
    (the join and classify layouts begin as the filter's), which the prefix tree still holds.
    """
    wheres = wheres or [str] * len(items)
    out: list = [None] * len(items)
    shared: dict = {}
    for i, (call, columns) in enumerate(items):
        if call.kind in ("if", "score") and call.n_cols == 1:
            shared.setdefault(tuple(columns[0]), []).append(i)
    for idx in (ix for ix in shared.values() if len(ix) > 1):
        docs = items[idx[0]][1][0]
        _check_values(items[idx[0]][0], items[idx[0]][1], wheres[idx[0]])
        rows = [r for r, d in enumerate(docs) if not is_null(d)]
        try:
            m = eng.filter([docs[r] for r in rows], [items[i][0].question for i in idx])
        except PromptTooLong as e:
            raise _too_long(wheres[idx[0]](rows[e.row]), e) from None
        for k, i in enumerate(idx):
            out[i] = [None] * len(docs)
            for r, v in zip(rows, _answers(items[i][0].kind, m[:, k])):
                out[i][r] = v
    for i, (call, columns) in enumerate(items):
        if out[i] is None:
            out[i] = evaluate(eng, call, columns, where=wheres[i])
    return out


def _too_long(place: str, e: PromptTooLong) -> ValueError:
    return ValueError(f"{place}: prompt has {e.n_tokens} tokens, the model's context holds {e.limit}; "
                      + e.advice("set on_overflow='truncate'"))


def _margins_or_labels(eng, call: Call, columns, rows) -> list:
    """Results of ``rows``, evaluated per placement of the columns (one question each)."""
    by_order: dict = {}
    for i, r in enumerate(rows):
        by_order.setdefault(call.order([col[r] for col in columns]), []).append(i)
    out: list = [None] * len(rows)
    for order, idx in by_order.items():
        try:
            got = _placed(eng, call, order, [[columns[c][rows[i]] for i in idx] for c in order])
        except PromptTooLong as e:
            raise PromptTooLong(idx[e.row], e.n_tokens, e.limit, frame=e.frame) from None
        for i, x in zip(idx, got):
            out[i] = x
    return out


def _placed(eng, call: Call, order, vals) -> list:
    """Results of rows whose columns ``vals`` are already in prompt ``order``."""
    question = call.question_for(order)
    if call.kind in ("generate", "summarize"):
        partners = None if call.n_cols == 1 else [call.partner_text(v) for v in zip(*vals)]
        return eng.generate(list(vals[0]), question, partners=partners, max_tokens=call.output_tokens,
                            stop=call.stop)
    if call.kind == "extract":
        return eng.extract(list(vals[0]), call.fields, call.instruction, max_tokens=call.output_tokens)
    if call.kind == "classify":
        docs = [call.classify_text(v) for v in zip(*vals)]
        idx, _ = eng.classify(docs, list(call.labels), question)
        return [call.labels[k] if k >= 0 else None for k in idx]
    if call.n_cols == 1:
        m = eng.filter(vals[0], [question])[:, 0]
    else:
        m = _pair_margins(eng, vals[0], [call.partner_text(v) for v in zip(*vals)], question)
    return _answers(call.kind, m)


def _check_values(call: Call, columns, where) -> None:
    for c_i, col in enumerate(columns):
        for r, v in enumerate(col):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"ai_{call.kind}: {where(r)}: column argument {c_i + 1} must be a "
                                f"string, got {type(v).__name__}; cast it with CAST(... AS STRING)")


def _answers(kind: str, margins) -> list:
    """An ai_if's answer (margin > 0) or an ai_score's P(yes) = sigmoid(margin), per margin."""
    if kind == "if":
        return [bool(x > 0) for x in margins]
    return [float(1.0 / (1.0 + np.exp(-x))) for x in margins]


def _pair_margins(eng, anchors, partners, question) -> np.ndarray:
    """Element-wise (anchor_i, partner_i) margins in the join layout, grouped by anchor."""
    return eng.pairs(list(anchors), list(partners), question)  # PromptTooLong names the pair's row


def as_json(result) -> str | None:
    """An ai_extract result as the JSON object text of its values (the schema's keys in order), None for NULL."""
    return None if result is None else result.to_json()


_DDL = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}


def type_ddl(t) -> str:
    """Spark's DDL of a type given in Spark's JSON form (``{"type": "struct", ...}`` -> ``struct<a:int>``)."""
    if isinstance(t, str):
        return _DDL.get(t, t)
    if t["type"] == "array":
        return f"array<{type_ddl(t['elementType'])}>"
    if t["type"] == "map":
        return f"map<{type_ddl(t['keyType'])},{type_ddl(t['valueType'])}>"
    return "struct<" + ",".join(f"`{f['name']}`:{type_ddl(f['type'])}" for f in t["fields"]) + ">"
