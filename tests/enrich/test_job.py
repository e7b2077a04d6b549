"""Enrichment runs on the shared local[2] session: incremental reruns, per-row errors, reports,
the same values as plain spark.sql, and Iceberg output."""
from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail_spark.enrich.job import EnrichFailed

from .helpers import COLUMNS, FIELDS, assert_same_rows, enrich, hashes, notes, rows, write_spec


def test_rerun_computes_only_changed_rows_and_equals_a_clean_run(spark, tmp_path):
    pq.write_table(notes(30), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path)
    r1 = enrich(spark, spec)
    n_en = sum(1 for i in range(30) if i % 11)
    assert (r1["rows_read"], r1["rows_enriched"], r1["rows_skipped"], r1["rows_errored"]) == (n_en, n_en, 0, 0)
    assert r1["requested_tokens"] > 0 and r1["fresh_tokens"] > 0 and r1["committed"]
    first = {r[0]: r for r in rows(tmp_path / "out.parquet")}
    first_hash = hashes(tmp_path / "out.parquet")
    assert set(first_hash) == set(first) and spark.read.parquet(str(tmp_path / "out.parquet")).columns == FIELDS
    assert len(first) == n_en and first[3][1:4] == (None, None, None)  # the NULL rule: NULL body, NULL values

    # id 1 edited, ids 28-29 gone, ids 30-33 new (33 is 'fr': filtered out)
    pq.write_table(pa.concat_tables([notes(28, edit={1: "Broken screen, I want my money back."}),
                                     notes(4, start=30)]), tmp_path / "notes.parquet")
    r2 = enrich(spark, spec)
    new = {r[0]: r for r in rows(tmp_path / "out.parquet")}
    assert (r2["rows_enriched"], r2["rows_skipped"]) == (1 + 3, len(new) - 4)
    assert 28 not in new and 29 not in new and 33 not in new and {30, 31, 32} <= set(new)
    assert all(new[i] == first[i] for i in new if i in first and i != 1)  # kept: the very same values
    assert hashes(tmp_path / "out.parquet")[1] != first_hash[1]  # new content hash

    clean = enrich(spark, write_spec(tmp_path, "clean.json", output="clean.parquet"))
    assert clean["rows_enriched"] == len(new)
    assert_same_rows(rows(tmp_path / "out.parquet"), rows(tmp_path / "clean.parquet"))
    assert spark.read.parquet(str(tmp_path / "out.parquet")).count() == len(new)  # Spark follows the link

    # a changed spec recomputes only the changed column: the others keep their values
    r3 = enrich(spark, write_spec(tmp_path, columns={**COLUMNS, "p": "ai_score('Is {0} polite?', body)"}))
    assert r3["rows_enriched"] == len(new) and r3["requested_tokens"] < r1["requested_tokens"]
    after = {r[0]: r for r in rows(tmp_path / "out.parquet")}
    assert all(after[i][1:3] == new[i][1:3] for i in new)
    report = json.loads((tmp_path / "out.parquet.report.json").read_text())
    assert {"rows_read", "rows_skipped", "rows_enriched", "rows_errored", "rows_truncated", "requested_tokens",
            "fresh_tokens", "kv_regret_tokens", "wall_s", "spec_hash"} <= set(report)
    versions = sorted(p.name for p in (tmp_path / "out.parquet.versions").iterdir() if p.is_dir())
    assert len(versions) == 3 and versions[-1].startswith("v000003-")


