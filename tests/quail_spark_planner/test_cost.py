"""The planner's cost model (AiCost.java, in the rules) against hand-computed numbers: a toy model
shape put into the session conf the way install() puts the engine's, and the estimates read back
from the specs of the rewritten plan."""
import pytest

from quail_spark import cost as C
from quail_spark.explain import planned_calls, plan_text

TOY = {"name": "toy", "n_lin": 1152, "layers": 2, "q_heads": 2, "head_dim": 4, "hidden": 8, "rate": 1e6}


def flops(cached: float, fresh: float, head: float = 2) -> float:
    """FLOPs of one prompt of the toy shape: 2 N_lin fresh + 4 L n_q d pairs + 2 d_model head."""
    pairs = fresh * cached + fresh * (fresh + 1) / 2
    return 2 * 1152 * fresh + 4 * 2 * 2 * 4 * pairs + 2 * 8 * head


@pytest.fixture(scope="module")
def toy(spark):
    import quail_spark

    quail_spark.install(spark, model="tiny-llama-random", device="cpu")
    spark.createDataFrame([(1, "a", "b")], "id int, body string, term string").createOrReplaceTempView("toy_docs")
    saved = {k: spark.conf.get(C.CONF + k, None) for k in (*TOY, *C.MEASURED)}
    for k in C.MEASURED:  # the toy's preset figures only: one rate, the frame estimate
        spark.conf.unset(C.CONF + k)
    for k, v in TOY.items():
        spark.conf.set(C.CONF + k, str(v))
    spark.conf.set("spark.quail.sample.rows", "0")  # rows unknown: the default 1,000 a side, as computed below
    yield spark
    spark.conf.unset("spark.quail.sample.rows")
    for k, v in saved.items():
        if v is not None:
            spark.conf.set(C.CONF + k, v)


def spec(spark, sql: str) -> dict:
    (_, s), = planned_calls(plan_text(spark.sql(sql), "extended"))
    return s


def test_linear_parameters_from_the_shape():
    assert C.MODELS["smollm2-135m"].n_lin == 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536) == 106_168_320
    assert C.MODELS["qwen3-4b"].n_lin == 3_633_315_840  # docs/architecture.md: 3.633e9


def test_install_puts_the_engine_shape_into_the_session_conf():
    conf = C.session_conf("tiny-llama-random", "cpu")
    assert conf["spark.quail.model.name"] == "tiny-llama-random" and conf["spark.quail.model.layers"] == "2"
    assert conf["spark.quail.model.n_lin"] == str(2 * (64 * 16 * (4 * 2 + 2 * 2) + 3 * 64 * 128))
    assert C.session_conf("qwen3-4b-random", "cuda")["spark.quail.model.rate"] == "7.89e+14"


def test_a_rate_the_engine_measured_on_a_gpu_prices_that_gpu(tmp_path, monkeypatch):
    """gpu_worker/rates.py's figures of the model on a GPU (here written by hand into a fresh cache) replace
    the preset for that device type and dtype; another device type keeps its preset."""
    from gpu_worker import rates

    from quail_spark import calibration

    facts = calibration.frame("tiny-llama-random")  # the prompt frame from the usual cache (no conversion here)
    monkeypatch.setattr(calibration, "frame", lambda *a, **k: facts)
    key = facts["weights_key"]
    rates._store(tmp_path, key, rates.slot("cuda", "torch.bfloat16"), {"rate": 3.5e14, "attn_rate": 2.5e14})
    gpu = C.session_conf("tiny-llama-random", "cuda", {"cache_dir": str(tmp_path)})
    assert (gpu[C.CONF + "rate"], gpu[C.CONF + "attn_rate"], gpu[C.CONF + "rate_source"]) == ("3.5e+14", "2.5e+14",
                                                                                              "measured")
    cpu = C.session_conf("tiny-llama-random", "cpu", {"cache_dir": str(tmp_path)})
    assert (cpu[C.CONF + "rate"], cpu[C.CONF + "rate_source"]) == ("1e+11", "preset")


def test_a_cpus_rates_are_those_of_an_engine_of_a_tasks_threads(tmp_path, monkeypatch, spark):
    """An engine in a notebook's own process measures with all the cores, one in a task with the task's threads
    (PySpark's OMP_NUM_THREADS: spark.task.cpus): each figure has its own key, the driver prices a task's, the
    nearest thread count where that one is missing; install() asks for the session's task threads."""
    from gpu_worker import rates

    import quail_spark
    from quail_spark import calibration
    from quail_spark.concurrency import task_threads

    facts = calibration.frame("tiny-llama-random")
    monkeypatch.setattr(calibration, "frame", lambda *a, **k: facts)
    for n, rate in ((1, 1e11), (8, 5e11)):
        rates._store(tmp_path, facts["weights_key"], rates.slot("cpu", "float32", n), {"rate": rate, "attn_rate": rate})
    conf = {"cache_dir": str(tmp_path)}
    assert [C.session_conf("tiny-llama-random", "cpu", conf, n)[C.CONF + "rate"] for n in (1, 2, 6, 16, None)] \
        == ["1e+11", "1e+11", "5e+11", "5e+11", "1e+11"]
    assert task_threads(spark) == 1
    keys = {*C.session_conf("tiny-llama-random", "cpu", conf, 1), *(C.CONF + k for k in (*TOY, *C.MEASURED))}
    saved = {k: spark.conf.get(k, None) for k in keys}
    try:
        quail_spark.install(spark, model="tiny-llama-random", device="cpu", cache_dir=str(tmp_path))
        assert spark.conf.get(C.CONF + "rate") == "1e+11"
    finally:  # this module's settings as they were (the toy's, where its fixture set them)
        for k, v in saved.items():
            spark.conf.set(k, v) if v is not None else spark.conf.unset(k)


