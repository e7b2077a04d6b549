"""Executor side of the Spark integration: engine lookup, GPU binding, Arrow task functions.

Spark pickles the task functions of this module by reference together with
plain data made on the driver (an engine configuration as a dict, a spec of
:mod:`gpu_worker.partition`, an accumulator). The engine itself is never
pickled or captured: each Python worker builds it on first use and keeps it in
a module-level cache keyed by the configuration (like
``pyspark.ml.functions.predict_batch_udf``), so later tasks and batches of the
same worker reuse the loaded model and its prefix cache.

On an executor with GPUs a task uses the one Spark assigned to it
(``TaskContext.resources()['gpu']``); without GPUs it runs on the CPU.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np
import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

if TYPE_CHECKING:
    from gpu_worker import partition as part

GPU_DEVICES = ("cuda", "gpu", "auto")

# ----------------------------------------------------------------- engines


def engine_conf(model: str = "smollm2-135m", device: str = "cpu", **conf) -> dict:
    """The engine configuration sent to executors, checked on the driver.

    ``device`` may be 'cpu', 'cuda', 'cuda:N' or 'auto' ('cuda' and 'auto' take
    the GPU Spark assigns to each task). Other keys are EngineConfig fields.

    >>> engine_conf(device="cpu", token_budget=512)["token_budget"]
    512
    """
    from gpu_worker.config import EngineConfig

    fields = set(EngineConfig.__dataclass_fields__)
    unknown = sorted(set(conf) - fields)
    if unknown:
        raise TypeError(f"unknown engine setting(s) {unknown}; expected EngineConfig fields {sorted(fields)}")
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
    return "cuda"


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


# ----------------------------------------------------------------- reports


class ReportParam(AccumulatorParam):
    """Adds the per-task engine counters and per-stage rows of a query run."""

    def zero(self, value):
        return {"tasks": 0, "counters": {}, "stages": {}}

    def addInPlace(self, a, b):
        a = a or self.zero(None)
        a["tasks"] = a.get("tasks", 0) + b.get("tasks", 0)
        for k, v in b.get("counters", {}).items():
            a["counters"][k] = a["counters"].get(k, 0) + v
        for name, s in b.get("stages", {}).items():
            t = a["stages"].setdefault(name, {"evaluated": 0, "passed": 0})
            t["evaluated"] += s["evaluated"]
            t["passed"] += s["passed"]
        return a


def _where(column_hint: str):
    from pyspark import TaskContext

    ctx = TaskContext.get()
    p = ctx.partitionId() if ctx is not None else 0
    return lambda i: f"row {i} of partition {p} ({column_hint})"


def _report(rec: part.Recorder, acc) -> None:
    if acc is not None:
        acc.add({"tasks": 1, **rec.as_dict()})


# ----------------------------------------------------------------- mapInArrow tasks


def _task(run_name: str, where: str, conf: dict, spec, acc, batches) -> Iterator[pa.RecordBatch]:
    """Run one gpu_worker.partition entry point over a task's batches; report its counters."""
    from gpu_worker import partition as part

    rec = part.Recorder()
    try:
        yield from getattr(part, run_name)(get_engine(conf), batches, spec, rec, _where(where))
    finally:
        _report(rec, acc)


def pipeline_task(conf: dict, spec: part.PipelineSpec, acc, batches) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: AND chain of ai_if, then score / classify columns."""
    return _task("run_pipeline", "position after sorting", conf, spec, acc, batches)


def join_cross_task(conf: dict, spec: part.JoinSpec, acc, batches) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: anchors x the attached partner list, matching pairs out."""
    return _task("run_join_cross", "anchor position", conf, spec, acc, batches)


