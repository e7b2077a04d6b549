"""The one rendering of a two-column call (gpu_worker/ai_calls.py): the document placed first is
the column the anchor hint names, else the row's longer value (a tie keeps template order), with
the placeholders renamed to match, so the same pair gets the same prompt however it is spelled."""
from __future__ import annotations

import pytest

from gpu_worker import Engine, EngineConfig
from gpu_worker.ai_calls import Call, evaluate, render

BODY = "The parcel came two weeks late and the box was crushed on one side."
TERM = "a parcel"


@pytest.fixture(scope="module")
def tiny():
    return Engine(EngineConfig(model="tiny-llama-random", device="cpu"))


def test_short_side_first_renders_as_long_side_first(tiny):
    short_first = render(tiny, Call("if", "Is {0} mentioned in {1}?", 2), [TERM, BODY])
    long_first = render(tiny, Call("if", "Is {1} mentioned in {0}?", 2), [BODY, TERM])
    assert short_first == long_first == tiny.render_join(BODY, TERM, "Is DOCUMENT 2 mentioned in DOCUMENT?")


def test_the_anchor_hint_places_its_column_first(tiny):
    call = Call("if", "Is {0} mentioned in {1}?", 2, anchor=0)
    assert render(tiny, call, [TERM, BODY]) == tiny.render_join(TERM, BODY, "Is DOCUMENT mentioned in DOCUMENT 2?")
    assert Call("if", "Is {0} in {1}?", 2, anchor=1).order(["long text here", "x"]) == (1, 0)


def test_a_tie_keeps_template_order():
    assert Call("if", "Is {0} like {1}?", 2).order(["abc", "xyz"]) == (0, 1)
    assert Call("if", "Is {0} like {1}?", 2).order(["ab", "xyz"]) == (1, 0)
    assert Call("if", "{0} {1} {2}?", 3).order(["a", "bb", "ccc"]) == (0, 1, 2)  # three columns: as written


def test_rows_of_both_placements_in_one_call_give_the_answers_of_each_alone(tiny):
    call = Call("score", "Is {0} mentioned in {1}?", 2)
    rows = [[TERM, BODY], [BODY, TERM], ["a box", "crushed box, late"]]
    together = evaluate(tiny, call, [[r[0] for r in rows], [r[1] for r in rows]])
    alone = [evaluate(tiny, call, [[r[0]], [r[1]]])[0] for r in rows]
    assert together == pytest.approx(alone, abs=1e-5)
    assert together[0] != pytest.approx(together[1], abs=1e-6)  # the same pair, two questions


def test_an_anchor_hint_on_a_call_without_two_columns_is_refused():
    with pytest.raises(ValueError, match="anchor hint names column argument 3"):
        Call("if", "Is {0} in {1}?", 2, anchor=2)
    with pytest.raises(ValueError, match="two column arguments"):
        Call("if", "Is {0} ok?", 1, anchor=0)
