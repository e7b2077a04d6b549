"""SQL text in BigQuery or Snowflake spelling -> Spark SQL text (sqlglot), and the AI calls in it.

Spark parses and plans every query (docs/architecture.md, "Data flow"); this
module only rewrites the AI function spellings of other dialects into ours:

- ours (Spark SQL, passed through unchanged): ``ai_if('Is {0} about {1}?', r.text, t.term
  [, map('selectivity', 0.2)])`` (``ai_filter`` is an alias), ``ai_score(...)``,
  ``ai_classify(col, array('a', 'b'))`` or ``ai_classify('...{0}...', col, array(...))``;
- BigQuery: ``AI.IF(PROMPT('...{0}...', col))`` or ``AI.IF(('Is ', col, ' ok?'))``,
  ``AI.SCORE(...)``, ``AI.CLASSIFY(col, categories => ['a', 'b'])``; named
  arguments such as ``connection_id`` are ignored;
- Snowflake: ``AI_FILTER(PROMPT('...{0}...', col))``, ``AI_CLASSIFY(col, ['a', 'b'])``,
  hints as ``OBJECT_CONSTRUCT('selectivity', 0.3)``;
- the decode calls ``ai_generate`` / ``ai_extract`` / ``ai_summarize`` in each spelling (BigQuery
  ``AI.GENERATE``, Snowflake ``AI_COMPLETE`` / ``AI_EXTRACT``): see :mod:`quail_spark.decode_sql`.

Every spelling becomes a call of ``ai_if`` / ``ai_score`` / ``ai_classify``
whose first argument is a ``{i}`` template over the column arguments that
follow it, with an optional last ``map(...)`` of hints.
"""
from __future__ import annotations

import contextlib
import math
import re

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from gpu_worker.ai_calls import DECODE_HINTS, DECODE_KINDS, FUNCTIONS, Call, placeholders
from quail_spark import decode_sql
from quail_spark.errors import HintError, TemplateError, UnsupportedSQL

IGNORED_KWARGS = {"connection_id", "endpoint", "model", "model_params", "output_schema"}
HINT_KEYS = ("selectivity", "anchor", "tokens", "tokens_1", "tokens_2")  # tokens_N: the tokens of argument {N}
SNOWFLAKE_ONLY = ("ai_complete",)  # Snowflake's spelling of ai_generate (its model argument checked)
_TOKENS_KEY = re.compile(r"tokens(_[1-9][0-9]*)?$")
DIALECTS = ("spark", "bigquery", "snowflake")


def to_spark(sql: str, dialect: str | None = None, model: str | None = None) -> tuple[str, tuple]:
    """(Spark SQL text, the AI calls in it) of ``sql`` written in ``dialect``.

    ``dialect`` None detects BigQuery (``AI.IF(`` ...) and Snowflake (``PROMPT(``,
    ``OBJECT_CONSTRUCT``, ``[...]`` labels, ``AI_COMPLETE``) spellings; Spark SQL text is returned
    unchanged. ``model``: the installed model, which Snowflake's ``AI_COMPLETE`` must name (None: unchecked).

    Examples
    --------
    >>> to_spark("SELECT id FROM notes WHERE AI.IF(PROMPT('Is {0} rude?', body))")[0]
    "SELECT id FROM notes WHERE ai_if('Is {0} rude?', body)"
    >>> to_spark("SELECT AI_CLASSIFY(body, ['bug', 'praise']) AS c FROM notes")[0]
    "SELECT ai_classify(body, ARRAY('bug', 'praise')) AS c FROM notes"
    """
    if dialect is not None and dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {DIALECTS} or None (detect)")
    text, found = _rewrite_bigquery(sql)
    dialect = dialect or ("bigquery" if found else _detect(sql))
    try:
        trees = [t for t in sqlglot.parse(text if dialect == "bigquery" else sql, read=dialect) if t]
    except sqlglot.errors.SqlglotError as e:
        if dialect == "spark":  # Spark's own parser decides; its error names the problem
            return sql, ()
        raise UnsupportedSQL(f"{dialect} SQL that does not parse", str(e).splitlines()[0]) from None
    calls = []
    for tree in trees:
        for node in list(tree.walk()):
            name = _ai_name(node)
            if not name:
                continue
            if dialect == "spark":  # Spark's call as written; a template, labels or hint read from
                if not _template_per_row(node):  # columns is for Spark and the executor (per row)
                    with contextlib.suppress(UnsupportedSQL):
                        calls.append(_ai_call(node, name))
                continue
            call = _ai_call(node, name, model)
            calls.append(call)
            node.replace(_spark_call(call))
    if dialect == "spark":
        return sql, tuple(calls)
    return ";\n".join(t.sql(dialect="spark", normalize_functions=False) for t in trees), tuple(calls)


