"""A damaged rerun state (a file doubled, bytes changed with the footer intact, garbage) or a previous
Parquet output that holds a key twice: the run warns naming it, recomputes, and commits exactly one row
per key with the values of an uninterrupted run; the next run is clean."""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .helpers import assert_same_rows, enrich, notes, rows, write_spec

COLS = {"complaint": "ai_if('Is {0} a complaint?', body)", "label": "ai_classify(body, array('bug', 'praise'))",
        "p": "ai_score('Is {0} about a delivery?', body)"}


def corrupt(path: Path) -> None:
    """Change bytes at the start of the first column chunk (page header and data); the footer is intact."""
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    end = len(data) - 8 - footer
    for i in range(4, min(4 + 48, end)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def state_files(out: Path) -> list:
    return sorted(p for p in (out / "_ai_state").glob("part-*.parquet") if pq.read_metadata(p).num_rows)


def damaged_run(spark, spec, what: str) -> dict:
    r = enrich(spark, spec)
    assert any(what in w for w in r["warnings"]), r["warnings"]
    assert r["rows_skipped"] == 0 and r["rows_enriched"] + r["rows_errored"] == r["rows_read"]
    return r


def test_a_damaged_state_or_a_doubled_output_is_reported_and_recomputed(spark, tmp_path, capfd):
    pq.write_table(notes(14), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path, columns=COLS)
    out = tmp_path / "out.parquet"
    enrich(spark, spec)
    # the input changes (an edit, new keys) and a state file is copied under a second name
    pq.write_table(notes(20, edit={1: "Broken screen, I want my money back."}), tmp_path / "notes.parquet")
    clean = enrich(spark, write_spec(tmp_path, "clean.json", output="clean.parquet", columns=COLS))
    want, n = rows(tmp_path / "clean.parquet"), clean["rows_read"]
    doubled = state_files(out)[0]
    shutil.copy(doubled, doubled.with_name("part-99999-copy.snappy.parquet"))
    state_dir = doubled.resolve().parent  # the committed version's, before the run swaps the link
    capfd.readouterr()
    damaged_run(spark, spec, "duplicated key id=")
    assert f"damaged rerun state {state_dir}: duplicated key id=" in capfd.readouterr().err
    assert_same_rows(rows(out), want)

    for how in ("bytes changed, .crc kept", "bytes changed, no .crc", "garbage"):
        f = state_files(out)[0]
        crc = f.with_name(f".{f.name}.crc")
        assert crc.exists()
        if how == "garbage":
            f.write_bytes(b"not parquet at all")
        else:
            corrupt(f)
        if how != "bytes changed, .crc kept":
            crc.unlink()
        damaged_run(spark, spec, f"unreadable file {f.resolve()}")
        assert_same_rows(rows(out), want)

    # a previous output written with a key twice (by an older version): the key is recomputed, once
    version = out.resolve()
    t = pq.read_table(version)
    pq.write_table(t.slice(0, 3), version / "part-99999-old.snappy.parquet")
    r = damaged_run_keys(spark, spec)
    assert_same_rows(rows(out), want)
    assert r["rows_enriched"] == 3 and r["rows_skipped"] == n - 3

    again = enrich(spark, spec)  # clean: the state is whole again
    assert (again["rows_skipped"], again["warnings"]) == (n, [])
    assert_same_rows(rows(out), want)


def damaged_run_keys(spark, spec) -> dict:
    r = enrich(spark, spec)
    assert len(r["warnings"]) == 1 and "holds key id=" in r["warnings"][0] and "(3 such key(s))" in r["warnings"][0]
    return r


def test_the_staged_output_is_checked_one_row_per_input_key(spark, tmp_path):
    from quail_spark.cli import exit_code
    from quail_spark.enrich.guard import OutputInvalid, check_output, key_figures

    inp = spark.createDataFrame([(1,), (2,), (3,)], "id long")
    pq.write_table(pa.table({"id": [1, 2, 2, 3]}), tmp_path / "doubled.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3, 4]}), tmp_path / "extra.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3]}), tmp_path / "good.parquet")
    want = key_figures(inp, "id")
    check_output(spark, "id", inp, want, str(tmp_path / "good.parquet"), "out")
    for name, said in (("doubled", "2 rows for id=2"), ("extra", "for id=4")):
        try:
            check_output(spark, "id", inp, want, str(tmp_path / f"{name}.parquet"), "out")
        except OutputInvalid as e:
            assert said in str(e) and "nothing committed" in str(e) and exit_code(e) == 4
        else:
            raise AssertionError(f"{name}: not detected")
