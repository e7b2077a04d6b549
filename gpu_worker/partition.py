"""Arrow partition entry points: the record batches of one partition in, batches out.

The Spark side (``quail_spark.executor``) hands each task's batches to these
functions together with a plain-data spec made on the driver and the worker's
cached engine. Batches are gathered into chunks of ``chunk_rows`` rows, so one
engine call sees many rows and schedules their shared prefixes together (rows
arrive sorted by document). Never imports pyspark.

run_pipeline     an AND chain of predicates (short-circuit, document KV kept
                 across the chain), then score / classify columns added.
run_join_cross   anchors stream in; every row carries the whole (small) partner
                 list; matching (anchor, partner) pairs come out.
run_join_pairs   candidate pairs (already joined on a relational condition)
                 stream in sorted by anchor; matching pairs come out.

Every function records what the engine did in a :class:`Recorder`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from .ai_columns import chunks
from .prompts import PromptTooLong

ENGINE_COUNTERS = ("requested_tokens", "fresh_tokens", "reused_tokens", "kv_regret_tokens",
                   "forward_passes", "requests", "wall_s", "truncated_rows")


@dataclass(frozen=True)
class Doc:
    """How a row's document is made: its columns and the names shown beside values.

    One column: the value itself. Several: ``name: value`` lines, NULL as empty.
    The document is NULL (not evaluated) when every column is NULL.
    """

    columns: tuple
    names: tuple

    def texts(self, table: pa.Table, rows=None) -> list:
        """Document text (or None) of each row of ``table`` (or of the ``rows`` indices)."""
        cols = [_column(table, c) for c in self.columns]
        values = [c.to_pylist() if rows is None else c.take(pa.array(rows, pa.int64())).to_pylist()
                  for c in cols]
        out = []
        for row in zip(*values):
            if all(v is None for v in row):
                out.append(None)
            elif len(row) == 1:
                out.append(str(row[0]))
            else:
                out.append("\n".join(f"{n}: {'' if v is None else v}" for n, v in zip(self.names, row)))
        return out


@dataclass(frozen=True)
class Predicate:
    """One ai_if of a chain: ``question`` asked about ``doc``; ``stage`` names it in reports."""

    doc: Doc
    question: str
    stage: str


@dataclass(frozen=True)
class AddColumn:
    """A column added to every row: ``kind`` 'score' (float64) or 'classify' (string)."""

    kind: str
    name: str
    doc: Doc
    question: str  # a score's question; a classify's instruction ("" for the engine's default)
    stage: str
    labels: tuple = ()


@dataclass(frozen=True)
class PipelineSpec:
    """``limit``: stop after this many output rows (a LIMIT above the pipeline); None: all."""

    predicates: tuple = ()
    columns: tuple = ()
    chunk_rows: int = 256
    limit: int | None = None


@dataclass(frozen=True)
class JoinSpec:
    """An AI join. ``partners`` names the list<struct> column of a cross join (each
    struct holds the partner row's columns); for a pair join it is empty and the
    partner columns are plain input columns."""

    anchor: Doc
    partner: Doc
    question: str
    stage: str
    partners: str = ""
    max_partners: int = 10000
    max_partners_key: str = "quail.join.maxPartnerRows"
    chunk_rows: int = 256
    limit: int | None = None


@dataclass
class Recorder:
    """Engine counters and per-stage evaluated/passed rows of one task."""

    counters: dict = field(default_factory=lambda: dict.fromkeys(ENGINE_COUNTERS, 0))
    stages: dict = field(default_factory=dict)  # stage -> {"evaluated", "passed"}

    def stage(self, name: str, evaluated: int, passed: int) -> None:
        s = self.stages.setdefault(name, {"evaluated": 0, "passed": 0})
        s["evaluated"] += int(evaluated)
        s["passed"] += int(passed)

    def engine_delta(self, before: dict, after: dict) -> None:
        for k in ENGINE_COUNTERS:
            self.counters[k] += after.get(k, 0) - before.get(k, 0)

    def as_dict(self) -> dict:
        return {"counters": dict(self.counters), "stages": {k: dict(v) for k, v in self.stages.items()}}


class RowError(ValueError):
    """Input a task cannot run: a row the engine refused (named by its document column
    and position), or more join partners than the setting allows (named by its key)."""


CHUNK_BYTES = 1 << 20  # with no LIMIT, a chunk also holds >= 1 MiB (~250k tokens of text: ~8 full passes)


def run_pipeline(engine, batches, spec: PipelineSpec, rec: Recorder,
                 where: Callable[[int], str] = str) -> Iterator[pa.RecordBatch]:
    """Keep the rows every predicate answers TRUE (in order), then add the columns.

    ``where(i)`` describes the i-th row of the partition in error messages.
    """
    seen, left = 0, spec.limit  # rows of the partition before this chunk; output rows still wanted
    for table in chunks(batches, spec.chunk_rows, CHUNK_BYTES if spec.limit is None else 0):
        if left is not None and left <= 0:
            return
        n_in = table.num_rows
        before = _counters(engine)
        try:
            keep = _chain(engine, table, spec.predicates, rec, seen, where)
            keep = keep if left is None else keep[:left]
            if len(keep) < n_in:
                table = table.take(pa.array(keep, pa.int64()))
            positions = [seen + i for i in keep]
            for name, values in _columns(engine, table, spec.columns, rec, positions, where):
                table = table.append_column(name, values)
        finally:
            rec.engine_delta(before, _counters(engine))
        seen += n_in
        left = None if left is None else left - table.num_rows
        yield from table.to_batches()


def _chain(engine, table, predicates, rec, offset, where) -> list:
    """Row indices of ``table`` that pass every predicate, evaluated in order."""
    alive = list(range(table.num_rows))
    i = 0
    while i < len(predicates) and alive:
        group = [predicates[i]]  # consecutive predicates over one document share its KV
        while i + len(group) < len(predicates) and predicates[i + len(group)].doc == group[0].doc:
            group.append(predicates[i + len(group)])
        docs = group[0].doc.texts(table, alive)
        margins = engine_call(lambda: engine.chain(docs, [p.question for p in group], short_circuit=True),
                        group[0].doc, [offset + r for r in alive], docs, where)
        ok = np.ones(len(alive), dtype=bool)
        for q, p in enumerate(group):
            col = margins[:, q]
            done = ~np.isnan(col)
            rec.stage(p.stage, done.sum(), (col[done] > 0).sum())
            ok &= done & (np.nan_to_num(col, nan=-1.0) > 0)
        alive = [r for r, good in zip(alive, ok) if good]
        i += len(group)
    for p in predicates[i:]:
        rec.stage(p.stage, 0, 0)
    return alive


def _columns(engine, table, columns, rec, positions, where):
    """(name, arrow array) of each added column, in spec order."""
    out, scores = {}, {}
    for c in columns:
        if c.kind == "score":
            scores.setdefault(c.doc, []).append(c)
    for doc, group in scores.items():  # one call per document: its KV is shared by the questions
        docs = doc.texts(table)
        margins = engine_call(lambda: engine.filter(docs, [c.question for c in group]), doc, positions, docs, where)
        for q, c in enumerate(group):
            col = margins[:, q]
            done = ~np.isnan(col)
            rec.stage(c.stage, done.sum(), (col[done] > 0).sum())
            prob = 1.0 / (1.0 + np.exp(-col))
            out[c.name] = pa.array(prob, pa.float64(), mask=~done)
    for c in columns:
        if c.kind == "classify":
            docs = c.doc.texts(table)
            args = (docs, list(c.labels)) + ((c.question,) if c.question else ())  # else the default
            idx, _ = engine_call(lambda: engine.classify(*args), c.doc, positions, docs, where)
            rec.stage(c.stage, int((idx >= 0).sum()), int((idx >= 0).sum()))
            out[c.name] = pa.array([c.labels[k] if k >= 0 else None for k in idx], pa.string())
        elif c.kind != "score":
            raise ValueError(f"column {c.name!r}: kind must be 'score' or 'classify', got {c.kind!r}")
    return [(c.name, out[c.name]) for c in columns]


def run_join_cross(engine, batches, spec: JoinSpec, rec: Recorder,
                   where: Callable[[int], str] = str) -> Iterator[pa.RecordBatch]:
    """Anchor rows with the partner list attached: emit anchor columns + partner columns per match."""
    partners, seen, left = None, 0, spec.limit
    for table in chunks(batches, spec.chunk_rows):
        if left is not None and left <= 0:
            return
        if partners is None:  # every row carries the same list: read it once
            partners = pa.Table.from_struct_array(_column(table, spec.partners).chunk(0)[0].values)
            if partners.num_rows > spec.max_partners:
                raise RowError(
                    f"AI join {spec.stage}: the partner side has more than {spec.max_partners} rows "
                    f"after its filters; every task receives all of them. Raise the limit with the "
                    f"setting {spec.max_partners_key!r} (QuailSession(settings=...) or the Spark conf "
                    f"'spark.{spec.max_partners_key}'), or filter the partner side further")
            partner_docs = spec.partner.texts(partners)
        anchors = table.drop_columns([spec.partners])
        docs = spec.anchor.texts(anchors)
        before = _counters(engine)
        try:
            m = engine_call(lambda: engine.join(docs, partner_docs, spec.question), spec.anchor,
                      range(seen, seen + len(docs)), docs, where)
        finally:
            rec.engine_delta(before, _counters(engine))
        done = ~np.isnan(m)
        rec.stage(spec.stage, done.sum(), (m[done] > 0).sum())
        a_idx, p_idx = np.nonzero(np.nan_to_num(m, nan=-1.0) > 0)
        if left is not None:
            a_idx, p_idx, left = a_idx[:left], p_idx[:left], left - min(left, len(a_idx))
        seen += table.num_rows
        yield from _pairs(anchors, a_idx, partners, p_idx).to_batches()


def run_join_pairs(engine, batches, spec: JoinSpec, rec: Recorder,
                   where: Callable[[int], str] = str) -> Iterator[pa.RecordBatch]:
    """Candidate pairs sorted by anchor: evaluate each anchor once against its partners."""
    seen, left = 0, spec.limit
    for table in chunks(batches, spec.chunk_rows):
        if left is not None and left <= 0:
            return
        anchors, partners = spec.anchor.texts(table), spec.partner.texts(table)
        before = _counters(engine)
        try:  # one engine call for the chunk: each anchor's prefix computed once for its partners
            m = engine_call(lambda: engine.pairs(anchors, partners, spec.question), spec.anchor,
                            range(seen, seen + len(anchors)), anchors, where)
        finally:
            rec.engine_delta(before, _counters(engine))
        done = ~np.isnan(m)
        rec.stage(spec.stage, done.sum(), (m[done] > 0).sum())
        keep = np.nonzero(np.nan_to_num(m, nan=-1.0) > 0)[0].tolist()
        seen += table.num_rows
        if left is not None:
            keep, left = keep[:left], left - min(left, len(keep))
        yield from table.take(pa.array(keep, pa.int64())).to_batches()


def _pairs(anchors: pa.Table, a_idx, partners: pa.Table, p_idx) -> pa.Table:
    left = anchors.take(pa.array(a_idx, pa.int64()))
    right = partners.take(pa.array(p_idx, pa.int64()))
    for name, col in zip(right.column_names, right.columns):
        left = left.append_column(name, col)
    return left


def _column(table: pa.Table, name: str):
    try:
        return table.column(name)
    except KeyError:
        raise KeyError(f"expected column {name!r} in the partition, found {table.column_names}") from None


def _counters(engine) -> dict:
    return {k: engine.stats.get(k, 0) for k in ENGINE_COUNTERS}


def engine_call(fn, doc: Doc, positions, docs, where=str):
    """Run ``fn()``, an engine call over ``docs``; a PromptTooLong is re-raised as a
    RowError naming the document column and the row (``where(positions[i])``)."""
    try:
        return fn()
    except PromptTooLong as e:
        pos = list(positions)[e.row]
        text = docs[e.row] or ""
        col = ", ".join(doc.names)
        raise RowError(f"document column {col!r}, {where(pos)} (document starts {text[:60]!r}): the "
                       f"prompt has {e.n_tokens} tokens, the model's context holds {e.limit}; shorten the "
                       "document or use the engine setting on_overflow='truncate'") from e
