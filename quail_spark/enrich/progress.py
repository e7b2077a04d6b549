"""Driver-side progress of a running enrichment: one line every few seconds.

Executors rewrite one small JSON record per task attempt in the run's progress
folder (``ai_stage.Progress``); a daemon thread here sums the newest attempt of
each partition, adds Spark's task counts (``statusTracker``) and prints (``quail_spark.progress``)::

    enrich: 1,536/20,000 rows (7.7%), 9,870 tokens/s, 412 rows/s, ~45 s left, AI tasks 1/10
"""
from __future__ import annotations

import json
import os
import sys
import time

from quail_spark.progress import Ticker, tasks_text


def read_records(folder: str) -> dict:
    """partition -> the record of its newest attempt."""
    best: dict = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    for name in names:
        if not name.endswith(".json"):
            continue
        part, attempt = name[1:-5].split("-a")
        try:
            with open(os.path.join(folder, name)) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if int(attempt) >= best.get(part, (-1, None))[0]:
            best[part] = (int(attempt), rec)
    return {p: r for p, (_, r) in best.items()}


def totals(folder: str) -> dict:
    out: dict = {}
    for rec in read_records(folder).values():
        for k, v in rec.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("t", "start", "pid"):
                out[k] = out.get(k, 0) + v
    return out


class ProgressLine:
    """Prints the progress line every ``every_s`` seconds from :meth:`start` until :meth:`stop`."""

    def __init__(self, sc, folder: str, total_rows: int, every_s: float = 10.0, out=sys.stderr):
        self.sc, self.folder, self.total, self.out = sc, folder, total_rows, out
        self.ticker = Ticker(lambda: print(self.line(), file=self.out, flush=True), every_s, "quail-enrich-progress")
        self.t0 = time.time()

    def start(self) -> None:
        self.ticker.start()

    def stop(self) -> None:
        self.ticker.stop()

    def line(self) -> str:
        t = totals(self.folder)
        done, dt = int(t.get("rows", 0)), max(time.time() - self.t0, 1e-9)
        rate = done / dt
        left = f"~{(self.total - done) / rate:.0f} s left" if rate > 0 else "starting"
        pct = 100.0 * done / self.total if self.total else 100.0
        return (f"enrich: {done:,}/{self.total:,} rows ({pct:.1f}%), {t.get('requested_tokens', 0) / dt:,.0f} "
                f"tokens/s, {rate:,.0f} rows/s, {left}{tasks_text(self.sc) if self.sc is not None else ''}")