def test_qwen3_4b_h200_300_token_prompts_run_at_107k_tokens_per_second():
    s, rate = C.MODELS["qwen3-4b"], C.RATES["h200"]
    f = 2 * s.n_lin * 300 + 4 * s.n_layers * s.n_q_heads * s.head_dim * 300 * 301 / 2 + 2 * s.hidden * 2
    assert 300 / (f / rate) == pytest.approx(107e3, rel=0.02)


def test_a_fused_chain_prices_later_predicates_at_their_question(toy):
    # document 20 tokens (hint); template 'Is {0} x?' is 3 tokens; a chain of two keeps the document:
    # each predicate computes separator 2 + question 3 + cue 6 = 11 tokens after header 12 + document 20
    s = spec(toy, "SELECT id FROM toy_docs WHERE ai_if('Is {0} x?', body, map('tokens', 20)) "
                  "AND ai_if('Is {0} y?', body, map('selectivity', 0.2))")
    assert s["doc_tokens"] == 20 and s["tokens_source"] == "hint" and s["rows_source"] == "default"
    per_row = flops(32, 11) / 1e6
    assert [c["template"] for c in s["calls"]] == ["Is {0} y?", "Is {0} x?"]  # 0.2 kept before 0.5
    assert [c["seconds_per_row"] for c in s["calls"]] == pytest.approx([per_row, per_row], rel=1e-5)
    assert [c["rank"] for c in s["calls"]] == pytest.approx([per_row / 0.8, per_row / 0.5], rel=1e-5)
    # the plan's cost: 1,000 rows compute document + question after the header (computed once: cached for a
    # row), the 200 left compute the question
    first, second = flops(12, 31) * 1000, flops(32, 11) * 200
    assert s["cost"]["seconds"] == pytest.approx((first + second) / 1e6, rel=1e-5)
    assert s["cost"]["fresh"] == pytest.approx(1000 * 31 + 200 * 11, rel=1e-5)


def test_each_prompt_adds_the_measured_per_prompt_seconds(toy):
    """prompt_s (a CPU engine's fixed host seconds a prompt, gpu_worker/rates.py) adds once per prompt computed:
    a join's anchors and pairs alike; the tokens are unchanged."""
    sql = ("SELECT a.id FROM toy_docs a JOIN toy_docs b ON ai_if('Does {0} mention {1}?', a.body, b.term, "
           "map('tokens', 50, 'tokens_1', 4))")
    plain = spec(toy, sql)["cost"]
    toy.conf.set(C.CONF + "prompt_s", "0.001")
    try:
        priced = spec(toy, sql)["cost"]
    finally:
        toy.conf.unset(C.CONF + "prompt_s")
    assert priced["seconds"] - plain["seconds"] == pytest.approx((1000 + 1e6) * 0.001, rel=1e-5)
    assert (priced["requested"], priced["fresh"]) == (plain["requested"], plain["fresh"])


def test_a_join_anchor_counts_once_per_anchor(toy):
    # {0} 50 tokens, {1} 4 tokens (hints), 1,000 rows a side (unknown: the default); question 6 tokens.
    # {0} as anchor: 1,000 prefixes of 12 + 50 + 2 + 6 = 70 (the header 12 computed once: cached for an
    # anchor), then 10^6 pairs of label 5 + 4 + cue 6
    s = spec(toy, "SELECT a.id FROM toy_docs a JOIN toy_docs b ON ai_if('Does {0} mention {1}?', a.body, b.term, "
                  "map('tokens', 50, 'tokens_1', 4))")
    zero, one = (x["cost_as_anchor"] for x in s["sides"])
    assert zero["fresh"] == pytest.approx(1000 * 58 + 1e6 * 15, rel=1e-5)
    assert one["fresh"] == pytest.approx(1000 * 12 + 1e6 * 61, rel=1e-5)
    assert zero["seconds"] == pytest.approx((1000 * flops(12, 58, 0) + 1e6 * flops(70, 15)) / 1e6, rel=1e-5)
    assert s["anchor"] == "a.body" and s["why"] == "cost model" and s["cost"] == zero
    # the same pair spelled the other way round: the same anchor, the same cost
    t = spec(toy, "SELECT a.id FROM toy_docs a JOIN toy_docs b ON ai_if('Is {0} mentioned in {1}?', b.term, "
                  "a.body, map('tokens', 4, 'tokens_1', 50))")
    assert t["anchor"] == "a.body"