def join_pairs_task(conf: dict, spec: part.JoinSpec, acc, batches) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: candidate pairs sorted by anchor, matching pairs out."""
    return _task("run_join_pairs", "pair position", conf, spec, acc, batches)


# ----------------------------------------------------------------- SQL function bodies


def udf_if(conf, *args):  # no annotations: arrow_udf reads them as a UDF kind
    """Arrow UDF body of ``ai_if(template, col0[, col1 ...])``: TRUE when the margin > 0."""
    margins = _udf_margins(conf, "ai_if", args)
    return pa.array(margins > 0, pa.bool_(), mask=np.isnan(margins))


def udf_score(conf, *args):
    """Arrow UDF body of ``ai_score(template, col0[, ...])``: sigmoid of the margin."""
    margins = _udf_margins(conf, "ai_score", args)
    return pa.array(1.0 / (1.0 + np.exp(-margins)), pa.float64(), mask=np.isnan(margins))


def udf_classify(conf, *args):
    """Arrow UDF body of ``ai_classify([template,] col0[, ...], array(labels))``."""
    if len(args) < 2 or not (pa.types.is_list(args[-1].type) or pa.types.is_large_list(args[-1].type)):
        last = args[-1].type if args else "missing"
        raise TypeError("ai_classify expected (column, array('a', 'b', ...)) or (template, column, ..., "
                        f"array(...)); the last argument is {last}")
    if len(args) == 2:
        template = pa.array(["{0}"] * len(args[0]), pa.string())
        args = (template, args[0], args[1])
    labels, template, cols = args[-1].to_pylist(), args[0], args[1:-1]
    _check_strings("ai_classify", template, cols)
    out = [None] * len(template)
    eng = get_engine(conf)
    for (text, labs), rows in _groups(template.to_pylist(), [tuple(x or ()) for x in labels]).items():
        if len(labs) < 2:
            raise ValueError(f"ai_classify: expected at least 2 labels, got {list(labs)} (row {rows[0]})")
        _, instruction = udf_prompt(text, len(cols))
        docs = _udf_docs(cols, rows)
        args = (docs, list(labs)) + (() if text.strip() == "{0}" else (instruction,))  # else the default
        idx, _ = _udf_call("ai_classify", lambda: eng.classify(*args), len(cols), rows, docs)
        for r, k in zip(rows, idx):
            out[r] = labs[k] if k >= 0 else None
    return pa.array(out, pa.string())


def udf_prompt(template: str, n_cols: int) -> tuple:
    """(document names, question) of a SQL-function template over ``n_cols`` columns.

    One column: ``{0}`` reads "the document". Several: the document is lines
    ``input 1: value`` ... and ``{i}`` reads "input i+1".

    >>> udf_prompt('Is {0} a complaint?', 1)
    (('input 1',), 'Is the document a complaint?')
    >>> udf_prompt('Does {0} fit {1}?', 2)[1]
    'Does input 1 fit input 2?'
    """
    from quail_spark.plan import PLACEHOLDER, placeholders

    names = tuple(f"input {i + 1}" for i in range(n_cols))
    used = placeholders(template)
    bad = sorted({i for i in used if i >= n_cols})
    if bad or len(set(used)) != n_cols:
        raise ValueError(f"template {template!r}: expected placeholders {{0}}..{{{n_cols - 1}}} for its "
                         f"{n_cols} column argument(s), found {sorted(set(used)) or 'none'}")
    one = n_cols == 1
    return names, PLACEHOLDER.sub(lambda m: "the document" if one else names[int(m.group(1))], template)


def _udf_margins(conf: dict, fn: str, args) -> np.ndarray:
    if len(args) < 2:
        raise TypeError(f"{fn} expected (template, column[, column ...]), got {len(args)} argument(s)")
    template, cols = args[0], args[1:]
    _check_strings(fn, template, cols)
    out = np.full(len(template), np.nan)
    eng = get_engine(conf)
    for text, rows in _groups(template.to_pylist()).items():
        _, question = udf_prompt(text, len(cols))
        docs = _udf_docs(cols, rows)
        out[rows] = _udf_call(fn, lambda: eng.filter(docs, [question])[:, 0], len(cols), rows, docs)
    return out


def _udf_call(fn: str, call, n_cols: int, rows, docs):
    """An engine call of a SQL function; a too long prompt names its row in the batch."""
    from gpu_worker.partition import Doc, engine_call

    names = tuple(f"argument {i + 2}" for i in range(n_cols))
    return engine_call(call, Doc(names, names), rows, docs, _where(f"position in an Arrow batch of {fn}"))


def _udf_docs(cols, rows) -> list:
    from gpu_worker.partition import Doc

    names = tuple(f"input {i + 1}" for i in range(len(cols)))
    table = pa.table({f"c{i}": c for i, c in enumerate(cols)})
    return Doc(tuple(table.column_names), names).texts(table, rows)


def _check_strings(fn, template, cols) -> None:
    if not pa.types.is_string(template.type) and not pa.types.is_large_string(template.type):
        raise TypeError(f"{fn}: argument 1 (the template) must be a string, got {template.type}")
    if template.null_count:
        raise ValueError(f"{fn}: the template is NULL in {template.null_count} row(s); expected a text")
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
