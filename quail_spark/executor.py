"""Executor side of the Spark integration: engine lookup, GPU binding, Arrow UDF bodies.

Spark pickles the functions of this module by reference together with plain
data made on the driver (an engine configuration as a dict, the session's
metrics folder). The engine itself is never
pickled or captured: each Python worker builds it on first use and keeps it in
a module-level cache keyed by the configuration (like
``pyspark.ml.functions.predict_batch_udf``), so later tasks and batches of the
same worker reuse the loaded model and its prefix cache.

The SQL functions (ai_if, ai_filter, ai_score, ai_classify) and the internal
UDFs of the optimizer rules (quail_chain, quail_join, quail_join_score, quail_eval) evaluate through
:mod:`gpu_worker.ai_calls`: one prompt rendering and one NULL rule for all.

A task asking for 'cuda' uses the GPU Spark assigned to it
(``TaskContext.resources()['gpu']``); a task without one is an error, not a
silent fall-back to the CPU ('auto' falls back).
"""
from __future__ import annotations

import dataclasses
import math
import operator
import os
import re
import time

import numpy as np
import pyarrow as pa

from quail_spark.decode_args import decode_args
from quail_spark.specs import parse

GPU_DEVICES = ("cuda", "gpu", "auto")

# ----------------------------------------------------------------- engines


def engine_conf(model: str = "smollm2-135m", device: str = "cpu", **conf) -> dict:
    """The engine configuration sent to executors, checked on the driver.

    ``device`` may be 'cpu', 'cuda', 'cuda:N' or 'auto' ('cuda' and 'auto' take
    the GPU Spark assigns to each task). Other keys are EngineConfig fields.

    >>> engine_conf(device="cpu", token_budget=512)["token_budget"]
    512
    """
    from gpu_worker.config import PRESETS, EngineConfig

    fields = set(EngineConfig.__dataclass_fields__)
    unknown = sorted(set(conf) - fields)
    if unknown:
        raise TypeError(f"unknown engine setting(s) {unknown}; expected EngineConfig fields {sorted(fields)}")
    if not isinstance(device, str) or not re.fullmatch(r"cpu|auto|gpu|cuda(:\d+)?", device):
        raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' (the GPU Spark assigns each task), "
                         "'cuda:N' or 'auto'")
    if not isinstance(model, str) or (model not in PRESETS and not re.search(r"[/\\.~]", model)
                                      and not os.path.exists(model)):
        # a name that is no preset and no path (a path may exist on the executors only: theirs to check)
        raise ValueError(f"model {model!r} is neither a preset ({', '.join(PRESETS)}) nor a path (a folder with "
                         "config.json and *.safetensors, or a .gguf file)")
    out = {"model": model, "device": device, **conf}
    EngineConfig(**{**out, "device": "cpu"})  # validates every other field now, on the driver
    return out


def task_device(device: str) -> str:
    """The torch device of this task: the GPU Spark assigned, else ``device`` as given."""
    if device not in GPU_DEVICES:
        return device
    addr = _task_gpu()
    if addr is not None:
        return f"cuda:{addr}"
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if _in_task():
        raise RuntimeError(
            f"device={device!r}, but Spark assigned this task no GPU (TaskContext.resources()['gpu'] is "
            "empty); give tasks a GPU (spark.executor.resource.gpu.amount=1, spark.task.resource.gpu.amount=1 "
            "and a discovery script) or use device='cpu' or 'auto'")
    return "cuda"


def session_device(spark, device: str) -> str:
    """``device`` as the tasks of this session should read it.

    In local mode Spark assigns no GPUs to tasks (no resource scheduling), so
    'cuda' there means this machine's GPU: ``cuda:0``. Elsewhere 'cuda' stays
    and each task takes the GPU Spark assigned it (:func:`task_device`).

    >>> session_device(None, "cpu")
    'cpu'
    """
    if device not in ("cuda", "gpu") or spark is None:
        return device
    master = spark.conf.get("spark.master", "") or ""
    return "cuda:0" if master.startswith("local") and not master.startswith("local-cluster") else device


