"""The enrichment spec: loading (JSON or YAML), validation, hashes (its AI columns: quail_spark.columns).

A spec names an input, an output, a unique key and new columns, each one AI
call over input columns::

    {"input": "notes.parquet", "output": "notes_ai.parquet", "key": "id",
     "columns": {"complaint": "ai_if('Is {0} a complaint?', body)",
                 "label": "ai_classify(body, array('bug', 'praise'))"},
     "where": "lang = 'en'", "model": "smollm2-135m", "device": "cpu",
     "engine": {"token_budget": 2048}}

Relative paths are read relative to the spec file's folder. Never imports pyspark.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from quail_spark.columns import AIColumn, SpecError, name_clash, parse_column  # (re-exported)

KEYS = {"input": "input path (.parquet/.jsonl/.json/.csv) or catalog table",
        "output": "output Parquet path, 'iceberg:<namespace>.<table>' or 'delta:<path>'",
        "key": "unique row key column", "columns": "{name: AI call expression}",
        "where": "optional SQL condition on input rows", "model": "engine model",
        "device": "'cpu', 'cuda' (the GPU Spark assigns each AI task) or 'auto'",
        "engine": "other EngineConfig fields", "catalog": "pyiceberg catalog properties (Iceberg output)",
        "budget": "optional {\"max_tokens\": N}: a run estimated above N requested tokens is refused (exit 2), "
                  "one passing N while it runs is stopped with nothing committed (exit 4)"}
REQUIRED = ("input", "output", "key", "columns")
# Engine settings that change results; the others (budgets, device, caches) only change speed.
VALUE_SETTINGS = ("dtype", "on_overflow", "max_prompt_tokens", "seed", "tokenizer", "quantize")
RESERVED = ("_ai_error", "_ai_hash")
OUTPUT_FORMATS = ("iceberg", "delta")  # 'fmt:...' outputs; anything else is a Parquet path


@dataclass(frozen=True)
class Spec:
    input: str
    output: str
    key: str
    columns: tuple     # of AIColumn
    where: str | None = None
    model: str = "smollm2-135m"
    device: str = "cpu"
    engine: dict = field(default_factory=dict)
    catalog: dict = field(default_factory=dict)
    base_dir: str = "."
    budget: dict = field(default_factory=dict)  # {"max_tokens": N} or {}

    @property
    def referenced(self) -> tuple:
        """Input columns any AI column reads, in first-use order."""
        out: list = []
        for c in self.columns:
            out += [x for x in c.inputs if x not in out]
        return tuple(out)

    @property
    def output_format(self) -> str:
        """'iceberg', 'delta' (the output's prefix) or 'parquet'."""
        fmt = self.output.split(":", 1)[0]
        return fmt if fmt in OUTPUT_FORMATS else "parquet"

    def column_hash(self, col: AIColumn) -> str:
        """What a column's values depend on besides the row: its call, the model, value settings."""
        return _digest({"expr": col.expr, "model": self.model,
                        "engine": {k: self.engine[k] for k in VALUE_SETTINGS if k in self.engine}})

    def spec_hash(self) -> str:
        """The whole spec (for the report)."""
        return _digest({"input": self.input, "output": self.output, "key": self.key, "where": self.where,
                        "columns": {c.name: c.expr for c in self.columns}, "model": self.model,
                        "device": self.device, "engine": self.engine})

    def path(self, p: str) -> str:
        """``p`` resolved against the spec's folder when relative and not a URI."""
        if "://" in p or Path(p).is_absolute():
            return p
        return os.path.normpath(os.path.join(self.base_dir, p))  # no resolve(): outputs are symlinks


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def load_spec(path: str) -> Spec:
    """Read and check a spec file (.json, or .yaml/.yml when PyYAML is installed)."""
    return parse_spec(read_file(path), base_dir=os.path.dirname(os.path.abspath(path)))


def read_file(path: str):
    """The mapping in a spec file (.json, or .yaml/.yml when PyYAML is installed), unchecked."""
    p = Path(path)
    text = p.read_text()
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise SpecError(f"{path}: YAML specs need PyYAML, which is not installed; "
                            "install it (pip install pyyaml) or write the spec as JSON") from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path}: not valid JSON ({e})") from None
    return raw


def parse_spec(raw, base_dir: str = ".") -> Spec:
    """Check a spec given as a dict.

    >>> parse_spec({"input": "a.parquet", "output": "b.parquet", "key": "id",
    ...             "columns": {"c": "ai_if('Is {0} late?', body)"}}).columns[0].inputs
    ('body',)
    """
    if not isinstance(raw, dict):
        raise SpecError(f"a spec is a mapping of {sorted(KEYS)}, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise SpecError(f"unknown spec key(s) {unknown}; expected some of {sorted(KEYS)}")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise SpecError(f"spec is missing {missing} ({'; '.join(f'{k}: {KEYS[k]}' for k in missing)})")
    for k in ("input", "output", "key", "model", "device", "where"):
        if k in raw and not isinstance(raw[k], str) and not (k == "where" and raw[k] is None):
            raise SpecError(f"spec key {k!r}: expected a string ({KEYS[k]}), got {raw[k]!r}")
    for k in ("columns", "engine", "catalog"):
        if k in raw and not isinstance(raw[k], dict):
            raise SpecError(f"spec key {k!r}: expected a mapping ({KEYS[k]}), got {raw[k]!r}")
    fmt, sep, where = raw["output"].partition(":")
    if sep and fmt in OUTPUT_FORMATS and not where.strip():
        raise SpecError(f"spec key 'output': {raw['output']!r} names no table; expected {KEYS['output']}")
    if not raw["columns"]:
        raise SpecError("spec key 'columns': expected at least one {name: AI call}")
    cols = tuple(parse_column(name, expr) for name, expr in raw["columns"].items())
    clash = name_clash([c.name for c in cols], (raw["key"], *RESERVED))
    if clash:
        raise SpecError(f"column {clash[0]!r}: the name is taken by {clash[1]!r} (column names ignore case; the "
                        f"output holds the key {raw['key']!r}, the AI columns and '_ai_error')")
    engine = dict(raw.get("engine", {}))
    for k in ("model", "device"):
        if k in engine:
            raise SpecError(f"spec key 'engine': {k!r} goes at the top level of the spec, not in 'engine'")
    from quail_spark import executor

    model, device = raw.get("model", "smollm2-135m"), raw.get("device", "cpu")
    try:
        executor.engine_conf(model, device, **engine)
    except (TypeError, ValueError) as e:
        key = next((k for k in ("model", "device") if str(e).startswith(f"{k} ")), "engine")
        raise SpecError(f"spec key {key!r}: {e}") from None
    return Spec(raw["input"], raw["output"], raw["key"], cols, raw.get("where"), model, device,
                engine, dict(raw.get("catalog", {})), base_dir, _budget(raw.get("budget")))


def _budget(raw) -> dict:
    """The spec's budget, checked: {} or {"max_tokens": a positive whole number}."""
    if raw is None:
        return {}
    n = raw.get("max_tokens") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or set(raw) != {"max_tokens"} or isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise SpecError(f"spec key 'budget': expected {{\"max_tokens\": a positive whole number}}, got {raw!r}")
    return {"max_tokens": n}

