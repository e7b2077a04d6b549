"""The oracle: the query's text run in SQLite, the AI functions registered as Python functions
whose value for one row is the engine's value for that row's prompt (gpu_worker.ai_calls: the one
renderer, NULL rule and anchor rule), each row's value computed once and cached.

Only the relational part is SQLite's. Spark's ``map(...)`` / ``named_struct(...)`` hints and
``array(...)`` labels are registered functions returning tagged JSON text, read back by the AI
functions; ``concat`` and ``count_if`` are registered with Spark's meaning (NULL in, NULL out;
the count of TRUE)."""
from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter

from gpu_worker.ai_calls import DECODE_KINDS, FUNCTIONS, Call, as_json, evaluate, is_null

from .calls import schema_json

from .tables import fill_sqlite

HINT, LABELS = "\x01hint:", "\x01labels:"
TIE = 1e-4  # a margin (or a score's distance to a bound) this close to zero may flip between paths


class Oracle:
    """``rows(sql)`` -> the rows SQLite gives; ``near`` says whether a value it used was a tie."""

    def __init__(self, engine):
        if sqlite3.sqlite_version_info < (3, 39):
            raise RuntimeError(f"SQLite {sqlite3.sqlite_version} lacks RIGHT / FULL joins; 3.39 or later expected")
        self.eng = engine
        self.cache: dict = {}
        self.bounds: tuple = ()
        self.near = False
        self.scores: Counter = Counter()  # this query's ai_score calls per (call, values): rows of one prompt
        self.con = sqlite3.connect(":memory:")
        fill_sqlite(self.con)
        for name, kind in FUNCTIONS.items():
            fn = self._decode(name) if kind in DECODE_KINDS else self._function(kind)
            self.con.create_function(name, -1, fn, deterministic=True)
        self.con.create_function("map", -1, lambda *kv: HINT + json.dumps(dict(zip(kv[::2], kv[1::2]))))
        self.con.create_function("named_struct", -1, lambda *kv: HINT + json.dumps(dict(zip(kv[::2], kv[1::2]))))
        self.con.create_function("array", -1, lambda *xs: LABELS + json.dumps(xs))
        self.con.create_function("concat", -1, lambda *xs: None if any(x is None for x in xs)
                                 else "".join(str(x) for x in xs))
        self.con.create_aggregate("count_if", 1, _CountIf)

    @property
    def repeated_score(self) -> bool:
        """Whether the last query scored one prompt for two or more rows (equal values here; a path's
        values for those rows may differ in their last bits, batched otherwise)."""
        return any(n > 1 for n in self.scores.values())

    def rows(self, sql: str, bounds=()) -> list:
        """The rows of ``sql``; ``bounds``: the numbers ai_score values are compared with (ties)."""
        self.bounds, self.near, self.scores = tuple(bounds), False, Counter()
        return self.con.execute(sql).fetchall()

    def _function(self, kind: str):
        def ai(*args):
            args = list(args)
            hint = json.loads(args.pop()[len(HINT):]) if args and _tagged(args[-1], HINT) else {}
            labels = ()
            if kind == "classify":
                labels = tuple(json.loads(args.pop()[len(LABELS):]))
                if len(args) == 1:
                    args.insert(0, "{0}")
            template, values = args[0], args[1:]
            if is_null(template) or any(is_null(v) for v in values):
                return None
            call = Call(kind, template, len(values), labels, anchor=hint.get("anchor_arg"))
            return self._value(call, tuple(values))
        return ai

    def _decode(self, name: str):
        """ai_generate(template, doc[, hint]), ai_summarize(doc[, max_words]), ai_extract(doc, ddl[, hint]):
        the engine's text (an extraction as its JSON object text, read by SQLite's json_extract)."""
        def ai(*args):
            args = list(args)
            hint = json.loads(args.pop()[len(HINT):]) if args and _tagged(args[-1], HINT) else {}
            hints = tuple(hint.items())
            if name == "ai_generate":
                if is_null(args[0]):  # a NULL template: no call to make (the NULL rule)
                    return None
                call = Call.of(name, args[0], ("doc",), hints=hints)
            elif name == "ai_summarize":
                call = Call("summarize", "{0}", 1, max_words=args[1] if len(args) > 1 else None)
            else:
                call = Call.of(name, "{0}", ("doc",), hints=hints, schema=schema_json(args[1]))
            doc = args[1] if name == "ai_generate" else args[0]  # a NULL or blank one: evaluate's NULL rule
            key = (call, (doc,))
            if key not in self.cache:
                out = evaluate(self.eng, call, [[doc]])[0]
                self.cache[key] = (as_json(out) if call.kind == "extract" else out, math.inf)
            return self.cache[key][0]
        return ai

    def _value(self, call: Call, values: tuple):
        key = (call, values)
        if key not in self.cache:
            self.cache[key] = self._compute(call, values)
        value, margin = self.cache[key]
        if call.kind == "score":
            self.scores[key] += 1
        if abs(margin) < TIE or (call.kind == "score" and any(abs(value - b) < TIE for b in self.bounds)):
            self.near = True
        return value

    def _compute(self, call: Call, values: tuple) -> tuple:
        """(the engine's value for one row, its margin: distance to the answer's boundary)."""
        order = call.order(values)
        placed = [values[i] for i in order]
        question = call.question_for(order)
        if call.kind == "classify":
            idx, probs = self.eng.classify([call.classify_text(placed)], list(call.labels), question)
            top = sorted(probs[0], reverse=True)
            return call.labels[int(idx[0])], float(top[0] - top[1])
        if call.n_cols == 1:
            m = float(self.eng.filter([placed[0]], [question])[0, 0])
        else:
            m = float(self.eng.pairs([placed[0]], [call.partner_text(placed)], question)[0])
        return (m > 0, m) if call.kind == "if" else (1.0 / (1.0 + math.exp(-m)), m)


def _tagged(value, tag: str) -> bool:
    return isinstance(value, str) and value.startswith(tag)


class _CountIf:
    def __init__(self):
        self.n = 0

    def step(self, value):
        self.n += int(value is not None and bool(value))

    def finalize(self):
        return self.n