def _in_task() -> bool:
    from pyspark import TaskContext

    return TaskContext.get() is not None


def _task_gpu() -> str | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None
    gpu = ctx.resources().get("gpu")
    return gpu.addresses[0] if gpu is not None and gpu.addresses else None


def get_engine(conf: dict):
    """This worker's engine for ``conf`` on this task's device (gpu_worker caches one per config)."""
    from gpu_worker import EngineConfig
    from gpu_worker import get_engine as cached_engine

    return cached_engine(EngineConfig(**{**conf, "device": task_device(conf["device"])}))


# ----------------------------------------------------------------- SQL function bodies
#
# Every body takes (conf, run, *arrow columns): conf is the engine configuration,
# run holds plain data of the session ({"metrics_dir": ...}). Each evaluates
# through gpu_worker.ai_calls (one rendering, one NULL rule) and appends its
# counter deltas to the session's metrics folder (quail_spark.metrics).


def udf_if(conf, run, *args):  # no annotations: arrow_udf reads them as a UDF kind
    """Arrow UDF body of ``ai_if(template, col0[, col1 ...][, hint])``: TRUE when the margin > 0."""
    return pa.array(_per_template(conf, run, "if", args), pa.bool_())


def udf_score(conf, run, *args):
    """Arrow UDF body of ``ai_score(template, col0[, ...][, hint])``: P(yes) = sigmoid of the margin."""
    return pa.array(_per_template(conf, run, "score", args), pa.float64())


def udf_classify(conf, run, *args):
    """Arrow UDF body of ``ai_classify([template,] col0[, ...], array(labels)[, hint])``."""
    return pa.array(_per_template(conf, run, "classify", args), pa.string())


def udf_generate(conf, run, *args):
    """Arrow UDF body of ``ai_generate(template, col0[, col1 ...][, hint])``: the model's greedy text
    (hint keys ``max_tokens``, default 128, and ``stop``, a string or an array of strings)."""
    return pa.array(_per_template(conf, run, "generate", args), pa.string())


def udf_summarize(conf, run, *args):
    """Arrow UDF body of ``ai_summarize(col[, max_words])``: a summary of at most max_words (default 50) words."""
    return pa.array(_per_template(conf, run, "summarize", args), pa.string())


def udf_extract(conf, run, *args):
    """Arrow UDF body of ``quail_extract(col, schema, instruction[, hint])``, which the Spark extension's
    ``ai_extract`` reads with ``from_json``: per row the JSON object of the schema's fields (``schema`` is
    Spark's JSON of the struct type; hint key ``max_tokens`` per field, default 32)."""
    from gpu_worker.ai_calls import as_json

    return pa.array([as_json(x) for x in _per_template(conf, run, "extract", args)], pa.string())


def udf_chain(conf, run, spec, doc):
    """Arrow UDF body of the internal ``quail_chain(spec, document)`` made by the optimizer rule.

    ``spec`` is JSON ``{"calls": [{"template": ..., "selectivity": ..., "rank": ...}, ...]}``
    (the AI predicates of one filter over this document, in evaluation order).
    Returns their AND: FALSE at the first FALSE (the rest is not evaluated,
    the document's KV stays while its next predicate runs: ``Engine.chain``),
    NULL for a NULL, empty or whitespace-only document.
    """
    from gpu_worker.ai_calls import Call, is_null
    from gpu_worker.prompts import PromptTooLong

    _check_strings("quail_chain", spec, [doc])
    calls = [Call("if", c.template, 1) for c in parse("chain", spec[0].as_py()).calls]
    docs = doc.to_pylist()
    rows = [r for r, d in enumerate(docs) if not is_null(d)]
    out = [None] * len(docs)
    with _reporting(conf, run, spec, rows_out="passed", kind="chain") as eng:
        try:
            m = eng.chain([docs[r] for r in rows], [c.question for c in calls], short_circuit=True)
        except PromptTooLong as e:
            where = _where("ai_if (fused by quail_chain)", rows, 1, [[docs[r] for r in rows]])
            advice = e.advice("set on_overflow='truncate'")
            raise ValueError(f"{where(e.row)}: prompt has {e.n_tokens} tokens, the model's context holds "
                             f"{e.limit}; {advice}") from None
    for r, row in zip(rows, m):
        out[r] = bool(np.all(row > 0))  # NaN (not evaluated after a FALSE) is not > 0
    return pa.array(out, pa.bool_())


