"""Exit status and messages of ``quail-spark enrich`` (run in this process on the shared session):
2 for a bad spec or input (nothing left behind), 3 when another live process holds the output's lock,
1 for errored rows under --fail-on-error; one line on stderr, a traceback only with --debug."""
from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail_spark.cli import main

from .helpers import REPO, notes, write_spec


def failure(capsys, *argv) -> tuple:
    """(exit status, the command's own stderr lines) of ``quail-spark enrich ...`` (progress lines and
    a traceback, if any, are left out; there is none without --debug)."""
    capsys.readouterr()
    code = main(["enrich", *map(str, argv)])
    err = capsys.readouterr().err
    assert ("Traceback" in err) == ("--debug" in argv), err
    return code, [x for x in err.splitlines() if x.startswith("quail-spark ")]


def test_a_bad_input_or_spec_exits_2_with_one_line_and_leaves_nothing(spark, tmp_path, capsys):
    spec = write_spec(tmp_path, input="missing.parquet", where=None)
    code, err = failure(capsys, spec)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("quail-spark enrich: input 'missing.parquet'") and "missing.parquet" in err[0]
    code, err = failure(capsys, spec, "--debug")  # the traceback, then the line
    assert code == 2 and len(err) == 1 and "missing.parquet" in err[0]

    pq.write_table(notes(6), tmp_path / "notes.parquet")
    code, err = failure(capsys, write_spec(tmp_path, key="no_such_id"))
    assert code == 2 and len(err) == 1 and "key 'no_such_id' is not an input column" in err[0], err
    pq.write_table(pa.table({"id": [1, 1, 2], "body": ["a", "b", "c"]}), tmp_path / "dup.parquet")
    code, err = failure(capsys, write_spec(tmp_path, input="dup.parquet", where=None))
    assert code == 2 and len(err) == 1 and "must be unique" in err[0] and "1 (2 rows)" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dup.parquet", "notes.parquet", "spec.json"]


def test_a_held_lock_exits_3_and_errored_rows_exit_1_under_fail_on_error(spark, tmp_path, capsys):
    body = ["Note 0: the parcel came late.", "word " * 300]  # row 1 is over-long for max_prompt_tokens
    pq.write_table(pa.table({"id": [0, 1], "body": body}), tmp_path / "notes.parquet")
    spec = write_spec(tmp_path, where=None, columns={"c": "ai_if('Is {0} a complaint?', body)"},
                      engine={"max_prompt_tokens": 200})
    out = tmp_path / "out.parquet"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from quail_spark.enrich.guard import WriterLock; v = Path(sys.argv[1]); "
         "lock = WriterLock(v, v, 'out'); lock.acquire(); print('locked', flush=True); time.sleep(120)",
         f"{out}.versions"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, err = failure(capsys, spec)
        assert code == 3 and len(err) == 1, err
        assert f"another run is writing {out}" in err[0] and ".lock" in err[0]
    finally:
        holder.kill()
        holder.wait()
    assert not out.exists()

    code, err = failure(capsys, spec, "--fail-on-error")
    assert code == 1 and len(err) == 1 and "1 row(s) could not be scored" in err[0], err
    assert not out.exists() and json.loads((tmp_path / "out.parquet.report.json").read_text())["committed"] is False
    assert main(["enrich", str(spec)]) == 0 and pq.read_table(out).num_rows == 2


def test_the_help_lists_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["enrich", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 done; 1 rows errored under --fail-on-error" in text
    assert "2 bad spec or input, or the estimate exceeds the spec's budget (nothing ran)" in text
    assert "3 another run holds the output; 4 internal error, or the run passed the spec's budget" in text
