"""The AI calls of the grammar, as fragments in every spelling (see query.py): literal templates,
templates read from a column or built by an expression, hints (selectivity, an anchor naming a
table alias, a column or an expression's alias), labels, and each call's shape tags."""
from __future__ import annotations

from .query import S, fmt, join, s

IF_T = ("Is {0} a complaint?", "Is {0} about animals?", "Does {0} mention food?", "Is {0} written in French?")
PAIR_T = ("Does {0} mention {1}?", "Is {0} related to {1}?", "Is {1} a topic of {0}?")
LABELS = (("pets", "shopping", "other"), ("yes", "no"))


def lit(text: str) -> S:
    return s(f"'{text}'")


def col(alias: str, name: str) -> S:
    return s(f"{alias}.{name}")


class Arg:
    """A document argument: its fragment, the aliases and column names it reads, its mapper text."""

    def __init__(self, frag: S, aliases, names, mapper: str | None = None, plain: bool = False):
        self.frag, self.aliases, self.names, self.mapper, self.plain = frag, set(aliases), set(names), mapper, plain

    @classmethod
    def column(cls, alias: str, name: str) -> "Arg":
        return cls(col(alias, name), {alias}, {name}, name, plain=True)


def labels_frag(labels) -> S:
    body = ", ".join(f"'{x}'" for x in labels)
    return S(f"array({body})", f"array({body})", f"[{body}]", f"[{body}]")


def hint_frag(hint: dict | None, args) -> S | None:
    """``hint``: {'selectivity': x} and / or {'anchor': name}; the anchor resolved to an argument
    position for SQLite (the name must name exactly one argument, as Spark's rule requires)."""
    if not hint:
        return None
    kv = [f"'selectivity', {hint['selectivity']}"] if "selectivity" in hint else []
    lite = list(kv)
    if "anchor" in hint:
        name = hint["anchor"]
        hits = [i for i, a in enumerate(args) if name in a.aliases or name in a.names]
        assert len(hits) == 1, f"anchor {name!r} must name exactly one argument"
        kv.append(f"'anchor', '{name}'")
        lite.append(f"'anchor_arg', {hits[0]}")
    fn = "named_struct" if len(kv) > 1 else "map"
    return S(f"{fn}({', '.join(kv)})", f"{fn}({', '.join(lite)})", None, None)


def call(kind: str, template: S, args, labels=None, hint=None, literal: str | None = None, fn=None) -> S:
    """``ai_<kind>(template, args..., [labels], [hint])``; ``literal``: the template's text when it is
    a literal (then the BigQuery / Snowflake spellings exist for a one-column call)."""
    fn = fn or f"ai_{kind}"
    parts = ([] if template is None else [template]) + [a.frag for a in args]
    if labels:
        parts.append(labels_frag(labels))
    h = hint_frag(hint, args)
    if h is not None:
        parts.append(h)
    spark = fmt(f"{fn}({{}})", join(", ", parts))
    bq = sf = None
    plain = len(args) == 1 and args[0].plain and (not hint or set(hint) == {"selectivity"})
    if plain and kind == "classify" and template is None:
        doc, labs = args[0].frag.spark, labels_frag(labels).bq
        bq, sf = f"AI.CLASSIFY({doc}, categories => {labs})", f"AI_CLASSIFY({doc}, {labs})"
    elif plain and literal is not None and kind in ("if", "score"):
        prompt = f"PROMPT('{literal}', {args[0].frag.spark})"
        bq = f"AI.{kind.upper()}({prompt})"
        obj = f", OBJECT_CONSTRUCT('selectivity', {hint['selectivity']})" if hint else ""
        sf = f"AI_FILTER({prompt}{obj})" if kind == "if" else None
    return S(spark.spark, spark.lite, bq, sf)


def mapper_text(kind: str, literal: str | None, args, labels=None) -> str | None:
    """The same call over the one table's columns, as with_ai_columns reads it."""
    if any(a.mapper is None for a in args) or (literal is None and kind != "classify"):
        return None
    parts = ([f"'{literal}'"] if literal else []) + [a.mapper for a in args]
    if labels:
        parts.append(f"array({', '.join(repr(x) for x in labels)})")
    return f"ai_{kind}({', '.join(parts)})"


# ---- decode calls: short outputs so that each stays cheap on the random model

GEN_T = ("Write a title for {0}.", "Reply to {0}.")
# ai_extract schemas: the DDL text of SQL and the fields as Spark's JSON types (what the oracle's Call reads)
SCHEMAS = {"who STRING, n INT": {"who": "string", "n": "integer"},
           "ok BOOLEAN": {"ok": "boolean"},
           "place STRING, x DOUBLE, ok BOOLEAN": {"place": "string", "x": "double", "ok": "boolean"}}


def schema_json(ddl: str) -> str:
    """Spark's JSON of the struct a DDL text of :data:`SCHEMAS` describes (StructType.jsonValue())."""
    import json

    fields = [{"name": k, "type": t, "nullable": True, "metadata": {}} for k, t in SCHEMAS[ddl].items()]
    return json.dumps({"type": "struct", "fields": fields})


def ours(f: S) -> S:
    """Spark's and SQLite's text only: the BigQuery / Snowflake spellings of decode calls are tested elsewhere."""
    return S(f.spark, f.lite, None, None)


def generate(arg: Arg, template: str, max_tokens: int) -> S:
    literal = template.replace("{", "{{").replace("}", "}}")
    return ours(fmt(f"ai_generate('{literal}', {{}}, map('max_tokens', {max_tokens}))", arg.frag))


def summarize(arg: Arg, words: int) -> S:
    return ours(fmt(f"ai_summarize({{}}, {words})", arg.frag))


def extract_field(arg: Arg, ddl: str, field: str, max_tokens: int) -> S:
    """One field of an ai_extract struct: ``.field`` in Spark, ``json_extract(..., '$.field')`` in SQLite."""
    call = fmt(f"ai_extract({{}}, '{ddl}', map('max_tokens', {max_tokens}))", arg.frag)
    return S(f"{call.spark}.{field}", f"json_extract({call.lite}, '$.{field}')", None, None)