_SCORE_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}  # a join spec's score_bounds


def spark_order(x: float) -> tuple:
    """A double's place in Spark SQL's order, for comparisons the rules move out of Spark: NaN above every
    double (+Infinity included) and equal to NaN; -0.0 equals 0.0.

    >>> spark_order(float("nan")) > spark_order(float("inf")), spark_order(float("nan")) == spark_order(float("nan"))
    (True, True)
    """
    return (1, 0.0) if math.isnan(x) else (0, x)


def udf_join(conf, run, spec, *cols):
    """Arrow UDF body of the internal ``quail_join(spec, col0, col1[, ...])`` made by the join rule.

    ``spec`` is JSON ``{"template": ..., "anchor_arg": ..., ...}`` (``anchor_arg``: the
    column the anchor hint names, else absent); the pairs arrive sorted by the
    document placed first. The answer of ``ai_if(template, col0, col1...)``, or, when the
    spec has ``score_bounds`` (``[[op, x], ...]``: the join's ON compared ``ai_score(...)``
    with ``x`` by ``>``, ``>=``, ``<`` or ``<=``, once or more, as a BETWEEN does), of those
    comparisons, all of them, on the score ``ai_score`` gives.
    """
    s, got = _join_answers(conf, run, "quail_join", spec, cols)
    bounds = s.score_bounds
    if bounds is not None:
        tests = [(_SCORE_OPS[op], spark_order(float(x))) for op, x in bounds]
        got = [None if v is None else all(compare(spark_order(v), x) for compare, x in tests) for v in got]
    return pa.array(got, pa.bool_())


def udf_join_score(conf, run, spec, *cols):
    """Arrow UDF body of the internal ``quail_join_score(spec, col0, col1[, ...])`` made by the join rule for
    an ON that compares ``ai_score(...)`` with a column (``> t.threshold``): the score ``ai_score`` gives each
    pair (NULL for a NULL, empty or whitespace-only value), Spark making the comparison. ``spec`` as
    quail_join's; the pairs arrive sorted by the document placed first."""
    return pa.array(_join_answers(conf, run, "quail_join_score", spec, cols)[1], pa.float64())


def _join_answers(conf, run, name: str, spec, cols) -> tuple:
    """(spec, answers) of the pairs of an AI join's internal call: ai_score's scores for quail_join_score
    and for a quail_join spec with ``score_bounds``, else ai_if's answers."""

    from gpu_worker.ai_calls import Call, evaluate

    _check_strings(name, spec, cols)
    s = parse(name.removeprefix("quail_"), spec[0].as_py())
    kind = "score" if name == "quail_join_score" or s.score_bounds is not None else "if"
    call = Call(kind, s.template, len(cols), anchor=s.anchor_arg)
    rows = list(range(len(spec)))
    with _reporting(conf, run, spec, rows_out="passed", kind=name.removeprefix("quail_")) as eng:
        values = [c.to_pylist() for c in cols]
        return s, evaluate(eng, call, values, where=_where(f"ai_{kind} (AI join, {name})", rows, len(cols), values))


