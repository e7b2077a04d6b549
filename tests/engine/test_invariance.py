"""Same tokens, same margin: whatever the budget, order, cache state or pool size."""
from __future__ import annotations

import random

import numpy as np
import pytest

from gpu_worker import Engine, EngineConfig

DOCS = ["The refund never arrived.", "A quiet walk in the park with my dog.", "Stocks fell after the call.",
        "The pasta was cold and the waiter rude, never again.", "", "Rain tomorrow.",
        "My package came two weeks late and broken.", "Fresh apples and pears at the market today."]
QS = ["Is the document a complaint?", "Is the document about food?", "Is the document positive?"]
ANCHORS = ["Report: rash after aspirin.", "Report: headache and nausea after the antibiotic course."]
PARTNERS = ["rash", "headache", "nausea", "fever"]
JQ = "Does DOCUMENT 1 mention DOCUMENT 2?"


def run(eng, order=None):
    docs = DOCS if order is None else [DOCS[i] for i in order]
    f = eng.filter(docs, QS)
    c = eng.chain(docs, QS, short_circuit=False)
    j = eng.join(ANCHORS, PARTNERS, JQ)
    if order is not None:
        inv = np.argsort(order)
        f, c = f[inv], c[inv]
    return f, c, j


@pytest.fixture(scope="module")
def baseline(smol_engine):
    return run(smol_engine)


VARIANTS = [
    dict(token_budget=64),
    dict(token_budget=512),
    dict(token_budget=4096),
    dict(prefix_cache=False),
    dict(kv_pool_tokens=128, token_budget=64),  # a pool of 8 pages: far below the working set
    dict(kv_pool_tokens=1 << 16),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
def test_margins_do_not_depend_on_engine_settings(variant, baseline):
    eng = Engine(EngineConfig(model="smollm2-135m", **variant))
    for got, want in zip(run(eng), baseline):
        assert np.allclose(got, want, atol=1e-4, equal_nan=True), np.nanmax(np.abs(got - want))


def test_margins_do_not_depend_on_order_or_cache_state(smol_engine, baseline):
    order = list(range(len(DOCS)))
    random.Random(7).shuffle(order)
    # the second run finds the first's prefixes resident: same margins from cache
    for _ in range(2):
        for got, want in zip(run(smol_engine, order), baseline):
            assert np.allclose(got, want, atol=1e-4, equal_nan=True)
