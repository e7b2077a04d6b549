"""Data and reference evaluation shared by the Spark integration tests.

The reference ("naive") evaluation scores every (row, predicate) alone with a
driver-side engine that reuses nothing (prefix_cache=False), in written order.
"""
from __future__ import annotations

import numpy as np

NOTES = [  # id, body, year, kind
    (1, "The parcel arrived broken and nobody at the shop answers my emails.", 2021, "shop"),
    (2, "We took a lovely long walk in the park with our old dog.", 2019, "life"),
    (3, "Refund me now, this blender broke after two days and is junk.", 2022, "shop"),
    (4, "Python lists are mutable sequences that can hold any objects.", 2020, "code"),
    (5, "The cat sleeps all afternoon on the warm sofa by the window.", 2023, "life"),
    (6, "I love this phone, the battery lasts for days and the screen is bright.", 2024, "shop"),
    (7, None, 2022, "life"),
    (8, "Our football team won the match yesterday after a hard game.", 2018, "life"),
]
TERMS = [  # tid, term, kind
    (1, "a dog", "life"), (2, "a phone", "shop"), (3, "football", "life"), (4, "a kitchen", "shop"),
    (5, "programming", "code"), (6, "a cat", "life"), (7, "money", "shop"), (8, "the weather", "life"),
]
CATS = [(1, "pets"), (2, "shopping"), (3, "sports"), (4, "code")]  # cid, cat
UNCERTAIN = 1e-2  # naive |margin| below this: float rounding may flip the answer


class Naive:
    """Margins of single prompts (cached), their token counts, and set comparison."""

    def __init__(self, engine):
        self.eng = engine
        self._filter: dict = {}
        self._join: dict = {}

    def margins(self, docs, question: str) -> dict:
        """doc -> margin of ``question`` (NaN for None)."""
        todo = sorted({d for d in docs if d is not None and (d, question) not in self._filter})
        if todo:
            for d, m in zip(todo, self.eng.filter(todo, [question])[:, 0]):
                self._filter[(d, question)] = float(m)
        return {d: (np.nan if d is None else self._filter[(d, question)]) for d in docs}

    def join_margins(self, anchors, partners, question: str) -> dict:
        """(anchor, partner) -> margin of the join prompt."""
        a_todo = sorted({a for a in anchors if a is not None})
        p_todo = sorted({p for p in partners if p is not None})
        if any((a, p, question) not in self._join for a in a_todo for p in p_todo):
            m = self.eng.join(a_todo, p_todo, question)
            for i, a in enumerate(a_todo):
                for j, p in enumerate(p_todo):
                    self._join[(a, p, question)] = float(m[i, j])
        return {(a, p): self._join[(a, p, question)] for a in a_todo for p in p_todo}

    def filter_tokens(self, doc: str, question: str) -> int:
        return len(self.eng.render_filter(doc, question))

    def join_tokens(self, anchor: str, partner: str, question: str) -> int:
        return len(self.eng.render_join(anchor, partner, question))


def same_rows(got, expected, uncertain=()) -> None:
    """Assert two collections of keys are equal, ignoring the uncertain keys."""
    skip = set(uncertain)
    g, e = sorted(set(got) - skip), sorted(set(expected) - skip)
    assert g == e, f"optimised path returned {g}, naive evaluation {e} (ignored as uncertain: {sorted(skip)})"


def question(template: str) -> str:
    """The question a one-column template asks (``{0}`` reads "the document")."""
    return template.replace("{0}", "the document")


def bodies() -> list:
    return [n[1] for n in NOTES]


def expected_filter(naive: Naive, templates, rows=NOTES) -> tuple:
    """(ids whose body passes every template, ids with an uncertain answer) by naive evaluation."""
    docs = [r[1] for r in rows]
    margins = [naive.margins(docs, question(t)) for t in templates]
    passed = [r[0] for r in rows if r[1] is not None and all(m[r[1]] > 0 for m in margins)]
    unsure = [r[0] for r in rows if r[1] is not None and any(abs(m[r[1]]) < UNCERTAIN for m in margins)]
    return passed, unsure


def classify_naive(naive: Naive, docs, labels, instruction=None) -> dict:
    """doc -> (label, margin between the two most likely labels' probabilities)."""
    todo = [d for d in docs if d is not None]
    args = (todo, list(labels)) + ((instruction,) if instruction else ())
    idx, probs = naive.eng.classify(*args)
    out = {}
    for d, k, p in zip(todo, idx, probs):
        top = np.sort(p)[::-1]
        out[d] = (labels[k], float(top[0] - top[1]))
    return out
