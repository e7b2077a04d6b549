"""The report of one enrichment run: printed, and written as JSON beside the output."""
from __future__ import annotations

import json
import os

FIELDS = (
    ("rows_read", "input rows (after 'where')"),
    ("rows_skipped", "kept from the previous output (unchanged key, content and spec)"),
    ("rows_enriched", "computed by this run without error"),
    ("rows_errored", "computed with _ai_error set"),
    ("rows_truncated", "documents cut to fit the model (on_overflow='truncate'), per AI column"),
    ("requested_tokens", "full prompt lengths"),
    ("fresh_tokens", "tokens the model computed"),
    ("reused_tokens", "prompt tokens read from cached KV"),
    ("kv_regret_tokens", "fresh tokens beyond each distinct prefix once"),
    ("forward_passes", "passes of the model"),
    ("output_tokens", "tokens decoded (ai_generate, ai_extract, ai_summarize)"),
    ("decode_steps", "decode steps"),
    ("preemptions", "decoding sequences recomputed for room in the KV pool"),
    ("wall_s", "seconds, whole run"),
    ("ai_wall_s", "seconds, AI stage and write"),
    ("rows_per_s", "computed rows per second of the AI stage"),
    ("tokens_per_s", "requested tokens per second of the AI stage"),
)


def summary(report: dict) -> str:
    """The printed form.

    >>> print(summary({"output": "o.parquet", "rows_read": 3, "spec_hash": "ab"}).splitlines()[0])
    enrich o.parquet: committed (spec ab)
    """
    state = "committed" if report.get("committed", True) else "NOT committed"
    lines = [f"enrich {report.get('output', '?')}: {state} (spec {report.get('spec_hash', '?')})"]
    for key, what in FIELDS:
        if key in report:
            v = report[key]
            lines.append(f"  {key:<18} {v:>14,.1f}  {what}" if isinstance(v, float)
                         else f"  {key:<18} {v:>14,}  {what}")
    for e in report.get("error_examples", []):
        lines.append(f"  error: {e}")
    return "\n".join(lines)


def write(report: dict, path: str) -> None:
    """Atomically replace the JSON report at ``path``."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
