"""Rebuild the quickstart tables from Python's own documentation (``pydoc_data.topics``).

    python jobs/data/build_python_topics.py

Writes ``python_topics.jsonl`` (topic, title, kind, text: the first ~300
characters of the topic's text, whitespace collapsed) and ``keywords.jsonl``.
The shipped files were made with CPython 3.11; see README.md for the license.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOPICS = ("for", "while", "if", "try", "raise", "with", "return", "yield", "assert", "del", "pass",
          "break", "continue", "global", "nonlocal", "import", "class", "function", "lambda",
          "assignment", "comparisons", "booleans", "calls", "exceptions", "async", "await",
          "context-managers", "slicings", "formatstrings", "string-methods", "typesmapping",
          "typesseq", "truth", "numbers", "integers", "floating", "strings", "dict", "lists",
          "identifiers")
KEYWORDS = ("loop", "error handling", "function", "string", "number", "dictionary", "class",
            "module")
CHARS = 300


def kind_of(title: str) -> str:
    t = title.lower()
    if "statement" in t:
        return "statement"
    if "literal" in t:
        return "literal"
    if "type" in t or "methods" in t:
        return "type"
    if "definition" in t:
        return "definition"
    return "expression"


def row(topic: str, raw: str) -> dict:
    lines = raw.strip().splitlines()
    title = lines[0].strip()
    body = re.sub(r"\s+", " ", "\n".join(lines[2:])).strip()
    if len(body) > CHARS:
        body = body[: body.rfind(" ", 0, CHARS)] + " ..."
    return {"topic": topic, "title": title, "kind": kind_of(title), "text": body}


def main() -> None:
    from pydoc_data.topics import topics

    with open(HERE / "python_topics.jsonl", "w") as f:
        for i, name in enumerate(TOPICS, 1):
            f.write(json.dumps({"id": i, **row(name, topics[name])}) + "\n")
    with open(HERE / "keywords.jsonl", "w") as f:
        for i, term in enumerate(KEYWORDS, 1):
            f.write(json.dumps({"kid": i, "term": term}) + "\n")


if __name__ == "__main__":
    main()
