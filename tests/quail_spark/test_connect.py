"""Spark Connect: install(), spark.sql and QuailSession under ``builder.remote("local[2]")`` give
the rows of the classic session, the decode calls' included (the Connect session runs in a subprocess: connect_queries.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("grpc", reason="Spark Connect needs the pyspark[connect] extra (grpcio ...)")

import connect_queries  # noqa: E402  (beside this file, like spark_fixtures)


def test_connect_gives_the_rows_of_the_classic_session(spark, qs, connect_results):
    classic = connect_queries.run(spark)  # (the Connect session's subprocess may be running meanwhile)
    got = connect_results()["connect"]
    assert got["rows"] == classic["rows"]
    decoded = classic["rows"]["decode"]  # ai_extract's fields and ai_generate's text; NULL for the NULL note
    assert len(decoded) == 4 and sum(r[3] is None for r in decoded) == 1 and any(r[3] for r in decoded)
    assert got["rewritten"] and classic["rewritten"]  # the extension's rules run in the Connect server
    assert got["explain"] and got["report"]["requested_tokens"] >= 0