def test_a_missing_or_damaged_state_recomputes_every_row_and_an_old_hash_column_is_read_once(spark, tmp_path):
    pq.write_table(notes(12), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path)
    n = enrich(spark, spec)["rows_read"]
    out, versions = tmp_path / "out.parquet", tmp_path / "out.parquet.versions"
    want = rows(out)

    # an output written when the hashes were a column: they are used, and the rewrite leaves them out
    old = versions / "v000002-old"
    old.mkdir()
    h = hashes(out)
    t = pq.read_table(out).replace_schema_metadata(None)  # Spark would read its schema from that metadata
    pq.write_table(t.append_column("_ai_hash", pa.array([h[k] for k in t["id"].to_pylist()])),
                   old / "part-0.parquet")
    (old / "_SUCCESS").touch()
    (tmp_path / "link.tmp").symlink_to(os.path.relpath(old, tmp_path))
    os.replace(tmp_path / "link.tmp", out)
    assert enrich(spark, spec)["rows_skipped"] == n
    assert_same_rows(rows(out), want)
    assert hashes(out) == h

    shutil.rmtree(out / "_ai_state")  # deleted: every row is recomputed, to the same values
    assert enrich(spark, spec)["rows_enriched"] == n
    assert_same_rows(rows(out), want)
    for p in (out / "_ai_state").glob("*.parquet"):  # damaged
        p.write_bytes(b"not parquet")
    assert enrich(spark, spec)["rows_enriched"] == n
    assert_same_rows(rows(out), want)
    assert enrich(spark, spec)["rows_skipped"] == n


def test_rows_that_cannot_be_scored_get_ai_error_and_the_job_goes_on(spark, tmp_path):
    body = [f"Note {i}: the parcel came late.".encode() for i in range(8)]
    body[2] = ("word " * 300).encode()      # over-long for max_prompt_tokens
    body[5] = b"\xff\xfe not utf-8"          # undecodable
    pq.write_table(pa.table({"id": list(range(8)), "body": pa.array(body, pa.binary())}),
                   tmp_path / "notes.parquet")
    cols = {"complaint": COLUMNS["complaint"]}
    spec = write_spec(tmp_path, columns=cols, where=None, engine={"max_prompt_tokens": 200})
    r = enrich(spark, spec)
    assert (r["rows_errored"], r["rows_enriched"]) == (2, 6)
    err = {x["id"]: x["_ai_error"] for x in pq.read_table(tmp_path / "out.parquet").to_pylist()}
    assert "prompt too long" in err[2] and "complaint:" in err[2]
    assert "undecodable text in column 'body'" in err[5]
    assert all(err[i] is None for i in (0, 1, 3, 4, 6, 7))
    before = rows_of(tmp_path / "out.parquet")

    # --fail-on-error: the errored rows (always retried) fail the run and nothing is committed
    with pytest.raises(EnrichFailed, match="2 row"):
        enrich(spark, spec, fail_on_error=True)
    assert rows_of(tmp_path / "out.parquet") == before
    assert json.loads((tmp_path / "out.parquet.report.json").read_text())["committed"] is False

    trunc = enrich(spark, write_spec(tmp_path, "t.json", output="t.parquet", columns=cols, where=None,
                                     engine={"max_prompt_tokens": 200, "on_overflow": "truncate"}))
    assert (trunc["rows_truncated"], trunc["rows_errored"]) == (1, 1)


def rows_of(path):
    return sorted(map(json.dumps, pq.read_table(path).to_pylist()))


def test_job_values_equal_spark_sql_with_the_installed_functions(spark, tmp_path):
    """SmolLM2 on a few short rows: the job and spark.sql render and score the same prompts."""
    import quail_spark

    data = notes(6)
    pq.write_table(data, tmp_path / "notes.parquet")
    enrich(spark, write_spec(tmp_path, where=None, model="smollm2-135m"))
    got = {r[0]: r[1:4] for r in rows(tmp_path / "out.parquet")}
    quail_spark.install(spark, model="smollm2-135m", device="cpu")
    spark.read.parquet(str(tmp_path / "notes.parquet")).createOrReplaceTempView("enrich_notes")
    want = spark.sql(f"SELECT id, {COLUMNS['complaint']}, {COLUMNS['label']}, {COLUMNS['p']} "
                     "FROM enrich_notes").collect()
    for r in want:
        c, label, p = got[r[0]]
        assert (c, label) == (r[1], r[2]), r[0]
        assert p == pytest.approx(r[3], abs=1e-5) if p is not None else r[3] is None


