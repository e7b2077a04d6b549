"""One enrichment run: read, find the rows to compute, evaluate them, commit atomically, report.

    >>> from quail_spark.enrich import load_spec, run            # doctest: +SKIP
    >>> report = run(load_spec("notes.json"), spark)             # doctest: +SKIP
    >>> report["rows_enriched"] + report["rows_skipped"] + report["rows_errored"] == report["rows_read"]  # doctest: +SKIP
    True
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import os
import re
import shutil
import sys
import tempfile
import time
import uuid

from gpu_worker.counters import REPORTED
from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, _parse_datatype_string

from quail_spark import executor
from quail_spark.errors import error_line
from quail_spark.enrich import guard
from quail_spark.enrich import incremental as inc
from quail_spark.enrich.ai_stage import CountersParam, StagePlan, enrich_task
from quail_spark.enrich.guard import EnrichFailed
from quail_spark.enrich.report import summary, write
from quail_spark.enrich.spec import Spec, SpecError

ROWS_PER_TASK = 2000
GPU_DEVICES = ("cuda", "gpu")


def dry_run(spec: Spec, spark, out=None) -> dict:
    """What ``run`` would compute (rows, columns, tokens, seconds), printed; nothing is written or locked."""
    from quail_spark.enrich import preview

    spec, inp = input_rows(spark, spec)
    prev, state = guard.checked_previous(spark, sink_for(spec), spec.key, [])
    work = inc.work_rows(spec, inp, prev, state).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        est = preview.estimate(spec, spark, work)
    finally:
        work.unpersist()
    print(preview.text(est), file=out or sys.stdout, flush=True)
    return est


def read_input(spark, spec: Spec):
    """The input as a DataFrame: a Parquet / JSON lines / CSV path, or a catalog table.

    A path or table that does not exist is a :class:`SpecError` naming it.
    """
    from pyspark.errors import AnalysisException

    src = spec.input
    low = src.lower().rstrip("/")
    try:
        if low.endswith((".json", ".jsonl")):
            return spark.read.json(spec.path(src))
        if low.endswith(".csv"):
            return spark.read.option("header", "true").option("inferSchema", "true").csv(spec.path(src))
        if low.endswith(".parquet") or "/" in src:
            return spark.read.parquet(spec.path(src))
        return spark.table(src)
    except AnalysisException as e:
        raise SpecError(f"input {src!r}: {error_line(e)}") from None


SINKS = {"parquet": ("quail_spark.enrich.parquet_sink", "ParquetSink"),
         "iceberg": ("quail_spark.enrich.iceberg_sink", "IcebergSink"),
         "delta": ("quail_spark.enrich.delta_sink", "DeltaSink")}


def sink_for(spec: Spec):
    """The sink of the spec's output format (imported only when used: pyiceberg, deltalake)."""
    module, name = SINKS[spec.output_format]
    return getattr(importlib.import_module(module), name)(spec)


def run(spec: Spec, spark, fail_on_error: bool = False, progress_every: float = 10.0,
        progress_dir: str | None = None, out=None) -> dict:
    """Run ``spec`` on ``spark``; returns the report (also printed and written beside the output).

    The input and its key are checked before the output is locked: a rejected
    spec leaves nothing behind.
    """
    t0, out = time.time(), out or sys.stdout  # the stream of now, not of import time
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    sink = sink_for(spec)
    spec, inp = input_rows(spark, spec)
    keys = guard.key_figures(inp, spec.key)
    if keys[0] != keys[1] or keys[2]:
        inc.check_key(spec, inp)  # names the repeated or NULL keys
    sink.lock()
    try:
        report = locked_run(spec, spark, sink, inp, keys, run_id, progress_dir, progress_every)
        if fail_on_error and report["rows_errored"]:
            report.update(committed=False, wall_s=round(time.time() - t0, 3))
            write(report, sink.report_path)
            print(summary(report), file=out, flush=True)
            raise EnrichFailed(f"{report['rows_errored']} row(s) could not be scored and --fail-on-error is "
                               f"set; nothing committed, {sink.describe()} is unchanged", report)
        sink.commit(report["version"], run_id)
    finally:
        sink.release()
    report.update(committed=True, wall_s=round(time.time() - t0, 3))
    write(report, sink.report_path)
    print(summary(report), file=out, flush=True)
    return report


