"""A previous Parquet output that cannot be trusted: a data page of an AI column damaged, its version
folder gone, or a rerun state that does not describe its rows (an older version's state put in place, a
hash edited, the state deleted). Each is reported (one warning naming it), every row is recomputed, the
output holds one row per input key with the values of a clean run, and the next run is clean."""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .helpers import assert_same_rows, enrich, notes, rows, write_spec


def data_file(out: Path) -> Path:
    return sorted(p for p in out.resolve().glob("part-*.parquet") if pq.read_metadata(p).num_rows)[0]


def damage_column(path: Path, name: str) -> None:
    """Change bytes of column ``name``'s first data page; footer and key column intact, no .crc."""
    meta = pq.read_metadata(path).row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == name)
    data = bytearray(path.read_bytes())
    for i in range(chunk.data_page_offset, chunk.data_page_offset + min(24, chunk.total_compressed_size)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def edit_state_hash(out: Path) -> None:
    """Rewrite one key's ``_ai_hash`` in the committed state (a hand edit)."""
    state = out.resolve() / "_ai_state"
    f = sorted(p for p in state.glob("part-*.parquet") if pq.read_metadata(p).num_rows)[0]
    t = pq.read_table(f)
    h = t["_ai_hash"].to_pylist()
    h[0] = h[0].replace(h[0][-18:-2], "0" * 16)
    pq.write_table(t.set_column(t.column_names.index("_ai_hash"), "_ai_hash", [h]), f)
    f.with_name(f".{f.name}.crc").unlink(missing_ok=True)


@pytest.fixture
def outputs(spark, tmp_path):
    """(spec of the output under test, the rows a clean run gives, rows read): the output committed twice,
    the second time after an edit of id 1, so an older state exists."""
    pq.write_table(notes(10), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path)
    enrich(spark, spec)
    shutil.copytree(tmp_path / "out.parquet" / "_ai_state", tmp_path / "old_state")
    pq.write_table(notes(10, edit={1: "Broken screen, I want my money back."}), tmp_path / "notes.parquet")
    enrich(spark, spec)
    pq.write_table(notes(10), tmp_path / "notes.parquet")  # id 1 back to the text the old state hashed
    clean = enrich(spark, write_spec(tmp_path, "clean.json", output="clean.parquet"))
    return spec, rows(tmp_path / "clean.parquet"), clean["rows_read"]


def recomputed(spark, spec, what: str, n: int) -> None:
    r = enrich(spark, spec)
    assert len(r["warnings"]) == 1 and what in r["warnings"][0], r["warnings"]
    assert "every row is recomputed" in r["warnings"][0]
    assert (r["rows_read"], r["rows_skipped"], r["rows_enriched"] + r["rows_errored"]) == (n, 0, n)
    again = enrich(spark, spec)
    assert (again["warnings"], again["rows_skipped"]) == ([], n)


@pytest.mark.parametrize("damage", ["page of an AI column", "version folder gone"])
def test_an_unreadable_previous_output_is_reported_and_recomputed(spark, tmp_path, outputs, damage):
    spec, want, n = outputs
    out = tmp_path / "out.parquet"
    if damage == "version folder gone":
        shutil.rmtree(out.resolve())
        what = "Path does not exist"
    else:
        damage_column(data_file(out), "label")
        what = f"previous output {out}: unreadable"
    recomputed(spark, spec, what, n)
    assert_same_rows(rows(out), want)


@pytest.mark.parametrize("damage", ["older state", "hash edited", "state deleted"])
def test_a_state_that_does_not_describe_the_output_is_reported_and_ignored(spark, tmp_path, outputs, damage):
    spec, want, n = outputs
    out = tmp_path / "out.parquet"
    state = out.resolve() / "_ai_state"
    if damage == "older state":  # its hash of id 1 matches the input again, not the value the output holds
        shutil.rmtree(state)
        shutil.copytree(tmp_path / "old_state", state)
        what = "stale rerun state of"
    elif damage == "hash edited":
        edit_state_hash(out)
        what = "stale rerun state of"
    else:
        shutil.rmtree(state)
        what = "has no rerun state"
    recomputed(spark, spec, what, n)
    assert_same_rows(rows(out), want)
