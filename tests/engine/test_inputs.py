"""NULL, empty and over-long documents."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig, PromptTooLong
from gpu_worker.reference import hf_margin, hf_model


@pytest.fixture(scope="module")
def tiny():
    return Engine(EngineConfig(model="tiny-llama-random", max_prompt_tokens=120))


def test_none_gives_nan_and_empty_is_scored(smol_engine):
    m = smol_engine.filter([None, "", "A red apple."], ["Is the document about fruit?"])
    assert np.isnan(m[0, 0]) and not np.isnan(m[1:, 0]).any()
    idx, probs = smol_engine.classify([None, "A red apple."], ["fruit", "car"])
    assert idx[0] == -1 and np.isnan(probs[0]).all() and idx[1] in (0, 1)
    j = smol_engine.join(["a", None], [None, "b"], "Does DOCUMENT 1 mention DOCUMENT 2?")
    assert np.isnan(j[1]).all() and np.isnan(j[:, 0]).all() and not np.isnan(j[0, 1])


def test_empty_document_matches_reference(tiny):
    hf = hf_model(tiny)
    m = tiny.filter([""], ["Is it empty?"])[0, 0]
    assert abs(m - hf_margin(hf, tiny, tiny.render_filter("", "Is it empty?"))) < 1e-4


def test_too_long_prompt_names_the_row(tiny):
    long = "word " * 400
    with pytest.raises(PromptTooLong, match=r"row 1: prompt has \d+ tokens.*120"):
        tiny.filter(["short", long], ["Is it long?"])
    # the engine stays usable after the error
    assert not np.isnan(tiny.filter(["short"], ["Is it long?"])).any()


def test_truncate_cuts_the_document_never_the_question():
    eng = Engine(EngineConfig(model="tiny-llama-random", max_prompt_tokens=120, on_overflow="truncate"))
    hf = hf_model(eng)
    long = "word " * 400
    m = eng.filter(["short", long], ["Is it long?"])
    assert eng.stats["truncated_rows"] == 1
    head, tail = eng.renderer.filter_parts("Is it long?")
    doc = eng.renderer.encode_batch([long])[0]
    ids = head + doc[: 120 - len(head) - len(tail)] + tail
    assert abs(m[1, 0] - hf_margin(hf, eng, ids)) < 1e-4


def test_question_must_be_text(tiny):
    with pytest.raises(TypeError, match=r"questions\[1\] must be a string"):
        tiny.filter(["a"], ["ok?", 3])
