"""ai_extract's fields: Spark types -> JSON schemas -> llguidance token masks, and answers -> values.

A field's type is Spark's JSON form of a data type (pyspark's `DataType.jsonValue()`):
"string", "integer", "long", "short", "byte", "double", "float", "boolean",
"date", "timestamp", {"type": "array", "elementType": ..., "containsNull": ...},
{"type": "struct", "fields": [{"name": ..., "type": ..., "nullable": ...}, ...]}.
Each field is answered as one JSON value of its type or null, decoded under
the grammar of that value's JSON schema, so every finished answer parses and
converts (`convert`).

Why llguidance (over xgrammar or outlines-core): a small abi3 wheel with no
torch or transformers pins, JSON-schema support, fast mask computation on the
CPU, maintained and used by vLLM and SGLang. It is imported on first use:
`check_fields` (the driver's check at analysis) needs no torch and no llguidance.
"""
from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

INT_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}
# the grammar's bound of a long: llguidance reads schema bounds as doubles, so +-(2^63 - 1) overflows
LONG_BOUND = 10 ** 18
FLOATS = ("double", "float")
YEAR = r"(000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d\d\d)"
LEAP_YEAR = r"(\d\d(0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26]|0[48])00)"
# every date the pattern admits exists (datetime.date accepts it): 29 February in leap years only
DATE = (rf"({YEAR}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])|{YEAR}-(0[13-9]|1[0-2])-(29|30)"
        rf"|{YEAR}-(0[13578]|1[02])-31|{LEAP_YEAR}-02-29)")
TIME = r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d"
TYPE_WORDS = {"string": "text", "boolean": "true or false", "date": "date as YYYY-MM-DD",
              "timestamp": "timestamp as YYYY-MM-DDTHH:MM:SS", "double": "number", "float": "number",
              **dict.fromkeys(INT_BITS, "integer")}


@dataclass(frozen=True)
class Extraction:
    """One row's extracted fields: `values` (name -> Python value, None for null or cut) and `cut` (the
    fields whose answer max_tokens cut). `to_json()`: the JSON object of `values`, keys in schema order."""

    values: dict
    cut: tuple = ()

    def to_json(self) -> str:
        return json.dumps(self.values, ensure_ascii=False)


def check_fields(fields) -> dict:
    """The fields as {name: Spark JSON type}, checked: ValueError naming a field whose type the grammar
    cannot express. Accepts a dict name -> type or a struct type's JSON ({"type": "struct", ...})."""
    if isinstance(fields, dict) and fields.get("type") == "struct" and isinstance(fields.get("fields"), list):
        fields = {f["name"]: f["type"] for f in fields["fields"]}
    if not isinstance(fields, dict) or not fields:
        raise ValueError(f"extract needs a non-empty dict of field name -> Spark type, got {fields!r:.80}")
    for name, t in fields.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"extract field names must be non-empty strings, got {name!r}")
        schema_of(t, f"field {name!r}")
    return dict(fields)


def _nullable(s: dict) -> dict:
    return {"anyOf": [s, {"type": "null"}]}


def schema_of(t, where: str = "field") -> dict:
    """The JSON schema of a value of Spark type `t`, null allowed."""
    return _nullable(_schema(t, where))


def _schema(t, where: str) -> dict:
    if isinstance(t, str):
        if t == "string" or t.startswith(("varchar(", "char(")):
            return {"type": "string"}
        if t in INT_BITS:
            b = INT_BITS[t]
            if t == "long":
                return {"type": "integer", "minimum": -LONG_BOUND, "maximum": LONG_BOUND}
            return {"type": "integer", "minimum": -(2 ** (b - 1)), "maximum": 2 ** (b - 1) - 1}
        if t in FLOATS:
            return {"type": "number"}
        if t == "boolean":
            return {"type": "boolean"}
        if t == "date":
            return {"type": "string", "pattern": f"^{DATE}$"}
        if t == "timestamp":
            return {"type": "string", "pattern": f"^{DATE}T{TIME}$"}
    elif isinstance(t, dict) and t.get("type") == "array" and "elementType" in t:
        item = _schema(t["elementType"], f"{where} (array element)")
        return {"type": "array", "items": _nullable(item) if t.get("containsNull", True) else item}
    elif isinstance(t, dict) and t.get("type") == "struct" and isinstance(t.get("fields"), list):
        props = {}
        for f in t["fields"]:
            s = _schema(f["type"], f"{where}.{f['name']}")
            props[f["name"]] = _nullable(s) if f.get("nullable", True) else s
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    raise ValueError(f"ai_extract {where}: type {json.dumps(t)} is not supported; expected string, integer, long, "
                     "short, byte, double, float, boolean, date, timestamp, or an array or struct of these")


def describe(t) -> str:
    """Words naming type `t` in a prompt."""
    if isinstance(t, str):
        return TYPE_WORDS.get(t, "text")
    if t.get("type") == "array":
        return f"list of {describe(t['elementType'])}"
    inner = ", ".join(f"{f['name']} ({describe(f['type'])})" for f in t["fields"])
    return f"object with keys {inner}"