def test_iceberg_output_commits_one_snapshot_per_run(spark, tmp_path):
    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog import load_catalog

    pq.write_table(notes(12), tmp_path / "notes.parquet")
    enrich(spark, write_spec(tmp_path, "p.json", output="p.parquet"))
    spec = write_spec(tmp_path, output="iceberg:ai.notes")
    r1 = enrich(spark, spec)
    cat = load_catalog("quail", type="sql", uri=f"sqlite:///{tmp_path / 'quail_catalog.db'}",
                       warehouse=(tmp_path / "warehouse").as_uri())
    table = cat.load_table("ai.notes")
    assert table.schema().column_names == FIELDS
    got = sorted(tuple(r[f] for f in FIELDS) for r in table.scan().to_arrow().to_pylist())
    assert_same_rows(got, rows(tmp_path / "p.parquet"))
    assert r1["rows_enriched"] == len(got)
    assert len(table.snapshots()) == 1 and (tmp_path / "ai_notes.report.json").exists()

    pq.write_table(notes(12, edit={1: "Broken screen, I want my money back."}), tmp_path / "notes.parquet")
    r2 = enrich(spark, spec)
    table = cat.load_table("ai.notes")
    assert (r2["rows_enriched"], len(table.snapshots())) == (1, 2)
    assert table.scan().to_arrow().num_rows == len(got)
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert table.schema().column_names == FIELDS
    state = cat.load_table("ai.notes__ai_state")
    assert state.schema().column_names == ["id", "_ai_hash", "_ai_row"]
    assert state.scan().to_arrow().num_rows == len(got)

    cat.drop_table("ai.notes__ai_state")  # no state: every row is recomputed, never an error
    assert enrich(spark, spec)["rows_enriched"] == len(got)

    # the table's columns follow the spec: one dropped, one's type changed (ai_if -> ai_score), one added
    cols = {"complaint": "ai_score('Is {0} a complaint?', body)", "p": COLUMNS["p"], "short": COLUMNS["complaint"]}
    enrich(spark, write_spec(tmp_path, columns=cols, output="iceberg:ai.notes"))
    t = cat.load_table("ai.notes").scan().to_arrow()
    assert t.column_names == ["id", "complaint", "p", "short", "_ai_error"]
    assert t.schema.field("complaint").type == pa.float64() and t.num_rows == len(got)


def test_a_batch_that_fails_on_the_last_attempt_becomes_row_errors(spark, tmp_path):
    """local[2] gives a task one attempt: an engine that cannot load fails every batch on its last
    attempt; the rows carry why and the job commits the others' values (none here)."""
    pq.write_table(notes(6), tmp_path / "notes.parquet")
    r = enrich(spark, write_spec(tmp_path, where=None, model=str(tmp_path / "no-such-model")))
    got = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert r["rows_errored"] == 6 - 1 and len(got) == 6  # id 3 is NULL: no prompt, no error
    assert all("batch failed after 1 attempt(s)" in x["_ai_error"] for x in got if x["id"] != 3)
    assert r["error_examples"]


