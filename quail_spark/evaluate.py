"""Answer quality a user can measure: AI expressions scored against a labelled table.

    ev = quail_spark.evaluate(df, label={"animal": "is_animal"},
                              columns={"animal": "ai_if('Is {0} an animal?', text)"},
                              model="/models/Qwen3-4B", device="cuda")
    ev.table()      # per question: n, yes_rate, accuracy, auc, threshold, accuracy_at_threshold
    ev.roc("animal")

Columns are the enrichment spec's expressions (one parser, :func:`enrich.spec.parse_column`).
An ``ai_if`` or ``ai_score`` question is scored by its margin (the model's log-odds of
yes; ``ai_if`` is TRUE when it is > 0) against a boolean label column: accuracy of
the answers as given, AUC, and the margin threshold that best separates the classes
with the accuracy there. An ``ai_classify`` question is compared with a text label
column: accuracy and per-label counts. An ``ai_extract`` question is compared field by
field with label columns: exact match, token F1, rows cut at max_tokens (:meth:`Evaluation.fields`). Rows whose label is NULL are not asked; a
row whose document is NULL (the one NULL rule) is counted as ``null_results``.

The values come from Spark executors through the bodies of the SQL functions
(:mod:`quail_spark.executor`: one rendering, one NULL rule), with the engine named
here, whatever model the session's registered functions use. Margins are read back
from P(yes) in float64: exact to rounding below |margin| 36 (larger ones read as 36.7).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

MAX_MARGIN = 36.7  # log-odds of the largest float64 P(yes) below 1


@dataclass(frozen=True)
class Question:
    """One AI expression and the label column it is judged against."""

    column: "AIColumn"  # quail_spark.enrich.spec (imported where used: it loads the engine package)
    label: str

    @property
    def name(self) -> str:
        return self.column.name


def evaluate(data, label, columns: dict, *, model: str = "smollm2-135m", device: str = "cpu",
             spark=None, **engine) -> "Evaluation":
    """Score AI expressions against the labels of a table.

    Parameters
    ----------
    data : DataFrame or str
        A Spark DataFrame, a Parquet / JSON lines / CSV path or a catalog table name.
    label : str or dict
        The label column of every question, or ``{question: label column}``. Boolean
        (or 0/1) for ``ai_if`` / ``ai_score``, text for ``ai_classify``; NULL: not asked.
        An ``ai_extract`` question's label is ``{field: column}``, a struct column, or
        left out: columns named like the fields; every row is asked, a NULL label
        meaning the text does not give the field (:mod:`quail_spark.extract_quality`).
    columns : dict
        ``{question: AI expression}`` in the enrichment spec's syntax.
    model, device, **engine
        The engine (``gpu_worker.EngineConfig`` fields).
    spark : SparkSession, optional
        Needed when ``data`` is a path or table name and no session is active.

    Returns
    -------
    Evaluation

    Examples
    --------
    >>> ev = evaluate("tests/data/yes_no.jsonl", {"animal": "is_animal"},
    ...               {"animal": "ai_if('Is {0} an animal?', text)"})        # doctest: +SKIP
    >>> ev.results[0]["auc"]                                                 # doctest: +SKIP
    """
    from quail_spark import executor
    from quail_spark.metrics import session_dir

    from quail_spark.enrich.spec import SpecError
    from quail_spark.mapper import with_derived

    df = _frame(data, spark)
    questions = questions_of(label, columns, df.columns)
    try:
        df = with_derived(df, [q.column for q in questions])  # expression arguments, computed by Spark
    except (TypeError, ValueError) as e:
        raise SpecError(str(e)) from None
    _check_label_types(df, questions)
    conf = executor.engine_conf(model, executor.session_device(df.sparkSession, device), **engine)
    run = {"metrics_dir": session_dir(df.sparkSession)}
    scores, results = {}, []
    for q in questions:
        if q.column.call.kind == "extract":
            from quail_spark.extract_quality import score_extract

            figures, scores[q.name] = score_extract(df, q, model, device, engine)
            results.append({"question": q.name, "expr": q.column.expr, "label": q.label, "kind": "extract",
                            **figures})
            continue
        got = _score(df, q, conf, run)
        scores[q.name] = got
        results.append({"question": q.name, "expr": q.column.expr, "label": q.label,
                        "kind": q.column.call.kind, **_metrics(q, got)})
    return Evaluation(model, device, results, scores)


def questions_of(label, columns: dict, available) -> list:
    """The questions of ``columns`` with their label columns, checked against ``available``."""
    from quail_spark.enrich.spec import SpecError, parse_column

    if not isinstance(columns, dict) or not columns:
        raise SpecError(f"columns: expected {{question: AI expression}}, got {columns!r}")
    if isinstance(label, str):
        label = {name: label for name in columns}
    if not isinstance(label, dict):
        raise SpecError(f"label: expected a column name or {{question: column}}, got {label!r}")
    out = []
    for name, expr in columns.items():
        col = parse_column(name, expr)
        extract = col.call.kind == "extract"  # labelled per field: checked against the struct's fields later
        if name not in label and not extract:
            raise SpecError(f"label: no label column for question {name!r}")
        derived = {n for n, _ in col.derived}  # expressions: with_derived resolves them, naming what is missing
        checked = [label[name]] if not extract else [c for c in [label.get(name)] if isinstance(c, str)]
        for c in (*checked, *col.inputs):
            if c not in available and c not in derived:
                raise SpecError(f"question {name!r}: column {c!r} is not in the input ({list(available)})")
        if not extract and not isinstance(label[name], str):
            raise SpecError(f"question {name!r}: the label is one column's name, got {label[name]!r}")
        out.append(Question(col, label.get(name)))
    return out


def _frame(data, spark):
    if not isinstance(data, str):
        return data
    from pyspark.sql import SparkSession

    from quail_spark.enrich.job import read_input

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise ValueError(f"evaluate({data!r}): a path or table needs a SparkSession (spark=...)")
    return read_input(spark, _Source(data))


@dataclass(frozen=True)
class _Source:
    """The ``input`` of a spec, as the enrichment job's reader takes it."""

    input: str
    base_dir: str = "."

    def path(self, p: str) -> str:
        import os

        return p if "://" in p or os.path.isabs(p) else os.path.normpath(os.path.join(self.base_dir, p))