def locked_run(spec: Spec, spark, sink, inp, keys, run_id, progress_dir, progress_every) -> dict:
    """Read the previous output and its state (checked), stage this run's rows, check them; the report."""
    sink.clean()
    warnings: list = []
    prev, state = guard.checked_previous(spark, sink, spec.key, warnings)
    work = inc.work_rows(spec, inp, prev, state).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        if spec.budget:  # refused before any AI work when the estimate exceeds it
            from quail_spark.enrich import preview

            preview.check(spec, preview.estimate(spec, spark, work))
        n_read, n_todo = work.select(F.count(F.lit(1)), F.sum(inc.needs_any(spec).cast("long"))).first()
        report = stage(spec, spark, sink, work, inp.schema, run_id, n_read, n_todo or 0,
                       progress_dir, progress_every)
    finally:
        work.unpersist()
    guard.check_output(spark, spec.key, inp, keys, report["version"], sink.describe())
    report.update(output=sink.describe(), warnings=warnings)
    return report


def input_rows(spark, spec: Spec):
    """(the spec with its column names spelled as the input's, ignoring case as Spark does; the input,
    checked against the spec, with the AI calls' expression arguments computed, after ``where``)."""
    from quail_spark.mapper import resolve_inputs, resolve_name, with_derived

    inp = read_input(spark, spec)
    try:
        spec = dataclasses.replace(spec, key=resolve_name(inp.columns, spec.key, "key"),
                                   columns=resolve_inputs(inp.columns, spec.columns))
        inp = with_derived(inp, spec.columns)
    except (TypeError, ValueError) as e:
        raise SpecError(str(e)) from None
    inc.check_input(spec, inp)
    if not spec.where:
        return spec, inp
    from pyspark.errors import AnalysisException, ParseException

    try:
        return spec, inp.where(spec.where)
    except (AnalysisException, ParseException) as e:
        raise SpecError(f"spec key 'where': {spec.where!r} does not apply to the input: "
                        f"{error_line(e)}") from None


def stage(spec, spark, sink, work, input_schema, run_id, n_read, n_todo, progress_dir, progress_every) -> dict:
    """Write kept and computed rows to a staging version (not yet committed); the report so far.

    The output gets the key, the AI columns and ``_ai_error``; the sink's state
    gets (key, ``_ai_hash``) from the same cached rows (the AI stage runs once).
    """
    own_progress = progress_dir is None
    progress_dir = progress_dir or tempfile.mkdtemp(prefix=f"quail-enrich-{run_id}-")
    os.makedirs(progress_dir, exist_ok=True)
    counters = spark.sparkContext.accumulator({}, CountersParam())
    out_df = inc.kept_rows(spec, work)
    if n_todo:
        plan = stage_plan(spec, spark, run_id, progress_dir, counters)
        out_df = out_df.unionByName(ai_rows(spec, spark, work, input_schema, plan, n_todo))
    out_df = out_df.persist(StorageLevel.MEMORY_AND_DISK)
    data_df = out_df.drop("_ai_hash")
    state_df = out_df.select(guard.column(spec.key), "_ai_hash",
                             guard.row_print(out_df, spec.key).alias(guard.ROW_PRINT))
    staged = sink.staging(run_id, schema=_arrow_schema(data_df.schema))
    t_ai, line = time.time(), None
    if n_todo:
        from quail_spark.enrich.progress import ProgressLine

        line = ProgressLine(spark.sparkContext, progress_dir, n_todo, progress_every, out=sys.stderr)
        line.start()
    try:
        data_df.write.mode("append").parquet(staged)  # a new folder of this run (the sink may have made it)
        state_df.write.mode("errorifexists").parquet(sink.state_staging(run_id, _arrow_schema(state_df.schema)))
    finally:
        out_df.unpersist()
        if line is not None:
            line.stop()
        if own_progress:
            shutil.rmtree(progress_dir, ignore_errors=True)
    return _report(spec, spark, staged, run_id, n_read, n_todo, dict(counters.value), time.time() - t_ai)


