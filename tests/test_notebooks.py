"""The example notebooks run in a real Jupyter kernel (nbclient), each cell's outputs checked.

The kernel is the ``python3`` kernelspec that ipykernel installs into the test
environment (the Makefile's set-up installs the ``test`` extra); jupyter_client
starts it with this interpreter, and ``quail_spark.spark_conf()`` in the notebooks
has Spark's Python workers run it too.
"""
from __future__ import annotations

import os
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.join(os.path.dirname(__file__), "..")
EXAMPLES = os.path.join(ROOT, "examples")


def run(name: str, tmp_path):
    nb = nbformat.read(os.path.join(EXAMPLES, name), as_version=4)
    env_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.abspath(ROOT), env_path]))
    try:  # the kernel (and Spark's workers) import this checkout's packages
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=600,
                                resources={"metadata": {"path": EXAMPLES}}).execute()  # cwd as in Jupyter
    finally:
        os.environ.pop("PYTHONPATH") if env_path is None else os.environ.__setitem__("PYTHONPATH", env_path)
        nbformat.write(nb, str(tmp_path / name))  # the executed notebook, to read when a check fails
    cells = [c for c in nb.cells if c.cell_type == "code"]
    for c in cells:
        errors = [o for o in c.outputs if o.output_type == "error"]
        assert not errors, f"cell {c.source[:60]!r}: {errors}"
    return cells


def outputs(cell, mime: str) -> str:
    """Everything the cell shows in ``mime`` (text/html, text/plain, image/png), joined."""
    out = []
    for o in cell.outputs:
        if o.output_type == "stream" and mime == "text/plain":
            out.append(o.text)
        elif o.output_type in ("display_data", "execute_result") and mime in o.get("data", {}):
            out.append(o.data[mime])
    return "\n".join(out)


def result(cell) -> str:
    """The text of the cell's value (its last expression)."""
    return "".join(o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result")


def cell_with(cells, text: str):
    hits = [c for c in cells if text in c.source]
    assert len(hits) == 1, f"expected one cell containing {text!r}"
    return hits[0]


def test_quickstart(tmp_path):
    cells = run("quickstart.ipynb", tmp_path)
    scores = outputs(cell_with(cells, "ai_score('Is {0} a complaint?'"), "text/html")
    assert scores.count("<tr>") == 6 and "p_complaint" in scores  # 6 rows (pandas styles its header row)
    explain = outputs(cell_with(cells, "q.explain("), "text/html")
    assert "<table>" in explain and "AI filter order" in explain and "<details>" in explain
    collect = cell_with(cells, "rows = q.collect()")
    assert re.search(r"quail \(done\): 3 AI evaluations, [1-9][\d,]* tokens", outputs(collect, "text/html"))
    assert "quail (done): 3 AI evaluations" in outputs(collect, "text/plain")  # the same line as text
    assert result(collect).startswith("[")  # the rows (SmolLM2 may find no complaint)
    report = outputs(cell_with(cells, "q.report"), "text/html")
    assert "quail report" in report and "requested_tokens" in report
    # the AI stage: the three mail notes were asked (the relational condition ran first)
    assert re.search(r"<td[^>]*>\w+: Is the document a complaint\?</td><td[^>]*>3</td>", report), report


def test_explain_and_report_stay_str_and_dict_and_render_html():
    from quail_spark.notebook import Explain, Report

    text = ("== Optimized Logical Plan ==\nFilter quail_chain(...)\n+- Relation notes\n"
            "== AI filter order (evaluation order) ==\non body (6 rows):\n  1. ai_if('Is {0} <late>?', body)\n"
            "== SoL estimate ==\ntotal: 6 prompts")
    e = Explain(text)
    assert isinstance(e, str) and e == text
    page = e._repr_html_()
    assert "<details><summary>Optimized Logical Plan</summary><pre>Filter quail_chain(...)\n+- Relation notes</pre>" \
        in page
    assert "<h4>AI filter order (evaluation order)</h4><table>" in page and "&lt;late&gt;" in page
    assert page.count("<tr>") == 3  # two lines of the filter order, one of the estimate
    r = Report({"requested_tokens": 1200, "stages": {"filter: Is x?": {"evaluated": 3, "passed": 1}}, "wall_s": 0.5})
    assert isinstance(r, dict) and r["requested_tokens"] == 1200
    page = r._repr_html_()
    assert "<td style='text-align:left'>requested_tokens</td><td style='text-align:left'>1,200</td>" in page
    assert "<td style='text-align:left'>filter: Is x?</td><td style='text-align:left'>3</td>" in page
    assert "has not run yet" in Report()._repr_html_()


def test_enrichment(tmp_path):
    cells = run("enrichment.ipynb", tmp_path)
    mapped = outputs(cell_with(cells, "tickets.mapInArrow(m, m.schema)"), "text/html")
    assert mapped.count("<tr>") == 6  # every input row comes back
    for col in ("complaint", "urgency", "kind", "_ai_error"):
        assert f"<th>{col}</th>" in mapped
    scored = outputs(cell_with(cells, "quail_spark.with_ai_columns("), "text/html")
    assert scored.count("<tr>") == 5  # the blank row's urgency is NULL (the one NULL rule)
    quality = outputs(cell_with(cells, "quail_spark.evaluate("), "text/html")
    assert "<th>auc</th>" in quality and re.search(r"<th>animal</th>\s*<td>if</td>\s*<td>60</td>", quality)
    assert re.search(r"<th>color</th>\s*<td>if</td>\s*<td>60</td>", quality)
    plot = cell_with(cells, "plt.show()")
    assert any("image/png" in o.get("data", {}) for o in plot.outputs)
