"""The progress line of long AI work, shown while it runs: a query's in a notebook or a terminal
(:class:`quail_spark.notebook.Progress`), an enrichment run's on stderr
(:class:`quail_spark.enrich.progress.ProgressLine`). Both tick here: one daemon thread calls ``show``
every few seconds until stopped, and a line never fails the work it follows.
"""
from __future__ import annotations

import threading
from typing import Callable


class Ticker:
    """Calls ``show()`` every ``every_s`` seconds on a daemon thread, from :meth:`start` to :meth:`stop`
    (which waits for the thread); a call that raises is skipped."""

    def __init__(self, show: Callable[[], None], every_s: float, name: str = "quail-progress"):
        self.show, self.every_s = show, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> "Ticker":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.show()
            except Exception:  # noqa: BLE001 - progress never fails the work it shows
                pass


def stage_tasks(sc) -> tuple:
    """(completed, all) tasks of the active stages of SparkContext ``sc``."""
    st = sc.statusTracker()
    done = total = 0
    for sid in st.getActiveStageIds():
        info = st.getStageInfo(sid)
        if info is not None:
            done, total = done + info.numCompletedTasks, total + info.numTasks
    return done, total


def tasks_text(sc) -> str:
    """', tasks done/total' of the active stages; '' without a SparkContext (Spark Connect) or stage."""
    try:
        done, total = stage_tasks(sc() if callable(sc) else sc)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return ""
    return f", tasks {done}/{total}" if total else ""