def convert(t, v, where: str = "field"):
    """The Python value of a parsed JSON answer `v` of Spark type `t` (None for null)."""
    if v is None:
        return None
    if isinstance(t, str):
        if t in INT_BITS and isinstance(v, int) and not isinstance(v, bool):
            if -(2 ** (INT_BITS[t] - 1)) <= v < 2 ** (INT_BITS[t] - 1):
                return v
        elif t in FLOATS and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        elif t == "boolean" and isinstance(v, bool):
            return v
        elif t == "date" and isinstance(v, str):
            return datetime.date.fromisoformat(v).isoformat()
        elif t == "timestamp" and isinstance(v, str):
            return datetime.datetime.fromisoformat(v).isoformat()
        elif isinstance(v, str) and t not in INT_BITS and t not in FLOATS and t != "boolean":
            return v
    elif t.get("type") == "array" and isinstance(v, list):
        return [convert(t["elementType"], x, f"{where}[{i}]") for i, x in enumerate(v)]
    elif t.get("type") == "struct" and isinstance(v, dict):
        return {f["name"]: convert(f["type"], v.get(f["name"]), f"{where}.{f['name']}") for f in t["fields"]}
    raise ValueError(f"ai_extract {where}: answer {json.dumps(v)[:80]} is not a value of type {json.dumps(t)}")


class Grammars:
    """Token masks of field types for one tokenizer (llguidance, loaded on first use): `matcher(t)` is a
    fresh matcher of a value of type `t`; `allowed(matcher)` its mask over the model's vocabulary."""

    def __init__(self, hf_tokenizer, vocab_size: int):
        self.hf_tokenizer, self.vocab_size = hf_tokenizer, vocab_size
        self._lltok = None
        self._matchers: dict[str, object] = {}
        self._executor = None  # llguidance's thread pool for many masks at once

    @property
    def lltok(self):
        if self._lltok is None:
            import llguidance.hf

            n = self.vocab_size if self.vocab_size >= len(self.hf_tokenizer) else None
            self._lltok = llguidance.hf.from_tokenizer(self.hf_tokenizer, n_vocab=n)
        return self._lltok

    def matcher(self, t, where: str = "field"):
        key = json.dumps(t, sort_keys=True)
        proto = self._matchers.get(key)
        if proto is None:
            import llguidance

            g = llguidance.LLMatcher.grammar_from_json_schema(schema_of(t, where),
                                                               defaults={"whitespace_flexible": False})
            proto = llguidance.LLMatcher(self.lltok, g, log_level=0)
            if proto.is_error():
                raise ValueError(f"ai_extract {where}: no grammar for type {key}: {proto.get_error()}")
            self._matchers[key] = proto
        return proto.deep_copy()

    @property
    def words(self) -> int:
        """int32 words of a packed mask: bit i of word w allows token 32 w + i."""
        return (self.lltok.vocab_size + 31) // 32

    def packed(self, matchers) -> "np.ndarray":
        """int32 [len(matchers), words]: each matcher's allowed next tokens, computed by llguidance on its
        own threads (the GIL released), one row per matcher."""
        import llguidance
        import llguidance.numpy
        import numpy as np

        out = np.zeros((len(matchers), self.words), dtype=np.int32)
        if len(matchers) == 1:
            matchers[0].unsafe_compute_mask_ptr(out.ctypes.data, 4 * self.words)
        elif matchers:
            if self._executor is None:
                self._executor = llguidance.LLExecutor()
            llguidance.numpy.fill_next_token_bitmask_par(self._executor, [(m, i) for i, m in enumerate(matchers)],
                                                         out)
        return out

    def unpack(self, packed) -> "np.ndarray":
        """bool [..., vocab] of packed masks [..., words] (tokens past the grammar's vocabulary: refused)."""
        import numpy as np

        bits = np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), axis=-1, bitorder="little")
        out = np.zeros(packed.shape[:-1] + (self.vocab_size,), dtype=bool)
        n = min(self.vocab_size, bits.shape[-1])
        out[..., :n] = bits[..., :n]
        return out

    def allowed(self, matcher):
        """bool [vocab]: the tokens the grammar allows next."""
        return self.unpack(self.packed([matcher])[0])

    def only_end(self, packed) -> bool:
        """Whether a packed mask allows the end token and nothing else."""
        import numpy as np

        e = self.eos
        return bool((int(packed[e // 32]) >> (e % 32)) & 1) and int(np.bitwise_count(packed.view(np.uint32)).sum()) == 1

    def text(self, tokens: list[int]) -> str:
        return self.lltok.decode_str(tokens)

    @property
    def eos(self) -> int:
        return self.lltok.eos_token


def answer(t, text: str, where: str = "field"):
    """The converted value of a finished answer's text (a grammar-checked JSON value)."""
    return convert(t, json.loads(text), where)