def _rewrite_bigquery(sql: str) -> tuple[str, bool]:
    """``AI.IF(`` / ``AI.SCORE(`` / ``AI.CLASSIFY(`` as ``ai_if(`` ... (sqlglot reads AI.IF as IF)."""
    try:
        toks = sqlglot.tokenize(sql, read="bigquery")
    except sqlglot.errors.SqlglotError:
        return sql, False
    spans = [(a.start, name.end + 1, "ai_" + name.text.lower())
             for a, dot, name, paren in zip(toks, toks[1:], toks[2:], toks[3:])
             if a.text.upper() == "AI" and dot.token_type == TokenType.DOT
             and name.text.lower() in set(FUNCTIONS.values()) and paren.token_type == TokenType.L_PAREN]
    for start, end, new in reversed(spans):
        sql = sql[:start] + new + sql[end:]
    return sql, bool(spans)


def _detect(sql: str) -> str:
    """'snowflake' when an AI call is spelled PROMPT(...), OBJECT_CONSTRUCT(...) or AI_CLASSIFY(col, [...]);
    else 'spark' (brackets elsewhere are Spark's own: ``tags[0]``)."""
    try:
        toks = sqlglot.tokenize(sql, read="snowflake")
    except sqlglot.errors.SqlglotError:
        return "spark"
    calls = [i for i, (t, nxt) in enumerate(zip(toks, toks[1:])) if nxt.token_type == TokenType.L_PAREN]
    names = {toks[i].text.upper() for i in calls}
    if names & {n.upper() for n in SNOWFLAKE_ONLY}:
        return "snowflake"
    if not names & {n.upper() for n in FUNCTIONS}:
        return "spark"
    if names & {"PROMPT", "OBJECT_CONSTRUCT"}:
        return "snowflake"
    for i in (i for i in calls if toks[i].text.upper() in ("AI_CLASSIFY", "AI_EXTRACT")):
        depth = 0
        for t in toks[i + 1:]:
            depth += (t.token_type == TokenType.L_PAREN) - (t.token_type == TokenType.R_PAREN)
            if depth == 0:
                break
            if depth == 1 and t.token_type in (TokenType.L_BRACKET, TokenType.L_BRACE):
                return "snowflake"
    return "spark"


def _ai_name(node) -> str | None:
    if isinstance(node, exp.AIClassify):
        return "ai_classify"
    if isinstance(node, exp.AIGenerate):
        return "ai_generate"
    if isinstance(node, exp.Anonymous) and (node.name.lower() in FUNCTIONS or node.name.lower() in SNOWFLAKE_ONLY):
        return node.name.lower()
    return None


def parse_call(expr: str) -> tuple[Call, exp.Expression]:
    """(Call, its sqlglot node) of Spark SQL text that is exactly one AI call: the column
    expressions of enrichment specs and ArrowMapper (the dialect front end reads calls the same way).

    >>> parse_call("ai_classify(body, array('bug', 'praise'))")[0].labels
    ('bug', 'praise')
    """
    try:
        node = sqlglot.parse_one(expr, read="spark")
    except sqlglot.errors.SqlglotError as e:
        raise UnsupportedSQL(f"text that does not parse: {expr[:80]!r}", str(e).splitlines()[0]) from None
    name = _ai_name(node)
    if name is None:
        raise UnsupportedSQL(f"{expr[:80]!r} as one AI call",
                             f"expected one AI call ({', '.join(sorted(FUNCTIONS))}), got {type(node).__name__}")
    return _ai_call(node, name), node


def _template_per_row(node) -> bool:
    """A Spark-spelled ai_if / ai_score / ai_classify whose template is an expression (a column of
    questions, a concat): not one Call, but valid Spark SQL (each row's template is rendered)."""
    if not isinstance(node, (exp.Anonymous, exp.AIGenerate)) or not node.expressions:
        return False
    if FUNCTIONS.get(node.name.lower() if isinstance(node, exp.Anonymous) else "ai_generate") in ("extract", "summarize"):
        return False  # the column is the document
    first = node.expressions[0]
    if isinstance(first, (exp.Kwarg, exp.Tuple)) or (isinstance(first, exp.Literal) and first.is_string):
        return False
    if isinstance(first, exp.Anonymous) and first.name.lower() == "prompt":
        return False
    if node.name.lower() == "ai_classify" and len(node.expressions) == 2:
        return False  # ai_classify(col, labels): the column is the document
    return not isinstance(first, exp.Null)


