"""The decode calls of SQL text (sqlglot nodes) as Calls, in every spelling the front end reads.

- ours: ``ai_generate('Reply to {0}', body[, hint])`` (read as ai_if is), ``ai_summarize(body[, 40])``,
  ``ai_extract(body, 'name STRING, age INT'[, 'instruction'][, hint])`` or ``ai_extract(body, array('name',
  'city'))`` (STRING fields);
- BigQuery: ``AI.GENERATE(PROMPT(...))`` is ai_generate; ``AI.GENERATE(prompt, output_schema => 'name STRING,
  age INT64')`` is ai_extract over the prompt's one column, the prompt's text its instruction;
- Snowflake: ``AI_COMPLETE(model, PROMPT(...))`` / ``AI_COMPLETE(model, text)`` is ai_generate (the model
  must be the installed one); ``AI_EXTRACT(text, responseFormat)`` with an array of field names, an object
  of field -> question, or ``{'schema': {'type': 'object', 'properties': ...}}`` (a JSON schema) is ai_extract.

A schema becomes Spark's JSON of the struct (``StructType.fromDDL(ddl).jsonValue()``, on the driver's
active session); one Spark cannot parse, or a type the grammar cannot express
(``gpu_worker.grammar.check_fields``), is refused naming the call.
"""
from __future__ import annotations

import json
import os

import sqlglot
from sqlglot import exp

from gpu_worker.ai_calls import type_ddl
from quail_spark.errors import TemplateError

JSON_TYPES = {"string": "string", "integer": "long", "number": "double", "boolean": "boolean"}


def check_model(name, model: str | None, node) -> None:
    """AI_COMPLETE's model argument: the installed model's name or its preset name (``model`` None: unchecked)."""
    if model is None:
        return
    from quail_spark.cost import model_shape

    names = {model, os.path.splitext(os.path.basename(model.rstrip("/\\")))[0], model_shape(model).name}
    if not isinstance(name, str) or name not in names:
        raise TemplateError(node.sql()[:80], f"AI_COMPLETE names model {name!r}, but the installed model is "
                                             f"{model!r}; write {model!r} (the only model this session runs)")


def schema_of(node, where) -> str:
    """Spark's JSON (text) of the struct an ai_extract schema argument describes: DDL text or an array of names."""
    if isinstance(node, exp.Array):
        return _strings_struct(_names(node, where), where)
    if isinstance(node, exp.Literal) and node.is_string:
        return struct_json(node.this, where)
    raise TemplateError(where.sql()[:80], "ai_extract expected its schema as DDL text ('name STRING, age INT') "
                                          f"or array('name', 'city'), got {node.sql()[:60]}")


def bigquery_schema(text: str, where) -> str:
    """BigQuery's output_schema ('name STRING, age INT64') as Spark's JSON of the struct."""
    try:
        spark_sql = exp.DataType.build(f"STRUCT<{text}>", dialect="bigquery").sql("spark")
    except (sqlglot.errors.SqlglotError, ValueError) as e:
        raise TemplateError(where.sql()[:80], f"output_schema {text!r} does not parse: {e}") from None
    return struct_json(spark_sql[len("STRUCT<"):-1], where)


def snowflake_format(node, where) -> tuple[str, str | None]:
    """(schema JSON, instruction) of Snowflake's responseFormat: names, {field: question} or a JSON schema."""
    if isinstance(node, exp.Array):
        return _strings_struct(_names(node, where), where), None
    pairs = {_key(e.this): e.expression for e in node.expressions} if isinstance(node, exp.Struct) else None
    if not pairs:
        raise TemplateError(where.sql()[:80], "AI_EXTRACT expected responseFormat as ['field', ...], "
                                              f"{{'field': 'question', ...}} or {{'schema': ...}}, got {node.sql()[:60]}")
    if set(pairs) == {"schema"}:
        return checked(json.dumps(_json_schema_type(_value(pairs["schema"]), where)), where), None
    questions = {k: _value(v) for k, v in pairs.items()}
    text = "\n".join(f"{k}: {q}" for k, q in questions.items() if isinstance(q, str) and q.strip())
    return _strings_struct(list(questions), where), text or None


def struct_json(ddl: str, where) -> str:
    """Spark's JSON of the struct of ``ddl``, checked against what the grammar can express."""
    from pyspark.sql.types import StructType

    try:
        struct = StructType.fromDDL(ddl)
    except Exception as e:  # noqa: BLE001 - Spark's parse error, said in one line
        raise TemplateError(where.sql()[:80], f"ai_extract: schema {ddl!r} is not a struct Spark can parse: "
                                              f"{str(e).strip().splitlines()[0][:200]}") from None
    return checked(json.dumps(struct.jsonValue()), where)


def checked(schema: str, where) -> str:
    """``schema`` (JSON text), refused naming the call when a field's type has no grammar."""
    from gpu_worker.grammar import check_fields

    try:
        check_fields({f["name"]: f["type"] for f in json.loads(schema)["fields"]})
    except ValueError as e:
        raise TemplateError(where.sql()[:80], f"ai_extract: {e}") from None
    return schema


def schema_ddl(schema: str) -> str:
    """The DDL text of a schema given as Spark's JSON ("`name` string, `age` int")."""
    return ", ".join(f"`{f['name']}` {type_ddl(f['type'])}" for f in json.loads(schema)["fields"])


def _strings_struct(names, where) -> str:
    if not names or len(set(names)) != len(names):
        raise TemplateError(where.sql()[:80], f"ai_extract expected distinct field names, got {names}")
    fields = [{"name": n, "type": "string", "nullable": True, "metadata": {}} for n in names]
    return json.dumps({"type": "struct", "fields": fields})


def _names(node, where) -> list:
    names = [_value(e) for e in node.expressions]
    if not all(isinstance(n, str) and n for n in names):
        raise TemplateError(where.sql()[:80], f"ai_extract expected field names as strings, got {node.sql()[:60]}")
    return names


def _json_schema_type(s, where):
    """A JSON schema's type as Spark's JSON type (object -> struct, array -> array, scalars)."""
    t = s.get("type") if isinstance(s, dict) else None
    if t == "object":
        props = s.get("properties") or {}
        if not props:
            raise TemplateError(where.sql()[:80], "AI_EXTRACT: a JSON schema object expected 'properties'")
        return {"type": "struct", "fields": [{"name": k, "type": _json_schema_type(v, where), "nullable": True,
                                              "metadata": {}} for k, v in props.items()]}
    if t == "array":
        return {"type": "array", "elementType": _json_schema_type(s.get("items") or {"type": "string"}, where),
                "containsNull": True}
    if t in JSON_TYPES:
        return JSON_TYPES[t]
    raise TemplateError(where.sql()[:80], f"AI_EXTRACT: JSON schema type {t!r}; expected object, array, "
                                          f"{', '.join(JSON_TYPES)}")


def _key(node) -> str:
    return node.this if isinstance(node, exp.Literal) else node.name


def _value(node):
    """A literal, an array or an object of literals as Python values."""
    if isinstance(node, exp.Array):
        return [_value(e) for e in node.expressions]
    if isinstance(node, exp.Struct):
        return {_key(e.this): _value(e.expression) for e in node.expressions}
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else float(node.this)
    if isinstance(node, exp.Boolean):
        return node.this
    return node.sql()