def udf_match(conf, run, spec, *cols):
    """Arrow UDF body of the internal ``quail_match(spec, col0s, col1s[, ...])`` of outer, semi and anti AI joins.

    ``spec`` is JSON ``{"template": ..., "anchor_arg": ...}`` (as quail_join's), or ``{"template_arg": true, "anchor_arg": ...}``
    when the first column holds each pair's template (read from a column); each column is, per preserved row, the list
    of the call's argument values over that row's partner rows (equal lengths). Returns
    per row the list of the answers of ``ai_if(template, col0, col1, ...)`` on each pair
    (NULL for a pair with a NULL, empty or whitespace-only value): all pairs of the batch
    are evaluated together. With ``"kind": "score"`` in the spec (``quail_match_score``, an
    ``ai_score`` call in the condition), the answers are the scores ``ai_score`` gives.
    """
    from gpu_worker.ai_calls import Call, evaluate

    for i, c in enumerate(cols):
        if not (pa.types.is_list(c.type) or pa.types.is_large_list(c.type)):
            raise TypeError(f"quail_match: argument {i + 2} must be a list of documents, got {c.type}")
    flat = [c.flatten() for c in cols]  # respects slicing; a NULL list contributes nothing
    _check_strings("quail_match", spec, flat)
    lengths = np.nan_to_num(cols[0].value_lengths().to_numpy(zero_copy_only=False).astype(float)).astype(np.int64)
    if any(len(f) != int(lengths.sum()) for f in flat):
        raise ValueError("quail_match: the argument lists of a row differ in length")
    s = parse("match", spec[0].as_py())
    kind = s.kind
    fn = f"ai_{kind} (outer, semi or anti AI join, quail_match)"
    if s.template_arg:  # each pair's template comes first: the pairs read as a call's rows
        got = _per_template(conf, run, kind, flat, shown_as=fn, anchor=s.anchor_arg)
    else:
        call = Call(kind, s.template, len(cols), anchor=s.anchor_arg)
        pairs = list(range(len(flat[0])))
        with _reporting(conf, run) as eng:
            values = [f.to_pylist() for f in flat]
            got = evaluate(eng, call, values, where=_where(fn, pairs, len(cols), values))
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32())
    return pa.ListArray.from_arrays(offsets, pa.array(got, pa.float64() if kind == "score" else pa.bool_()))


def udf_eval(conf, run, spec, *args):
    """Arrow UDF body of the internal ``quail_eval(spec, arg0, arg1, ...)`` made by the rule QuailFuseCalls.

    ``spec`` is JSON ``{"calls": [{"fn": "ai_score", "args": [0, 1]}, ...]}``: the AI calls of
    one plan node over one document, each with the positions of its arguments among ``args``.
    Each call is read as its own UDF reads it and answered as it would be alone (the same
    prompts, its NULL rule on its own columns); the one-column questions over the document
    are asked together, its KV computed once. Returns a struct of three arrays per row,
    ``flags`` (ai_if), ``scores`` (ai_score), ``labels`` (ai_classify): one element per
    call of that kind, in spec order.
    """
    from gpu_worker.ai_calls import FUNCTIONS, as_json, evaluate_together

    _check_strings("quail_eval", spec, [])
    calls = parse("eval", spec[0].as_py()).calls
    items, wheres, places = [], [], []
    for k, c in enumerate(calls):
        fn = _public(c.fn)
        for call, rows, values in _parsed(fn, [args[i] for i in c.args]):
            items.append((call, values))
            wheres.append(_where(f"{fn} (fused by quail_eval)", rows, call.n_cols, values))
            places.append((k, rows))
    results = [[None] * len(spec) for _ in calls]
    with _reporting(conf, run, spec, kind="eval") as eng:
        for (k, rows), got in zip(places, evaluate_together(eng, items, wheres)):
            for r, x in zip(rows, got):
                results[k][r] = x
    by_field: dict = {}
    for c, res in zip(calls, results):
        kind = FUNCTIONS[_public(c.fn)]
        by_field.setdefault(_FIELD_OF[kind], []).append([as_json(x) for x in res] if kind == "extract" else res)
    arrays = [pa.array([list(row) for row in zip(*by_field[name])] if name in by_field else [[]] * len(spec),
                       pa.list_(t)) for name, _, t in EVAL_FIELDS]
    return pa.StructArray.from_arrays(arrays, names=[name for name, _, _ in EVAL_FIELDS])


def _public(fn: str) -> str:
    """The SQL function of a call in a quail_eval spec: ai_extract for its registered UDF (EXTRACT_UDF)."""
    from gpu_worker.ai_calls import EXTRACT_UDF

    return "ai_extract" if fn.lower() == EXTRACT_UDF else fn.lower()