def test_json_lines_csv_and_catalog_table_inputs_give_the_parquet_rows(spark, tmp_path):
    data = notes(5)
    pq.write_table(data, tmp_path / "notes.parquet")
    cols = {"complaint": COLUMNS["complaint"]}
    enrich(spark, write_spec(tmp_path, columns=cols, where=None))
    want = rows_of_fields(tmp_path / "out.parquet")
    with open(tmp_path / "notes.jsonl", "w") as f:
        for r in data.to_pylist():
            f.write(json.dumps(r) + "\n")
    data.to_pandas().to_csv(tmp_path / "notes.csv", index=False)
    spark.read.parquet(str(tmp_path / "notes.parquet")).createOrReplaceTempView("enrich_input")
    for src in ("notes.jsonl", "notes.csv", "enrich_input"):
        out = src.replace(".", "_") + ".parquet"
        enrich(spark, write_spec(tmp_path, src + ".json", input=src, output=out, columns=cols, where=None))
        assert rows_of_fields(tmp_path / out) == want, src

    # names Spark reads as paths or spells otherwise: a dot in the key and in a document column (written
    # in backquotes), the spec's key in another case; a rerun matches every row
    dotted = data.rename_columns(["user.id", "msg.body", "lang"])
    pq.write_table(dotted, tmp_path / "dotted.parquet")
    spec = write_spec(tmp_path, "dotted.json", input="dotted.parquet", output="dotted_out.parquet", key="USER.ID",
                      columns={"complaint": "ai_if('Is {0} a complaint?', `msg.body`)"}, where=None)
    assert enrich(spark, spec)["rows_enriched"] == 5
    got = pq.read_table(tmp_path / "dotted_out.parquet")
    assert got.column_names == ["user.id", "complaint", "_ai_error"]
    assert sorted(zip(*got.to_pydict().values())) == want
    again = enrich(spark, spec)
    assert (again["rows_skipped"], again["warnings"]) == (5, [])


def rows_of_fields(path):
    return sorted((r["id"], r["complaint"], r["_ai_error"]) for r in pq.read_table(path).to_pylist())


def test_expression_arguments_are_computed_by_spark_and_hashed_by_value(spark, tmp_path):
    """An AI call over concat(...) / upper(...): the values spark.sql gives for the same expressions; a
    rerun recomputes exactly the rows whose expression value changed; a bad expression is named."""
    import quail_spark
    from quail_spark.enrich import SpecError, load_spec

    cols = {"c": "ai_if('Is {0} a complaint?', concat(title, ': ', body))",
            "s": "ai_score('Does {0} mention {1}?', body, upper(title))"}
    data = notes(12).append_column("title", pa.array([None if i == 5 else f"ticket {i % 4}" for i in range(12)]))
    pq.write_table(data, tmp_path / "notes.parquet")
    spec = write_spec(tmp_path, columns=cols, where=None)
    r1 = enrich(spark, spec)
    out = {r["id"]: (r["c"], r["s"], r["_ai_error"]) for r in pq.read_table(tmp_path / "out.parquet").to_pylist()}
    assert pq.read_table(tmp_path / "out.parquet").column_names == ["id", "c", "s", "_ai_error"]
    assert r1["rows_enriched"] == 12 and out[5][:2] == (None, None)  # NULL title: concat and upper are NULL

    quail_spark.install(spark, model="tiny-llama-random", device="cpu")
    spark.read.parquet(str(tmp_path / "notes.parquet")).createOrReplaceTempView("expr_notes")
    want = {r[0]: r[1:] for r in spark.sql(f"SELECT id, {cols['c']}, {cols['s']} FROM expr_notes").collect()}
    assert {k: v[0] for k, v in out.items()} == {k: v[0] for k, v in want.items()}
    assert {v[0] for v in want.values()} == {True, False, None}  # both answers: the comparison can fail
    for k, v in want.items():
        assert out[k][1] == pytest.approx(v[1], abs=1e-5) if v[1] is not None else out[k][1] is None

    # a new title for id 2 changes both expressions of that row only
    edited = data.set_column(data.column_names.index("title"), "title",
                             pa.array([None if i == 5 else ("urgent" if i == 2 else f"ticket {i % 4}") for i in range(12)]))
    pq.write_table(edited, tmp_path / "notes.parquet")
    r2 = enrich(spark, spec)
    assert (r2["rows_enriched"], r2["rows_skipped"]) == (1, 11)

    for expr, why in [("ai_if('Is {0} ok?', concat(nope, body))", r"column 'c': argument 'CONCAT\(nope, body\)'.*nope"),
                      ("ai_if('Is {0} ok?', length(body))", r"argument 'LENGTH\(body\)' is int")]:
        with pytest.raises(SpecError, match=why):
            enrich(spark, write_spec(tmp_path, "bad.json", columns={"c": expr}, where=None))
    assert load_spec(spec).columns[0].derived  # (the spec itself parsed the expression)
