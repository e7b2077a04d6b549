"""Enrichment with decode columns (ai_extract, ai_generate, ai_summarize) into Parquet, Delta and Iceberg:
struct and string columns read back with their types and the values of with_ai_columns over the same
rows; a rerun computes only the edited row, and a changed column only that column; fields cut at
max_tokens stay named in _ai_error on rows a rerun keeps."""
from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .helpers import enrich, hashes, notes, write_spec

TINY = {"model": "tiny-llama-random", "device": "cpu", "seed": 1}
COLS = {"rec": "ai_extract(body, 'name STRING, days INT, seen DATE, ok BOOLEAN', map('max_tokens', 12))",
        "reply": "ai_generate('Reply in one line to {0}', body, map('max_tokens', 6))",
        "gist": "ai_summarize(body, 3)"}
FIELDS = ["id", "rec", "reply", "gist", "_ai_error"]
REC = pa.struct([("name", pa.string()), ("days", pa.int32()), ("seen", pa.date32()), ("ok", pa.bool_())])
EDIT = {1: "Broken screen, I want my money back within 3 days."}


def spec(tmp_path, name="spec.json", **over):
    return write_spec(tmp_path, name, **{"columns": COLS, "engine": {"seed": 1}, **over})


def by_id(table: pa.Table) -> dict:
    assert table.column_names == FIELDS, table.column_names
    return {r["id"]: r for r in table.to_pylist()}


def check_types(table: pa.Table) -> None:
    t = table.schema
    plain = pa.struct([pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type)
                       for f in t.field("rec").type])
    assert plain == REC and str(t.field("reply").type) in ("string", "large_string")


@pytest.fixture(scope="module")
def want(spark, tmp_path_factory):
    """with_ai_columns over the input of the runs (before and after the edit): what every output holds."""
    import quail_spark

    out = {}
    for name, table in (("first", notes(12)), ("edited", notes(12, edit=EDIT))):
        df = spark.createDataFrame(table.to_pandas()).where("lang = 'en'")
        got = quail_spark.with_ai_columns(df, COLS, **TINY).drop("body", "lang").collect()
        out[name] = {r["id"]: r.asDict(recursive=True) for r in got}
    return out


def test_parquet_struct_columns_and_an_incremental_rerun(spark, tmp_path, want):
    pq.write_table(notes(12), tmp_path / "notes.parquet")
    s = spec(tmp_path)
    r1 = enrich(spark, s)
    t = pq.read_table(tmp_path / "out.parquet")
    check_types(t)
    first = by_id(t)
    assert first == want["first"] and r1["rows_read"] == len(first)
    assert any(v["rec"] and isinstance(v["rec"]["seen"], dt.date) for v in first.values())
    cut = [k for k, v in first.items() if v["_ai_error"] and "cut at max_tokens 12" in v["_ai_error"]]
    assert cut and r1["rows_errored"] == len(cut)  # a cut field is a reason on its row
    # the report counts the decoding: every row's struct, text and summary took tokens and steps
    assert r1["output_tokens"] > 2 * len(first) and r1["decode_steps"] > 0 and r1["preemptions"] >= 0

    pq.write_table(notes(12, edit=EDIT), tmp_path / "notes.parquet")
    r2 = enrich(spark, s)  # one row edited: only it is computed; kept rows keep their values and reasons
    second = by_id(pq.read_table(tmp_path / "out.parquet"))
    assert (r2["rows_enriched"] + r2["rows_errored"], r2["rows_skipped"]) == (1, len(first) - 1)
    assert second == want["edited"]
    assert all(second[k] == first[k] for k in first if k != 1)

    # a changed ai_generate recomputes that column alone: the struct keeps its values and hash
    h2 = hashes(tmp_path / "out.parquet")
    r3 = enrich(spark, spec(tmp_path, columns={**COLS, "reply": COLS["reply"].replace("6)", "5)")}))
    third = by_id(pq.read_table(tmp_path / "out.parquet"))
    h3 = hashes(tmp_path / "out.parquet")
    assert r3["rows_skipped"] == 0 and 0 < r3["requested_tokens"] < r1["requested_tokens"]
    assert 0 < r3["output_tokens"] < r1["output_tokens"]  # the replies alone were decoded again
    assert all(third[k]["rec"] == second[k]["rec"] and third[k]["gist"] == second[k]["gist"] for k in second)
    assert all(third[k]["_ai_error"] == second[k]["_ai_error"] for k in second)  # the struct's reasons kept
    assert any(third[k]["reply"] != second[k]["reply"] for k in second if second[k]["reply"])
    old, new = ({k: json.loads(v) for k, v in h.items()} for h in (h2, h3))
    assert all(new[k]["rec"] == old[k]["rec"] and new[k]["reply"] != old[k]["reply"] for k in old)


def test_delta_and_iceberg_hold_the_same_struct_rows(spark, tmp_path, want):
    deltalake = pytest.importorskip("deltalake")
    pq.write_table(notes(12), tmp_path / "notes.parquet")
    enrich(spark, spec(tmp_path, output="delta:out"))
    t = deltalake.DeltaTable(str(tmp_path / "out")).to_pyarrow_table()
    check_types(t)
    assert by_id(t) == want["first"]
    pq.write_table(notes(12, edit=EDIT), tmp_path / "notes.parquet")
    r = enrich(spark, spec(tmp_path, output="delta:out"))
    assert r["rows_enriched"] + r["rows_errored"] == 1
    assert by_id(deltalake.DeltaTable(str(tmp_path / "out")).to_pyarrow_table()) == want["edited"]

    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog import load_catalog

    r1 = enrich(spark, spec(tmp_path, "ice.json", output="iceberg:ai.notes"))
    cat = load_catalog("quail", type="sql", uri=f"sqlite:///{tmp_path / 'quail_catalog.db'}",
                       warehouse=(tmp_path / "warehouse").as_uri())
    t = cat.load_table("ai.notes").scan().to_arrow()
    check_types(t)
    assert by_id(t) == want["edited"] and r1["rows_skipped"] == 0
    r2 = enrich(spark, spec(tmp_path, "ice.json", output="iceberg:ai.notes"))
    assert r2["rows_skipped"] == len(want["edited"]) and r2["requested_tokens"] == 0
    assert by_id(cat.load_table("ai.notes").scan().to_arrow()) == want["edited"]
