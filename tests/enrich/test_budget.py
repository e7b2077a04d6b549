"""An enrichment's cost before it runs (``--dry-run``: rows, columns, tokens, seconds; a rerun counts only
the rows to recompute) and its budget (``"budget": {"max_tokens": N}``): refused before any work when the
estimate exceeds it (exit 2), stopped with nothing committed when the run passes it (exit 4)."""
from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest

from quail_spark.cli import exit_code
from quail_spark.enrich import load_spec
from quail_spark.enrich.job import dry_run
from quail_spark.enrich.preview import BudgetRefused

from .helpers import enrich, notes, rows, write_spec


def _dry(spark, spec) -> dict:
    out = io.StringIO()
    est = dry_run(load_spec(str(spec)), spark, out=out)
    assert "nothing computed, nothing committed" in out.getvalue()
    return est


def test_the_dry_run_estimates_a_run_and_its_rerun(spark, tmp_path):
    pq.write_table(notes(2000), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path)
    est = _dry(spark, spec)
    assert not (tmp_path / "out.parquet").exists()  # nothing committed, nothing staged
    n_en = sum(1 for i in range(2000) if i % 11)
    assert est["rows_to_compute"] == n_en and est["sampled_rows"] == 1000
    assert est["columns"]["complaint"] == sum(1 for i in range(2000) if i % 11 and i % 7 != 3)  # NULL bodies ask nothing
    run = enrich(spark, spec)
    assert 1 / 1.25 <= est["requested_tokens"] / run["requested_tokens"] <= 1.25, (est, run)

    edited = {i: f"Note {i}: a much longer complaint about a parcel that never came, {i} days late." for i in range(5, 605)}
    pq.write_table(notes(2000, edit=edited), tmp_path / "notes.parquet")
    est2 = _dry(spark, spec)
    assert est2["rows_to_compute"] == sum(1 for i in edited if i % 11)
    rerun = enrich(spark, spec)
    assert rerun["rows_enriched"] == est2["rows_to_compute"]
    assert 1 / 1.25 <= est2["requested_tokens"] / rerun["requested_tokens"] <= 1.25, (est2, rerun)


def test_a_budget_below_the_estimate_refuses_the_run_before_any_work(spark, tmp_path):
    pq.write_table(notes(40), tmp_path / "notes.parquet")
    est = _dry(spark, write_spec(tmp_path))
    spec = write_spec(tmp_path, budget={"max_tokens": est["requested_tokens"] // 2})
    with pytest.raises(BudgetRefused, match=r"estimated to request [\d,]+ tokens .* more than max_tokens=") as e:
        enrich(spark, spec)
    assert exit_code(e.value) == 2 and not (tmp_path / "out.parquet").exists()


def test_a_budget_passed_while_running_stops_the_run_with_nothing_committed(spark, tmp_path):
    pq.write_table(notes(30), tmp_path / "notes.parquet")
    enrich(spark, write_spec(tmp_path))
    before = rows(tmp_path / "out.parquet")
    # the dry run's sample (the first 1,000 rows to compute by key) short, the last 100 keys long: the estimate
    # is low, the run is not
    long = {i: "Note: " + "the parcel came late and the box was torn " * 60 for i in range(1200, 1300)}
    pq.write_table(notes(1300, edit=long), tmp_path / "notes.parquet")
    est = _dry(spark, write_spec(tmp_path))
    assert est["sampled_rows"] == 1000 and est["rows_to_compute"] > 1100
    spec = write_spec(tmp_path, budget={"max_tokens": int(est["requested_tokens"] * 1.2)})
    with pytest.raises(Exception, match=r"budget: the run was stopped after requesting [\d,]+ tokens") as e:
        enrich(spark, spec)
    assert exit_code(e.value) == 4
    assert rows(tmp_path / "out.parquet") == before  # the previous output, unchanged
    done = enrich(spark, write_spec(tmp_path))  # the next run, without the budget, completes it
    assert done["committed"] and len(rows(tmp_path / "out.parquet")) == sum(1 for i in range(1300) if i % 11)