# quail_eval's struct, as QuailFuseCalls reads it: (field, the kinds of call it holds, element type);
# an ai_extract's element is the JSON text of its object, which the plan's from_json reads
EVAL_FIELDS = (("flags", ("if",), pa.bool_()), ("scores", ("score",), pa.float64()),
               ("labels", ("classify",), pa.string()), ("texts", ("generate", "summarize"), pa.string()),
               ("jsons", ("extract",), pa.string()))
_FIELD_OF = {kind: name for name, kinds, _ in EVAL_FIELDS for kind in kinds}
EVAL_TYPE = ("struct<flags: array<boolean>, scores: array<double>, labels: array<string>, texts: array<string>, "
             "jsons: array<string>>")


def _per_template(conf, run, kind: str, args, shown_as: str | None = None, anchor: int | None = None) -> list:
    """Per row, the answer of ``ai_<kind>(*args)``, rows grouped by template; ``shown_as`` names the call
    in errors (default ``ai_<kind>``); ``anchor``: the column placed first when ``args`` carry no hint (a
    quail_match's pairs; else the hint's ``anchor_arg``)."""
    from gpu_worker.ai_calls import evaluate

    out = [None] * len(args[0]) if args else []
    fn = f"ai_{kind}"
    shown = shown_as or fn
    with _reporting(conf, run) as eng:
        for call, rows, values in _parsed(fn, args, shown, anchor):
            got = evaluate(eng, call, values, where=_where(shown, rows, call.n_cols, values))
            for r, x in zip(rows, got):
                out[r] = x
    return out


def _parsed(fn: str, args, shown_as: str | None = None, anchor: int | None = None) -> list:
    """The calls of one AI function's Arrow arguments: (Call, rows, column values of those rows)
    per distinct template (and labels); ``shown_as`` names the call in errors (default ``fn``);
    ``anchor`` places that column first when the arguments carry no ``anchor_arg`` hint."""
    from gpu_worker.ai_calls import DECODE_KINDS, FUNCTIONS, is_null

    kind = FUNCTIONS[fn]
    if kind != "classify" and _anchor_arg(args) is not None:
        anchor = _anchor_arg(args)
    decode = None
    if kind in DECODE_KINDS:
        args, decode = decode_args(fn, kind, args)
    args = _strip_hint(args)
    labels = [()] * (len(args[0]) if args else 0)
    if kind == "classify":
        if len(args) < 2 or not (pa.types.is_list(args[-1].type) or pa.types.is_large_list(args[-1].type)):
            last = args[-1].type if args else "missing"
            raise TypeError("ai_classify expected (column, array('a', 'b', ...)) or (template, column, ..., "
                            f"array(...)); the last argument is {last}")
        if len(args) == 2:
            args = (pa.array(["{0}"] * len(args[0]), pa.string()), args[0], args[1])
        labels, args = [tuple(x or ()) for x in args[-1].to_pylist()], args[:-1]
    elif len(args) < 2:
        raise TypeError(f"{fn} expected (template, column[, column ...][, map hint]), got {len(args)} argument(s)")
    template, cols = args[0], args[1:]
    _check_strings(fn, template, cols)
    values = [c.to_pylist() for c in cols]
    # a template read from a column may differ per row; a NULL, empty or blank one gives NULL (the NULL rule)
    return [(_call(shown_as or fn, kind, text, len(cols), rows, labs, anchor, decode), rows,
             [[v[r] for r in rows] for v in values])
            for (text, labs), rows in _groups(template.to_pylist(), labels).items() if not is_null(text)]


def _call(fn: str, kind: str, text: str, n_cols: int, rows, labels=(), anchor=None, decode=None):
    """The Call of a template; a template that does not fit its columns names the first row it came from."""
    from gpu_worker.ai_calls import Call

    try:
        if decode is not None:  # a decode call: its hints, schema, instruction, max_words
            return dataclasses.replace(Call.of(f"ai_{kind}", text, ["?"] * n_cols, anchor=anchor, **decode), args=())
        return Call(kind, text, n_cols, labels, anchor=anchor)
    except ValueError as e:
        raise ValueError(f"{_where(fn, rows, n_cols)(0)}: {e}") from None