def _check_label_types(df, questions) -> None:
    from pyspark.sql import types as T

    from quail_spark.enrich.spec import SpecError

    types = {f.name: f.dataType for f in df.schema.fields}
    for q in questions:
        if q.column.call.kind == "extract":
            continue  # any type: values and labels are compared normalized (extract_quality.normalize)
        t, classify = types[q.label], q.column.call.kind == "classify"
        ok = isinstance(t, T.StringType) if classify else isinstance(t, (T.BooleanType, T.IntegralType))
        if not ok:
            want = "text (one of the labels)" if classify else "boolean (or 0/1)"
            raise SpecError(f"question {q.name!r}: label column {q.label!r} is {t.simpleString()}; "
                            f"expected {want}")


def _score(df, q: Question, conf: dict, run: dict) -> pd.DataFrame:
    """The input columns, label and value (margin, or the predicted label) of every row with a label."""
    from pyspark.sql import functions as F

    from quail_spark.functions import arrow_function

    call = q.column.call
    args = [F.lit(call.template), *[F.col(c) for c in q.column.inputs]]
    if call.kind == "classify":
        args.append(F.array(*[F.lit(x) for x in call.labels]))
    name = "ai_classify" if call.kind == "classify" else "ai_score"
    fn = arrow_function(name, conf, run, shown_as=f"quail_evaluate_{call.kind}")
    shown = dict(q.column.derived)  # an expression argument's values under its text
    inputs = [F.col(c).alias(shown.get(c, c)) for c in dict.fromkeys(q.column.inputs) if c not in ("label", "value")]
    got = df.where(F.col(q.label).isNotNull()) \
        .select(*inputs, F.col(q.label).alias("label"), fn(*args).alias("value")).toPandas()
    if call.kind != "classify":
        got["label"] = got["label"].astype(bool)
        got["value"] = margin_of(got["value"].to_numpy(dtype=float))
        got = got.rename(columns={"value": "margin"})
    return got


