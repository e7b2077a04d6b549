"""Counters of the AI work of a Spark session, without driver-side Python state.

Spark Connect has no accumulators, so the executors write what they computed
and the driver reads it back: :func:`quail_spark.install` picks a folder for
the session (``<spark.quail.metrics.dir or the temp dir>/<application id>-<random>``)
and stores it in the session's runtime conf (``spark.quail.metrics.session_dir``)
and in the plain-data settings of the UDFs. Every evaluated Arrow batch appends
one JSON line of counter deltas to a file owned by its Python worker process
(one writer per file, one ``write`` per line), and :func:`metrics` sums the
lines. On a cluster the folder must be on a filesystem that executors and
driver share: set ``spark.quail.metrics.dir`` before install().

Retried or speculative tasks write their lines too (counted work is work done).
"""
from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

from gpu_worker.counters import REPORTED

BASE_CONF = "spark.quail.metrics.dir"
SESSION_CONF = "spark.quail.metrics.session_dir"
COUNTERS = (*REPORTED, "errored_rows")  # the engine's (gpu_worker.counters) and the rows Spark saw fail


def session_dir(spark) -> str:
    """This session's metrics folder, chosen (and stored in its conf) on first use."""
    d = conf_value(spark, SESSION_CONF)
    if not d:
        base = conf_value(spark, BASE_CONF) or os.path.join(tempfile.gettempdir(), "quail_spark_metrics")
        app = conf_value(spark, "spark.app.id") or "app"
        d = os.path.join(base, f"{app}-{uuid.uuid4().hex[:12]}")
        spark.conf.set(SESSION_CONF, d)
    Path(d).mkdir(parents=True, exist_ok=True)
    return d


def metrics(spark, since: dict | None = None) -> dict:
    """Counters summed over all AI work of this session so far (``since``: a :func:`mark`, over the work written
    after it only).

    Returns
    -------
    dict
        requested_tokens, fresh_tokens, reused_tokens, kv_regret_tokens,
        forward_passes, truncated_rows, errored_rows, output_tokens, decode_steps, preemptions (ints) and stages:
        ``{"<op>: <question>": {"evaluated": n, "passed": m}}``.

    Examples
    --------
    >>> import quail_spark
    >>> before = quail_spark.metrics(spark)                                  # doctest: +SKIP
    >>> spark.sql("SELECT id FROM notes WHERE ai_if('Is {0} a complaint?', body)").collect()  # doctest: +SKIP
    >>> quail_spark.metrics(spark)["requested_tokens"] - before["requested_tokens"]  # doctest: +SKIP
    """
    out = empty()
    for line in _lines(spark, since):
        add(out, line)
    return out


def mark(spark) -> dict:
    """Where each metrics file of this session ends now (bytes): :func:`metrics` and :func:`spans` read the lines
    after it (the files are only appended to)."""
    d = conf_value(spark, SESSION_CONF)
    if not d or not os.path.isdir(d):
        return {}
    return {f.name: f.stat().st_size for f in Path(d).glob("*.jsonl")}


def spans(spark, since: dict) -> dict:
    """Per AI operator (its id, quail_spark.operators), the seconds from the start of its first batch to
    the end of its last among the lines written after ``since`` (a :func:`mark`): the wall of its
    work, engine loads excluded, whatever else the stage did between its batches included. The times are
    the executors' clocks."""
    first: dict = {}
    last: dict = {}
    for line in _lines(spark, since):
        for op, (start, end) in line.get("span", {}).items():
            first[op] = min(first.get(op, start), start)
            last[op] = max(last.get(op, end), end)
    return {op: last[op] - first[op] for op in first}


def _lines(spark, since: dict | None = None):
    """The parsed lines of this session's metrics files (those after ``since``'s offsets where given)."""
    d = conf_value(spark, SESSION_CONF)
    if not d or not os.path.isdir(d):
        return
    for f in sorted(Path(d).glob("*.jsonl")):
        with open(f, "rb") as fh:
            fh.seek((since or {}).get(f.name, 0))
            for line in fh:
                try:
                    yield json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue  # a line cut by a killed worker


def empty() -> dict:
    return {**{k: 0 for k in COUNTERS}, "stages": {}}


def add(total: dict, delta: dict) -> dict:
    for k in COUNTERS:
        total[k] += int(delta.get(k, 0))
    for name, s in delta.get("stages", {}).items():
        t = total["stages"].setdefault(name, {"evaluated": 0, "passed": 0})
        t["evaluated"] += s["evaluated"]
        t["passed"] += s["passed"]
    for op, counters in delta.get("ops", {}).items():  # per AI operator of a plan (quail_spark.operators)
        t = total.setdefault("ops", {}).setdefault(op, {})
        for k, v in counters.items():
            t[k] = t.get(k, 0) + v
    return total


def record(meter, errored_rows: int = 0) -> dict:
    """What a metrics file holds of one metered batch (a closed ``gpu_worker.counters.metered``)."""
    out = {**meter.delta, "errored_rows": errored_rows}
    stages: dict = {}
    for s in meter.stages:
        name = f"{s.get('op', 'stage')}: {s.get('question', '')}".rstrip(": ")
        t = stages.setdefault(name, {"evaluated": 0, "passed": 0})
        t["evaluated"] += int(s.get("evaluated", 0))
        t["passed"] += int(s.get("passed", 0))
    out["stages"] = stages
    return out


_TAG = uuid.uuid4().hex[:8]


def append(folder: str | None, counters: dict) -> None:
    """Append one line of counter deltas to this process's file in ``folder`` (no-op without one)."""
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    line = (json.dumps(counters, sort_keys=True) + "\n").encode()
    fd = os.open(os.path.join(folder, f"{os.getpid()}-{_TAG}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def conf_value(spark, key: str):
    """The session's setting ``key``, or None where it is unset or the session refuses to read it."""
    try:
        return spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a conf Spark refuses to read is unset for us
        return None