def stage_plan(spec: Spec, spark, run_id: str, progress_dir: str, counters) -> StagePlan:
    conf = spark.conf  # the session's conf: the context's settings and any set since
    engine = executor.engine_conf(spec.model, executor.session_device(spark, spec.device), **spec.engine)
    failures = max_task_failures(spark.sparkContext.master, conf.get("spark.task.maxFailures", "4"))
    return StagePlan(engine, spec.key, spec.columns, failures, progress_dir, run_id, counters,
                     max_tokens=spec.budget.get("max_tokens", 0),
                     timezone=conf.get("spark.sql.session.timeZone", "UTC"))


def ai_rows(spec: Spec, spark, work, input_schema, plan: StagePlan, n_todo: int):
    """Rows to compute, shuffled into AI tasks by key, evaluated by ``enrich_task``.

    On a GPU device the AI stage alone asks for one GPU per task (stage-level
    scheduling), so scans and shuffles run on executors without holding one.
    """
    n_tasks = max(spark.sparkContext.defaultParallelism, math.ceil(n_todo / ROWS_PER_TASK))
    todo = work.where(inc.needs_any(spec)).repartition(n_tasks, guard.column(spec.key))
    # pyspark's mapInArrow reads its input columns by name, and a dot in a name is a path there: such
    # columns cross under plain names (positional renames) and the key gets its name back after
    plain = {n: f"__in{i}" for i, n in enumerate(todo.columns) if "." in n or "`" in n}
    if plain:
        todo = todo.toDF(*[plain.get(n, n) for n in todo.columns])
        plan = dataclasses.replace(plan, key=plain.get(plan.key, plan.key), columns=tuple(
            dataclasses.replace(c, inputs=tuple(plain.get(x, x) for x in c.inputs)) for c in plan.columns))
    schema = StructType([StructField(plan.key, input_schema[spec.key].dataType), *[
        StructField(c.name, _parse_datatype_string(c.result_type)) for c in spec.columns],
        StructField("_ai_error", StringType()), StructField("_ai_hash", StringType())])
    out = todo.mapInArrow(functools.partial(enrich_task, plan), schema, profile=gpu_profile(spec, spark))
    return out.toDF(spec.key, *out.columns[1:]) if plain else out


def gpu_profile(spec: Spec, spark):
    """A ResourceProfile asking one GPU per task, or None (CPU device, or local mode without a cluster)."""
    master = spark.sparkContext.master
    if spec.device.split(":")[0] not in GPU_DEVICES or master == "local" or master.startswith("local["):
        return None
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    cpus = int(spark.conf.get("spark.task.cpus", "1"))
    return ResourceProfileBuilder().require(TaskResourceRequests().cpus(cpus).resource("gpu", 1.0)).build


def max_task_failures(master: str, max_failures: str = "4") -> int:
    """Attempts Spark gives a task: local[N, F] -> F, local[N] -> 1, else spark.task.maxFailures.

    >>> max_task_failures("local[2, 3]"), max_task_failures("local[2]"), max_task_failures("yarn")
    (3, 1, 4)
    """
    if master == "local" or master.startswith("local["):
        m = re.match(r"local\[[^,\]]+,\s*(\d+)\]", master)
        return int(m.group(1)) if m else 1
    return int(max_failures)


def _report(spec, spark, staged, run_id, n_read, n_todo, counters, ai_s) -> dict:
    n_err, examples = counters.get("errored_rows", 0), []
    if n_err:  # the accumulator counts successful task attempts; the staged files name the rows
        errored = spark.read.parquet(staged).where(F.col("_ai_error").isNotNull())
        examples = [f"{spec.key}={r[0]!r}: {r[1]}"
                    for r in errored.select(guard.column(spec.key), "_ai_error").limit(3).collect()]
    tokens = counters.get("requested_tokens", 0)
    return {"run_id": run_id, "spec_hash": spec.spec_hash(), "model": spec.model, "device": spec.device,
            "rows_read": n_read, "rows_skipped": n_read - n_todo, "rows_enriched": n_todo - n_err,
            "rows_errored": n_err, "rows_truncated": counters.get("truncated_rows", 0),
            **{k: counters.get(k, 0) for k in REPORTED if k != "truncated_rows"},
            "ai_wall_s": round(ai_s, 3), "rows_per_s": round(n_todo / ai_s, 1) if ai_s else 0.0,
            "tokens_per_s": round(tokens / ai_s, 1) if ai_s else 0.0, "version": staged,
            "error_examples": examples}


def _arrow_schema(schema):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)