def _ai_call(node, name: str, model: str | None = None) -> Call:
    """The Call of one call node in any accepted spelling (``model``: what AI_COMPLETE must name)."""
    raw = ([node.this, node.args.get("categories"), node.args.get("config")]
           if isinstance(node, exp.AIClassify) else list(node.expressions))
    pos, kw = [], {}
    for a in (a for a in raw if a is not None):
        if isinstance(a, exp.Kwarg):
            kw[a.this.name.lower()] = a.expression
        else:
            pos.append(a)
    for key in ("input", "prompt", "text"):
        if key in kw:
            pos.insert(0, kw.pop(key))
    if name == "ai_complete":  # Snowflake: AI_COMPLETE(model, PROMPT(...) | text)
        name, pos = "ai_generate", _completion(pos, kw, model, node)
    schema = kw.pop("output_schema", None) if name == "ai_generate" else None
    if name in ("ai_extract", "ai_summarize") or schema is not None:
        return _decode_call(node, name, pos, kw, schema)
    labels = kw.pop("categories", None)
    unknown = set(kw) - IGNORED_KWARGS
    if unknown:
        raise UnsupportedSQL(f"argument {sorted(unknown)[0]} => of {name}")
    hints = pos.pop() if pos and _is_map(pos[-1]) else None
    if name == "ai_classify":
        hints = None  # Snowflake's config object (task_description, ...) is not ours
        if labels is None and pos and isinstance(pos[-1], exp.Array):
            labels = pos.pop()
        if labels is None or not isinstance(labels, exp.Array):
            raise TemplateError(node.sql()[:80], "expected the labels as array('a', 'b', ...)")
        labels = tuple(_label(i, v, labels) for i, v in enumerate(labels.expressions, 1))
    text, args = _template(pos, name, node)
    hints = _hints(hints, FUNCTIONS[name])
    position = _anchor_position(dict(hints).get("anchor"), args)
    try:
        return Call.of(name, text, tuple(a.sql(dialect="spark") for a in args), labels or (), hints, position)
    except ValueError as e:
        raise TemplateError(text, str(e)) from None


def _anchor_position(anchor, args) -> int | None:
    """The argument the ``anchor`` hint of a two-column call names, as Spark's analysis rule
    (QuailAnchorHint) reads it: the one argument with a column of that table alias or that name,
    expression arguments included (``x.title || ': ' || x.body`` is table x's). Calls of other
    sizes keep the hint as written. An anchor that names both arguments, or none when every
    column is qualified (so no table is left to resolve it), is refused as Spark refuses it.

    >>> from sqlglot import parse_one
    >>> _anchor_position('body', [parse_one("t.term"), parse_one("n.body")])
    1
    """
    if anchor is None or len(args) != 2:
        return None
    key = str(anchor).lower()
    cols = [list(a.find_all(exp.Column)) for a in args]
    hits = [i for i, cs in enumerate(cols) if any(key in (c.name.lower(), c.table.lower()) for c in cs)]
    if len(hits) == 1:
        return hits[0]
    if hits or all(c.table for cs in cols for c in cs):
        tables = sorted({c.table for cs in cols for c in cs} - {""})
        what = "names more than one of" if hits else "names none of"
        raise HintError("anchor", f"{anchor!r} {what} the columns {[a.sql() for a in args]}; expected a table "
                                  f"alias of the template's tables {tables} or a column name of exactly one")
    return None  # unqualified columns: Spark resolves their tables


def _template(pos, name, node) -> tuple[str, list]:
    """(template text, argument expressions) from PROMPT(...), a tuple of pieces, or text + args."""
    if not pos:
        raise TemplateError(node.sql()[:80], f"{name} expected a template text and its arguments")
    first = pos[0]
    if isinstance(first, exp.Anonymous) and first.name.lower() == "prompt" and len(pos) == 1:
        pos = list(first.expressions)
        first = pos[0] if pos else exp.Null()
    if isinstance(first, exp.Tuple) and len(pos) == 1:  # BigQuery ('Is ', col, ' ok?')
        text, args, keys = "", [], []
        for piece in first.expressions:
            if isinstance(piece, exp.Literal) and piece.is_string:
                text += piece.this
            else:
                key = piece.sql()
                if key not in keys:
                    keys.append(key)
                    args.append(piece)
                text += "{%d}" % keys.index(key)
        return _checked(text, args, name)
    if isinstance(first, exp.Literal) and first.is_string:
        return _checked(first.this, pos[1:], name)
    if name == "ai_classify" and len(pos) == 1:
        return "{0}", [first]
    raise TemplateError(node.sql()[:80], f"{name} expected a template text first, got {first.sql()[:40]}")