class _reporting:
    """The task's engine; on exit the counters it added go to the session's metrics folder, under the
    operator's id too where the batch is an operator the rules planned (``spec``: its spec column;
    ``rows_out``: 'passed' when the rows out are those the last stage passed, else the rows in)."""

    def __init__(self, conf: dict, run: dict, spec=None, rows_out: str = "rows", kind: str = ""):
        self.conf, self.run, self.spec, self.rows_out, self.kind = conf, run, spec, rows_out, kind

    def __enter__(self):
        from gpu_worker.counters import metered

        self.eng = get_engine(self.conf)
        self.meter = metered(self.eng.stats).__enter__()
        self.t0, self.started = time.perf_counter(), time.time()
        return self.eng

    def __exit__(self, kind, err, tb):
        import json

        from quail_spark.budget import stop_if_over
        from quail_spark.metrics import append, record
        from quail_spark.operators import actual_line
        from quail_spark.specs import budget

        self.meter.__exit__(kind, err, tb)
        d = record(self.meter, errored_rows=int(err is not None))
        spec = json.loads(self.spec[0].as_py()) if self.spec is not None and len(self.spec) else {}
        if spec:
            stages = self.meter.stages
            rows = len(self.spec)
            passed = int(stages[-1].get("passed", 0)) if self.rows_out == "passed" and stages else rows
            d["ops"] = actual_line(self.kind, spec, rows, passed, d, time.perf_counter() - self.t0)
            d["span"] = {op: [self.started, time.time()] for op in d["ops"]}  # the operator's wall: metrics.spans
        limit = budget(spec)
        if limit is not None:
            d["query"] = limit.query
        append(self.run.get("metrics_dir"), d)
        if limit is not None and err is None:
            stop_if_over(self.run.get("metrics_dir"), limit)
        return False


def _where(fn: str, rows, n_cols: int = 1, values=None):
    """Names a row of an Arrow batch (its position, the task's partition), the document argument(s) and the
    start of the row's first document (a UDF sees values, not the columns' names)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    p = ctx.partitionId() if ctx is not None else 0
    cols = "argument 2" if n_cols == 1 else f"arguments 2..{n_cols + 1}"

    def where(i):
        doc = values[0][i] if values and i < len(values[0]) else None
        start = f", starting {doc[:40]!r}{'...' if len(doc) > 40 else ''}" if isinstance(doc, str) else ""
        return f"{fn}: row {rows[i]} of an Arrow batch of partition {p} (the document in {cols}{start})"
    return where


def _anchor_arg(args):
    """The column position the ``anchor`` hint names (``anchor_arg``, resolved by the analyzer), or None."""
    hint = args[-1] if args else None
    if hint is None or not pa.types.is_struct(hint.type) or hint.type.get_field_index("anchor_arg") < 0:
        return None
    values = hint.field("anchor_arg")
    return int(values[0].as_py()) if len(values) and values[0].is_valid else None


def _strip_hint(args):
    """Drop the optional trailing hint ``map('selectivity', 0.25, 'anchor', 'n')`` (read by the optimizer)."""
    if args and (pa.types.is_map(args[-1].type) or pa.types.is_struct(args[-1].type)):
        return args[:-1]
    return args


def _check_strings(fn, template, cols) -> None:
    if not pa.types.is_string(template.type) and not pa.types.is_large_string(template.type):
        raise TypeError(f"{fn}: argument 1 (the template) must be a string, got {template.type}")
    for i, c in enumerate(cols):
        if not (pa.types.is_string(c.type) or pa.types.is_large_string(c.type) or pa.types.is_null(c.type)):
            raise TypeError(f"{fn}: argument {i + 2} is a document and must be a string column, got "
                            f"{c.type}; cast it with CAST(... AS STRING)")


def _groups(*keys) -> dict:
    """Row indices per distinct key (rows with the same template are evaluated together)."""
    out: dict = {}
    for r, k in enumerate(zip(*keys) if len(keys) > 1 else keys[0]):
        out.setdefault(k, []).append(r)
    return out