def margin_of(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), capped at :data:`MAX_MARGIN` where P(yes) rounds to 1; NaN stays NaN."""
    with np.errstate(divide="ignore"):
        return np.minimum(np.log(p) - np.log1p(-p), MAX_MARGIN)


def _metrics(q: Question, got: pd.DataFrame) -> dict:
    if q.column.call.kind == "classify":
        ok = got["value"].notna()
        out = classify_metrics(got["label"][ok].to_numpy(), got["value"][ok].to_numpy(), q.column.call.labels)
    else:
        ok = got["margin"].notna()
        out = binary_metrics(got["label"][ok].to_numpy(), got["margin"][ok].to_numpy())
    return {**out, "null_results": int((~ok).sum())}


# --------------------------------------------------------------- the figures


def binary_metrics(truth, margins) -> dict:
    """Figures of margins against boolean truth.

    >>> binary_metrics([True, False, True, False], [2.0, -1.0, -0.5, -3.0])["auc"]
    1.0
    """
    y, m = np.asarray(truth, dtype=bool), np.asarray(margins, dtype=float)
    t, best = best_threshold(y, m)
    n = len(y)
    return {"n": n, "positives": int(y.sum()),
            "yes_rate": float((m > 0).mean()) if n else None,
            "accuracy": float(((m > 0) == y).mean()) if n else None,
            "auc": auc(y, m), "threshold": t,
            "threshold_p": None if t is None else float(1.0 / (1.0 + math.exp(-t))),
            "accuracy_at_threshold": best}


def auc(truth, margins) -> float | None:
    """P(a positive's margin > a negative's), ties counted half (Mann-Whitney, by ranks);
    None when a class is empty."""
    y, m = np.asarray(truth, dtype=bool), np.asarray(margins, dtype=float)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return None
    ranks = pd.Series(m).rank(method="average").to_numpy()
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def best_threshold(truth, margins) -> tuple:
    """(t, accuracy of ``margin > t``) maximising that accuracy; t lies halfway between two
    margins (or 1 beyond the extremes); of equally good ones, the nearest to 0."""
    y, m = np.asarray(truth, dtype=bool), np.asarray(margins, dtype=float)
    if not len(y):
        return None, None
    u = np.unique(m)
    cuts = np.concatenate([[u[0] - 1.0], (u[:-1] + u[1:]) / 2, [u[-1] + 1.0]])
    pos, neg = np.sort(m[y]), np.sort(m[~y])
    correct = (len(pos) - np.searchsorted(pos, cuts, "right")) + np.searchsorted(neg, cuts, "right")
    acc = correct / len(y)
    best = np.flatnonzero(acc == acc.max())
    k = best[np.argmin(np.abs(cuts[best]))]
    return float(cuts[k]), float(acc[k])


def roc_curve(truth, margins) -> tuple:
    """(false positive rates, true positive rates) of ``margin > t`` as t falls, from (0, 0) to (1, 1)."""
    y, m = np.asarray(truth, dtype=bool), np.asarray(margins, dtype=float)
    u = np.unique(m)[::-1]
    tpr = [0.0] + [float((m[y] >= t).mean()) if y.any() else 0.0 for t in u]
    fpr = [0.0] + [float((m[~y] >= t).mean()) if (~y).any() else 0.0 for t in u]
    return np.array(fpr), np.array(tpr)


def classify_metrics(truth, predicted, labels) -> dict:
    """Accuracy and, per label, how many rows have it, were given it, and were given it rightly.

    >>> classify_metrics(["a", "b", "b"], ["a", "a", "b"], ("a", "b"))["accuracy"]
    0.6666666666666666
    """
    from quail_spark.enrich.spec import SpecError

    truth, predicted = list(truth), list(predicted)
    unknown = sorted({t for t in truth if t not in labels})
    if unknown:
        raise SpecError(f"label column holds {unknown}, which are not among the call's labels {list(labels)}")
    counts = {lab: {"n": sum(t == lab for t in truth), "predicted": sum(p == lab for p in predicted),
                    "correct": sum(t == p == lab for t, p in zip(truth, predicted))} for lab in labels}
    n = len(truth)
    return {"n": n, "accuracy": sum(c["correct"] for c in counts.values()) / n if n else None,
            "labels": counts}


class Evaluation:
    """What :func:`evaluate` measured: ``results`` (one dict per question) and ``scores``
    (per question, a pandas DataFrame of each asked row's input columns, label and
    ``margin``, or ``value`` (the predicted label) for a classification)."""

    COLUMNS = ("question", "kind", "n", "positives", "yes_rate", "accuracy", "auc", "threshold",
               "threshold_p", "accuracy_at_threshold", "null_results")
    EXTRACT_COLUMNS = ("question", "field", "n", "exact_match", "f1", "label_nulls", "value_nulls", "cut")

    def __init__(self, model: str, device: str, results: list, scores: dict):
        self.model, self.device, self.results, self.scores = model, device, results, scores

    def table(self) -> pd.DataFrame:
        """One row per yes/no or classify question (``labels`` counts of classify questions are in
        :attr:`results`; ``ai_extract`` questions are in :meth:`fields`)."""
        rs = [r for r in self.results if r["kind"] != "extract"]
        t = pd.DataFrame([{k: r.get(k) for k in self.COLUMNS} for r in rs], columns=list(self.COLUMNS))
        return t.astype({"n": "Int64", "positives": "Int64", "null_results": "Int64"}).set_index("question")

    def fields(self) -> pd.DataFrame:
        """One row per field of each ``ai_extract`` question: exact match, token F1, NULL labels and
        values, rows cut at max_tokens (see :mod:`quail_spark.extract_quality`)."""
        t = pd.DataFrame([{"question": r["question"], "field": f, **m} for r in self.results
                          if r["kind"] == "extract" for f, m in r["fields"].items()],
                         columns=list(self.EXTRACT_COLUMNS))
        return t.set_index(["question", "field"])

    def roc(self, question: str) -> tuple:
        """(fpr, tpr) of an ``ai_if`` / ``ai_score`` question (see :func:`roc_curve`)."""
        s = self.scores[question]
        if "margin" not in s:
            raise ValueError(f"question {question!r} is not an ai_if / ai_score question; it has no ROC curve")
        s = s[s["margin"].notna()]
        return roc_curve(s["label"].to_numpy(), s["margin"].to_numpy())

    def to_dict(self) -> dict:
        return {"model": self.model, "device": self.device, "questions": self.results}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_plain)

    def __str__(self) -> str:
        fmt = {"float_format": lambda x: f"{x:.3f}", "na_rep": ""}
        lines = [f"model {self.model} on {self.device}"]
        if any(r["kind"] != "extract" for r in self.results):
            lines.append(self.table().to_string(**fmt))
        for r in (r for r in self.results if r["kind"] == "extract"):
            lines.append(f"{r['question']}: {r['n']} rows, {r['cut_rows']} cut at max_tokens, "
                         f"{r['errored_rows']} errored, {r['null_results']} NULL documents")
        if any(r["kind"] == "extract" for r in self.results):
            lines.append(self.fields().to_string(**fmt))
        for r in self.results:
            for lab, c in r.get("labels", {}).items():
                lines.append(f"  {r['question']}: {lab!r}: {c['n']} rows, predicted {c['predicted']}, "
                             f"correct {c['correct']}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        fmt = {"float_format": lambda x: f"{x:.3f}", "na_rep": ""}
        return (f"<p>model <code>{self.model}</code> on {self.device}</p>" + self.table().to_html(**fmt)
                + (self.fields().to_html(**fmt) if any(r["kind"] == "extract" for r in self.results) else ""))


def _plain(x):
    return x.item() if hasattr(x, "item") else str(x)
