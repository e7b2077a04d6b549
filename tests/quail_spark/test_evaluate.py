"""quail_spark.evaluate and `quail-spark eval` on the shipped labelled set (tests/data/yes_no.jsonl).

The figures are checked against the Engine itself: margins computed on the driver
for the same rows, AUC as a direct count over (positive, negative) pairs, and the
reported threshold separating as claimed, no other cut doing better.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from quail_spark.evaluate import auc, best_threshold, binary_metrics, classify_metrics

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
SET = os.path.join(DATA, "yes_no.jsonl")
SPEC = os.path.join(DATA, "yes_no_eval.json")
QUESTIONS = json.load(open(SPEC))["columns"]
LABELS = json.load(open(SPEC))["label"]


def pairwise_auc(y, m):
    pos, neg = [a for a, t in zip(m, y) if t], [a for a, t in zip(m, y) if not t]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def best_cut(y, m):
    """The best accuracy of `margin > t` over every cut, by brute force."""
    cuts = [min(m) - 1] + [a for a in m]
    return max(np.mean((np.asarray(m) > t) == np.asarray(y)) for t in cuts)


def check_figures(r, y, m):
    """A question's reported figures against truth ``y`` and the Engine's margins ``m``."""
    y, m = np.asarray(y, bool), np.asarray(m, float)
    assert r["n"] == len(y) and r["positives"] == int(y.sum())
    assert r["yes_rate"] == pytest.approx(np.mean(m > 0))
    assert r["accuracy"] == pytest.approx(np.mean((m > 0) == y))
    assert r["auc"] == pytest.approx(pairwise_auc(y, m), abs=1e-9)
    assert np.mean((m > r["threshold"]) == y) == pytest.approx(r["accuracy_at_threshold"])
    assert r["accuracy_at_threshold"] == pytest.approx(best_cut(y, m))
    assert r["threshold_p"] == pytest.approx(1 / (1 + np.exp(-r["threshold"])))


# ------------------------------------------------------------------ the figures alone


def test_figures_match_brute_force_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(20):
        m = rng.integers(-3, 4, size=25).astype(float)  # many ties
        y = rng.random(25) < 0.5
        r = binary_metrics(y, m)
        check_figures({**r}, y, m)
    assert auc([True, True], [1.0, 2.0]) is None
    assert best_threshold([True, False], [0.5, 0.5])[1] == 0.5


def test_threshold_prefers_zero_among_equals():
    t, acc = best_threshold([True, True, False, False], [3.0, 2.0, -2.0, -3.0])
    assert acc == 1.0 and t == 0.0


def test_classify_figures_and_unknown_label():
    r = classify_metrics(["a", "b", "b", "c"], ["a", "a", "b", "b"], ("a", "b", "c"))
    assert r["accuracy"] == 0.5
    assert r["labels"] == {"a": {"n": 1, "predicted": 2, "correct": 1}, "b": {"n": 2, "predicted": 2, "correct": 1},
                           "c": {"n": 1, "predicted": 0, "correct": 0}}
    with pytest.raises(ValueError, match=r"\['z'\].*not among the call's labels"):
        classify_metrics(["z"], ["a"], ("a", "b"))


# ------------------------------------------------------------------ the shipped set


def test_shipped_set_is_balanced():
    rows = [json.loads(x) for x in open(SET)]
    assert len(rows) >= 100
    for q, col in LABELS.items():
        if q == "category":
            continue
        labels = [r[col] for r in rows if r[col] is not None]
        assert len(labels) >= 40 and sum(labels) * 2 == len(labels), q


@pytest.mark.parametrize("model,questions", [
    ("tiny-llama-random", ("animal", "fruit", "color", "tool", "category")),
    ("smollm2-135m", ("animal", "color")),
])
def test_evaluate_against_engine(spark, model, questions):
    import quail_spark
    from gpu_worker import Engine, EngineConfig
    from gpu_worker.ai_calls import Call

    cols = {q: QUESTIONS[q] for q in questions}
    ev = quail_spark.evaluate(SET, {q: LABELS[q] for q in questions}, cols, model=model, device="cpu",
                              spark=spark)
    eng = Engine(EngineConfig(model=model, device="cpu"))
    rows = [json.loads(x) for x in open(SET)]
    results = {r["question"]: r for r in ev.results}
    signs = set()
    for q in questions:
        asked = [r for r in rows if r[LABELS[q]] is not None]
        got = ev.scores[q].set_index("text").loc[[r["text"] for r in asked]]
        if q == "category":
            labels = ("animal", "fruit", "color", "tool")
            idx, _ = eng.classify([r["text"] for r in asked], list(labels), Call("classify", "{0}", 1, labels).question)
            want = [labels[k] for k in idx]
            assert list(got["value"]) == want
            assert results[q]["accuracy"] == pytest.approx(np.mean([w == r["category"] for w, r in zip(want, asked)]))
            assert sum(c["n"] for c in results[q]["labels"].values()) == len(asked)
            continue
        m = eng.filter([r["text"] for r in asked], [Call("if", cols[q].split("'")[1], 1).question])[:, 0]
        np.testing.assert_allclose(got["margin"].to_numpy(), m, atol=1e-4)  # executors vs driver: same prompts
        check_figures(results[q], [r[LABELS[q]] for r in asked], got["margin"].to_numpy())
        assert results[q]["null_results"] == 0
        signs |= set(np.sign(m))
    if model == "tiny-llama-random":
        assert signs == {-1.0, 1.0}  # the random model answers both ways: the comparison means something
    fpr, tpr = ev.roc(questions[0])
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1
    assert np.trapezoid(tpr, fpr) == pytest.approx(results[questions[0]]["auc"])
    assert "<table" in ev._repr_html_() and questions[0] in str(ev)


def test_evaluate_names_a_bad_label_column(spark):
    import quail_spark

    with pytest.raises(ValueError, match="label column 'category' is string; expected boolean"):
        quail_spark.evaluate(SET, "category", {"animal": QUESTIONS["animal"]}, model="tiny-llama-random",
                             spark=spark)
    with pytest.raises(ValueError, match="column 'nope' is not in the input"):
        quail_spark.evaluate(SET, "nope", {"animal": QUESTIONS["animal"]}, spark=spark)


def test_evaluate_reads_an_expression_argument_as_spark_computes_it(spark):
    """upper(text) as the document: the margins of the same call over a column holding upper(text)."""
    import quail_spark
    from pyspark.sql import functions as F

    df = spark.read.json(SET)
    expr = {"animal": "ai_if('Is {0} an animal?', upper(text))"}
    got = quail_spark.evaluate(df, "is_animal", expr, model="tiny-llama-random", spark=spark)
    ref = quail_spark.evaluate(df.withColumn("up", F.upper("text")), "is_animal",
                               {"animal": "ai_if('Is {0} an animal?', up)"}, model="tiny-llama-random", spark=spark)
    a = got.scores["animal"].sort_values("UPPER(text)")
    b = ref.scores["animal"].sort_values("up")
    assert list(a["UPPER(text)"]) == list(b["up"]) and len(a) > 4
    np.testing.assert_allclose(a["margin"].to_numpy(), b["margin"].to_numpy(), atol=1e-5)
    assert got.results[0]["auc"] == pytest.approx(ref.results[0]["auc"])


# ------------------------------------------------------------------ the command


def quail(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "quail_spark.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_cli_eval_prints_table_and_writes_json(tmp_path):
    spec = {"input": os.path.abspath(SET), "label": {"animal": "is_animal", "category": "category"},
            "columns": {"animal": QUESTIONS["animal"], "category": QUESTIONS["category"]},
            "where": "id <= 90", "model": "tiny-llama-random", "device": "cpu", "output": "quality.json"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    p = quail("eval", "spec.json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "accuracy_at_threshold" in p.stdout and "category: 'tool'" in p.stdout
    out = json.loads((tmp_path / "quality.json").read_text())
    assert out["model"] == "tiny-llama-random"
    animal, category = out["questions"]
    rows = [json.loads(x) for x in open(SET)]
    asked = [r for r in rows if r["id"] <= 90 and r["is_animal"] is not None]
    assert animal["n"] == len(asked) and animal["positives"] == sum(r["is_animal"] for r in asked)
    assert 0 <= animal["auc"] <= 1 and animal["kind"] == "if"
    assert category["n"] == 90 and category["labels"]["tool"]["n"] == 0


def test_cli_eval_bad_spec_exits_2(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps({"input": "x.jsonl", "columns": {}}))
    p = quail("eval", "spec.json", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip().startswith("quail-spark eval:") and "missing key(s) ['label']" in p.stderr
    assert "Traceback" not in p.stderr