def _checked(text: str, args, name) -> tuple[str, list]:
    used = set(placeholders(text))
    for i in sorted(used):
        if i >= len(args):
            raise TemplateError(text, f"placeholder {{{i}}} expected an argument, but {len(args)} "
                                      f"were given ({', '.join(a.sql() for a in args) or 'none'})")
    for i, arg in enumerate(args):
        if i not in used:
            raise TemplateError(text, f"argument {i} ({arg.sql()}) expected a placeholder {{{i}}} in "
                                      "the text, found none")
    if not args:
        raise TemplateError(text, f"{name} expected at least one column argument, got none")
    return text, list(args)


def _is_map(node) -> bool:
    """map(...), OBJECT_CONSTRUCT(...) or {'k': v}: a hint argument."""
    return isinstance(node, (exp.VarMap, exp.Struct, exp.Map)) or (
        isinstance(node, exp.Anonymous) and node.name.lower() == "object_construct")


def _label(i: int, node, labels):
    """A label of ai_classify: a literal string (a NULL label is refused by position, as Spark's check does)."""
    while isinstance(node, (exp.Cast, exp.TryCast, exp.Paren)):
        node = node.this
    if isinstance(node, exp.Null):
        raise TemplateError(labels.sql()[:80], f"ai_classify: label {i} is NULL; the labels must be strings")
    return _literal(node)


def _literal(node):
    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        return float(node.this) if any(c in node.this for c in ".eE") else int(node.this)
    if isinstance(node, exp.Neg):
        return -_literal(node.this)
    raise UnsupportedSQL("non-literal value", f"{node.sql()[:80]}; expected a literal")


def _completion(pos, kw, model, node) -> list:
    """AI_COMPLETE's arguments after its model (checked): PROMPT(...) as written, another text as '{0}' over it."""
    if "model" in kw:
        pos.insert(0, kw.pop("model"))
    if len(pos) < 2:
        raise TemplateError(node.sql()[:80], "AI_COMPLETE expected (model, PROMPT(...) or a text)")
    decode_sql.check_model(_literal(pos[0]) if isinstance(pos[0], exp.Literal) else pos[0].sql(), model, node)
    first = pos[1]
    if (isinstance(first, exp.Anonymous) and first.name.lower() == "prompt") or isinstance(first, exp.Tuple):
        return pos[1:]
    return [exp.Literal.string("{0}"), *pos[1:]]


def _decode_call(node, name: str, pos, kw, schema) -> Call:
    """ai_extract (ours, Snowflake's AI_EXTRACT, BigQuery's AI.GENERATE with output_schema) or ai_summarize."""
    fmt = kw.pop("responseformat", None)
    unknown = set(kw) - IGNORED_KWARGS
    if unknown:
        raise UnsupportedSQL(f"argument {sorted(unknown)[0]} => of {name}")
    hints = pos.pop() if len(pos) > 2 - (fmt is not None) - (schema is not None) and _is_map(pos[-1]) else None
    instruction = None
    if schema is not None:  # BigQuery: the prompt over one column; its text is the instruction
        text, args = _template(pos, name, node)
        if len(args) != 1:
            raise TemplateError(text, f"AI.GENERATE with output_schema expected one column, got {len(args)}")
        instruction = None if text.strip() == "{0}" else Call("if", text, 1).question
        name, schema = "ai_extract", decode_sql.bigquery_schema(_literal(schema), node)
    elif name == "ai_extract":
        if fmt is not None:
            pos.insert(1, fmt)
        if len(pos) not in (2, 3):
            raise TemplateError(node.sql()[:80], "ai_extract expected (column, schema[, instruction][, hint])")
        if isinstance(pos[1], exp.Struct):
            schema, instruction = decode_sql.snowflake_format(pos[1], node)
        else:
            schema = decode_sql.schema_of(pos[1], node)
        instruction = _literal(pos[2]) if len(pos) == 3 else instruction
        args = pos[:1]
    else:
        if len(pos) not in (1, 2) or hints is not None:
            raise TemplateError(node.sql()[:80], "ai_summarize expected (column[, max_words])")
        args = pos[:1]
    words = _literal(pos[1]) if name == "ai_summarize" and len(pos) == 2 else None
    try:
        return Call.of(name, "{0}", tuple(a.sql(dialect="spark") for a in args), hints=_hints(hints, FUNCTIONS[name]),
                       schema=schema or "", instruction=instruction, max_words=words)
    except ValueError as e:
        raise TemplateError(node.sql()[:80], str(e)) from None


