"""How a query's explain, report and progress look in a Jupyter notebook.

- :class:`Explain` is the explain text (a ``str``) that renders as HTML: each
  ``== section ==`` of Spark's plan folded in a ``<pre>``, the AI sections
  (filter order, join anchors, columns, speed-of-light estimate) as tables.
- :class:`Report` is a query's report (a ``dict``) that renders as a table of
  its counters and one of its AI stages.
- :class:`Progress` shows, while an action runs, what the executors have
  written to the session's metrics folder so far (rows evaluated, tokens, rate)
  and Spark's task counts: an HTML line updated in place in a kernel, a text
  line on stderr every ``every_s`` seconds elsewhere (nothing for a short action).
"""
from __future__ import annotations

import html
import re
import sys
import time

from quail_spark.progress import Ticker, tasks_text

SECTION = re.compile(r"^== (.*) ==$")


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter (IPython) kernel."""
    ip = sys.modules.get("IPython")
    shell = ip.get_ipython() if ip is not None and hasattr(ip, "get_ipython") else None
    return shell is not None and hasattr(shell, "kernel")


def table(rows, header=None) -> str:
    """An HTML table of ``rows`` (sequences of cells, escaped)."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header) if header else ""
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{_cell(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table>{f'<thead><tr>{head}</tr></thead>' if head else ''}<tbody>{body}</tbody></table>"


def _cell(c) -> str:
    if isinstance(c, float):
        return f"{c:,.3f}"
    if isinstance(c, int) and not isinstance(c, bool):
        return f"{c:,}"
    return html.escape(str(c))


def sections(text: str) -> list:
    """(title, lines) of each ``== title ==`` section of ``text``; lines before the first: title ''."""
    out = [("", [])]
    for line in text.splitlines():
        m = SECTION.match(line.strip())
        if m:
            out.append((m.group(1), []))
        else:
            out[-1][1].append(line)
    return [(t, lines) for t, lines in out if t or any(x.strip() for x in lines)]


class Explain(str):
    """Explain text; in a notebook, Spark's plans fold away and the AI sections are tables."""

    def _repr_html_(self) -> str:
        parts = []
        for title, lines in sections(self):
            if title.startswith("AI operators"):  # estimate / actual per operator (quail_spark.operators)
                head, *rows = [[c.strip() for c in x.split(" | ")] for x in lines if x.strip()]
                parts.append(f"<h4>{html.escape(title)}</h4>{table(rows, head)}")
            elif title.startswith(("AI ", "SoL")):
                rows = [[x.strip()] for x in lines if x.strip()]
                parts.append(f"<h4>{html.escape(title)}</h4>{table(rows)}")
            else:
                pre = html.escape("\n".join(lines).strip("\n"))
                parts.append(f"<details><summary>{html.escape(title or 'plan')}</summary><pre>{pre}</pre></details>")
        return "<div class='quail-explain'>" + "".join(parts) + "</div>"


class Report(dict):
    """A query's report; in a notebook, its counters and AI stages as tables."""

    def _repr_html_(self) -> str:
        if not self:
            return "<p>quail report: the query has not run yet (call collect())</p>"
        counters = [[k, v] for k, v in self.items() if k != "stages"]
        out = "<h4>quail report</h4>" + table(counters, ["counter", "value"])
        stages = self.get("stages") or {}
        if stages:
            rows = [[name, s.get("evaluated", 0), s.get("passed", 0)] for name, s in stages.items()]
            out += "<h4>AI stages</h4>" + table(rows, ["stage", "evaluated", "passed"])
        return out


class Progress:
    """Context manager: shows the AI work of ``spark`` since it was entered until it exits."""

    def __init__(self, spark, every_s: float | None = None, out=None):
        self.spark, self.kernel = spark, in_kernel()
        self.every_s = every_s if every_s is not None else (1.0 if self.kernel else 10.0)
        self.out = out or sys.stderr
        self._handle = None
        self._ticker = Ticker(lambda: self._show(self.line()), self.every_s)

    def __enter__(self) -> "Progress":
        from quail_spark.metrics import mark

        self.since, self.t0 = mark(self.spark), time.time()
        if self.kernel:  # the line is there from the start and updated in place
            self._show(self.line())
        self._ticker.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._ticker.stop()
        if self._handle is not None:  # the final figures stay in the cell
            self._show(self.line(done="failed" if exc and exc[0] is not None else "done"))
        return False

    def _show(self, line: str) -> None:
        if not self.kernel:
            print(line, file=self.out, flush=True)
            return
        from IPython.display import display

        body = {"text/html": f"<pre class='quail-progress'>{html.escape(line)}</pre>", "text/plain": line}
        if self._handle is None:
            self._handle = display(body, raw=True, display_id=True)
        else:
            self._handle.update(body, raw=True)

    def line(self, done: str | None = None) -> str:
        """``quail: 1,536 AI evaluations, 9,870 tokens (2,310 tokens/s), tasks 3/8, 4.3 s``; once the action
        ended, ``quail (done): ...`` or ``quail (failed): ...`` (``done``)."""
        from quail_spark.metrics import metrics

        now = metrics(self.spark, self.since)  # the work written since the action began
        rows = sum(s["evaluated"] for s in now["stages"].values())
        tokens = now["requested_tokens"]
        dt = max(time.time() - self.t0, 1e-9)
        tasks = "" if done else tasks_text(lambda: self.spark.sparkContext)
        return (f"quail{f' ({done})' if done else ''}: {rows:,} AI evaluations, {tokens:,} tokens "
                f"({tokens / dt:,.0f} tokens/s){tasks}, {dt:.1f} s")
