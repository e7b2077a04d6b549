"""Spark Connect: install(), spark.sql and QuailSession under ``builder.remote("local[2]")`` give
the rows of the classic session, the decode calls' included (the Connect session runs in a subprocess: connect_queries.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grpc", reason="Spark Connect needs the pyspark[connect] extra (grpcio ...)")

import connect_queries  # noqa: E402  (beside this file, like spark_fixtures)

ROOT = Path(__file__).resolve().parents[2]


def test_connect_gives_the_rows_of_the_classic_session(spark, qs):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "SPARK_TESTING": "1"}  # an ephemeral gRPC port: no clash with another local server
    proc = subprocess.Popen([sys.executable, connect_queries.__file__], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        classic = connect_queries.run(spark)  # meanwhile, in the classic session
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["rows"] == classic["rows"]
    decoded = classic["rows"]["decode"]  # ai_extract's fields and ai_generate's text; NULL for the NULL note
    assert len(decoded) == 4 and sum(r[3] is None for r in decoded) == 1 and any(r[3] for r in decoded)
    assert got["rewritten"] and classic["rewritten"]  # the extension's rules run in the Connect server
    assert got["explain"] and got["report"]["requested_tokens"] >= 0