def _hints(node, kind: str = "if") -> tuple:
    """The hint of a call of ``kind``: selectivity, anchor, tokens / tokens_N; a decode call's max_tokens and
    stop (:data:`gpu_worker.ai_calls.DECODE_HINTS`, which take no selectivity)."""
    if node is None:
        return ()
    if isinstance(node, (exp.VarMap, exp.Map)):  # exp.Map: BigQuery's reading of map('k', v)
        keys, values = (node.args.get(k) for k in ("keys", "values"))
        pairs = zip(*((x.expressions if isinstance(x, exp.Array) else [x] if x is not None else [])
                      for x in (keys, values)))
    elif isinstance(node, exp.Anonymous):  # OBJECT_CONSTRUCT('k', v, ...)
        pairs = zip(node.expressions[0::2], node.expressions[1::2])
    else:  # Struct of PropertyEQ / Slice
        pairs = ((e.this, e.expression) for e in node.expressions)
    out = []
    decode = DECODE_HINTS.get(kind, ())
    for k, v in pairs:
        key = str(_literal(k) if isinstance(k, exp.Literal) else k.name).lower()
        value = tuple(_literal(x) for x in v.expressions) if key == "stop" and isinstance(v, exp.Array) else _literal(v)
        tokens = bool(_TOKENS_KEY.match(key))
        known = ("anchor",) + (decode if kind in DECODE_KINDS else ("selectivity",))
        if key not in known and not tokens:
            raise HintError(key, f"unknown hint of ai_{kind}; expected one of "
                                 f"{', '.join(known + ('tokens', 'tokens_1'))}, ...")
        if key == "max_tokens" and not (_number(value) is not None and _number(value) >= 1
                                        and float(_number(value)).is_integer()):
            raise HintError(key, f"expected a whole number of tokens >= 1, got {value!r}")
        if key == "stop" and not (isinstance(value, str) or all(isinstance(x, str) for x in value)):
            raise HintError(key, f"expected a string or an array of strings, got {value!r}")
        if key == "selectivity" or tokens:  # numbers, or text that reads as one (as Spark's hint does)
            x = _number(value)
            if key == "selectivity" and not (x is not None and 0.0 <= x <= 1.0):
                raise HintError(key, f"expected a number in [0, 1], got {value!r}")
            if tokens and not (x is not None and 0.0 < x < math.inf):
                raise HintError(key, f"expected a positive number of tokens, got {value!r}")
            value = x
        out.append((key, value))
    return tuple(out)


def _number(value):
    """A hint's number: a numeric literal, or text that reads as one; None otherwise."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _spark_call(call: Call) -> exp.Expression:
    """``ai_if('t', a, b[, map(...)])`` / ``ai_classify('t', a, array(...))`` / ``ai_extract(a, 'ddl'[, 'i'])`` /
    ``ai_summarize(a[, n])`` as a sqlglot node."""
    args = [sqlglot.parse_one(a, read="spark") for a in call.args]
    if call.fn == "ai_extract":
        args.append(exp.Literal.string(decode_sql.schema_ddl(call.schema)))
        if call.instruction is not None:
            args.append(exp.Literal.string(call.instruction))
    elif call.fn == "ai_summarize":
        args += [exp.Literal.number(call.max_words)] if call.max_words is not None else []
    elif not (call.fn == "ai_classify" and call.template == "{0}" and len(args) == 1):
        args.insert(0, exp.Literal.string(call.template))
    if call.fn == "ai_classify":
        args.append(exp.Array(expressions=[exp.Literal.string(x) for x in call.labels]))
    if call.hints:
        args.append(_hint_node(call.hints))
    return exp.Anonymous(this=call.fn, expressions=args)


def _hint_node(hints) -> exp.Expression:
    """map('k', v, ...) of one value type, else named_struct (a number beside a text, an array of stop strings)."""
    def lit(v):
        if isinstance(v, tuple):
            return exp.Array(expressions=[exp.Literal.string(x) for x in v])
        return exp.Literal.string(v) if isinstance(v, str) else exp.Literal.number(v)

    keys, values = [exp.Literal.string(k) for k, _ in hints], [lit(v) for _, v in hints]
    if len({type(v) if isinstance(v, (str, tuple)) else float for _, v in hints}) == 1 and \
            not any(isinstance(v, tuple) for _, v in hints):
        return exp.VarMap(keys=exp.Array(expressions=keys), values=exp.Array(expressions=values))
    # a map's values share one type: Spark's ANSI coercion refuses a number beside a text
    return exp.Anonymous(this="named_struct", expressions=[x for kv in zip(keys, values) for x in kv])
