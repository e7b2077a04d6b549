"""ai_extract of three fields through Spark on this CPU: plain spark.sql against
``pyspark.ml.functions.predict_batch_udf`` + transformers, as a Spark user writes it.

One SparkSession (local[2]) with the extension (quail_spark.spark_conf()), SmolLM2 on both sides:

- quail: ``SELECT id, ai_extract(body, 'name STRING, city STRING, amount DOUBLE', map('max_tokens', N))``:
  each field a sequence forked from the row's one computed document, decoded greedily under
  llguidance's grammar of the field's JSON value;
- baseline: one ``predict_batch_udf`` column (transformers on the engine's own weights,
  ``gpu_worker.reference.hf_model``): per field, the prompt ids the engine renders for it
  (``renderer.extract_parts``: the same chat frame, document and field cue), left-padded batches of
  ``--hf-batch`` prompts, a greedy loop with transformers' KV cache, each step's logits masked by
  the same llguidance matcher of the field's type (``eng.grammars``), at most N tokens a field;
  the answers as JSON text, read with ``from_json`` into the same struct.

Documents: short records of people, places and amounts, made fresh for every run from a seed taken
from the clock (no run finds another's KV; the baseline caches nothing). Three interleaved runs per
way after a warm run (model loads in the Python workers); median, load average beside each run,
rows/s of each way and the ratio, and how many rows the two ways extract differently (float32
rounding can flip a greedy choice between near-equal tokens).

    nice python benchmarks/cpu_extract.py --rows 500
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

import spark_harness as h

SCHEMA = "name STRING, city STRING, amount DOUBLE"
FIELDS = {"name": "string", "city": "string", "amount": "double"}
FIRST = ["Maria", "Jonas", "Aiko", "Kwame", "Elena", "Tomasz", "Priya", "Lucas", "Fatima", "Henrik", "Sofia",
         "Diego", "Mei", "Anna", "Rafael", "Ingrid", "Yusuf", "Chloe", "Nadia", "Omar", "Grace", "Viktor"]
LAST = ["Lopez", "Berg", "Tanaka", "Mensah", "Rossi", "Nowak", "Sharma", "Moreau", "Haddad", "Larsen", "Costa",
        "Chen", "Schmidt", "Oliveira", "Nilsson", "Demir", "Dubois", "Petrova", "Santos", "Kim", "Okafor"]
CITIES = ["Porto", "Lyon", "Osaka", "Accra", "Turin", "Krakow", "Pune", "Bordeaux", "Beirut", "Aarhus", "Seville",
          "Chengdu", "Lagos", "Leipzig", "Uppsala", "Izmir", "Tallinn", "Utrecht", "Busan", "Nairobi", "Galway"]
PATTERNS = ["{n}, {a}, moved to {c} on {d} and paid {m} deposit.",
            "Invoice for {n}: {m}, due {d}. Billing office: {c}.",
            "Refund of {m} issued to {n} of {c} on {d}.",
            "{n} ({a}) bought a used bike in {c} for {m}.",
            "Donation received on {d}: {m} from {n}, {c}.",
            "The flat in {c} was rented by {n} on {d} for {m} a month."]


def documents(n: int, seed: int) -> list[str]:
    """``n`` short records, new for each ``seed``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        amount = rng.randrange(100, 900000) / 100
        out.append(rng.choice(PATTERNS).format(
            n=f"{rng.choice(FIRST)} {rng.choice(LAST)}", a=rng.randrange(18, 90), c=rng.choice(CITIES),
            d=f"{rng.randrange(2015, 2026)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
            m=f"{rng.choice(['EUR ', '$', ''])}{amount:,.2f}{rng.choice([' euros', ''])}"))
    return out


def make_predict_fn(max_tokens: int):
    """predict_batch_udf's factory (once per Python worker): the JSON object of the three fields per row."""
    def make():
        import numpy as np

        from gpu_worker import EngineConfig, get_engine
        from gpu_worker.reference import hf_model

        eng = get_engine(EngineConfig(**h.MODEL))  # rendering and grammars only: transformers computes
        if not hasattr(eng, "_bench_hf_model"):
            eng._bench_hf_model = hf_model(eng)
        model = eng._bench_hf_model

        def predict(body):
            docs = [str(x) for x in body]
            values = {name: hf_field(model, eng, docs, name, t, max_tokens) for name, t in FIELDS.items()}
            return np.array([json.dumps({k: values[k][r] for k in FIELDS}) for r in range(len(docs))])
        return predict
    return make


def hf_field(model, eng, docs, name: str, t, max_tokens: int) -> list:
    """One field of every document: greedy under the field's grammar, in transformers (None when cut)."""
    import torch

    from gpu_worker.grammar import answer, describe

    head, tail = eng.renderer.extract_parts(name, describe(t), None)
    prompts = [head + eng.doc_ids(d) + tail for d in docs]
    L = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), L, dtype=torch.long)
    mask = torch.zeros(len(prompts), L, dtype=torch.long)
    for r, p in enumerate(prompts):  # left padding: every prompt ends at the last position
        ids[r, L - len(p):] = torch.tensor(p)
        mask[r, L - len(p):] = 1
    matchers = [eng.grammars.matcher(t, f"field {name!r}") for _ in prompts]
    outs, done, cut = [[] for _ in prompts], [False] * len(prompts), [False] * len(prompts)
    with torch.inference_mode():
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        o = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        while not all(done):
            logits = o.logits[:, -1].float().numpy()
            nxt = torch.zeros(len(prompts), 1, dtype=torch.long)
            for r, m in enumerate(matchers):
                if done[r]:
                    continue
                tok = int(_masked(eng, m, logits[r]).argmax())  # the first maximum, as the engine
                if tok == eng.grammars.eos and m.is_accepting():
                    done[r] = True
                    continue
                m.consume_token(tok)
                outs[r].append(tok)
                nxt[r, 0] = tok
                done[r] = m.is_stopped()
                if not done[r] and len(outs[r]) >= max_tokens:
                    done[r] = cut[r] = True
            if all(done):
                break
            mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=torch.long)], 1)
            pos = pos[:, -1:] + 1
            o = model(input_ids=nxt, attention_mask=mask, position_ids=pos, past_key_values=o.past_key_values,
                      use_cache=True)
    return [None if c else answer(t, eng.grammars.text(x)) for x, c in zip(outs, cut)]


def _masked(eng, matcher, logits):
    import numpy as np

    return np.where(eng.grammars.allowed(matcher), logits, -np.inf)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--warm-rows", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16, help="per field, both ways")
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="default benchmarks/results/cpu_extract_<commit>.json")
    a = ap.parse_args()
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructType

    import quail_spark

    spark = h.session("cpu_extract")
    udf = predict_batch_udf(make_predict_fn(a.max_tokens), return_type=StringType(), batch_size=a.hf_batch)
    seeds: dict = {}

    def frame(run: str):
        seeds.setdefault(run, time.time_ns() % (1 << 62))
        n = a.warm_rows if run == "warm" else a.rows
        return spark.createDataFrame(list(enumerate(documents(n, seeds[run]))), "id int, body string") \
            .repartition(2, "id")

    def quail(run: str):
        frame(run).createOrReplaceTempView("records")
        sql = f"SELECT id, ai_extract(body, '{SCHEMA}', map('max_tokens', {a.max_tokens})) AS r FROM records"
        return sorted((r.id, *r.r) if r.r else (r.id,) for r in spark.sql(sql).collect())

    def baseline(run: str):
        out = frame(run).select("id", F.from_json(udf("body"), StructType.fromDDL(SCHEMA)).alias("r")).collect()
        return sorted((r.id, *r.r) if r.r else (r.id,) for r in out)

    res = {"commit": h.commit(), "machine": h.machine(), "rows": a.rows, "fields": SCHEMA,
           "max_tokens_per_field": a.max_tokens, "hf_batch": a.hf_batch, "runs": a.runs,
           "baseline_decoding": "greedy under the same llguidance masks (eng.grammars), transformers KV cache"}
    quail("warm"), baseline("warm")  # model loads, worker start: not timed
    before = quail_spark.metrics(spark)
    ways = h.timed_runs({"quail": quail, "predict_batch_udf": baseline}, a.runs)
    after = quail_spark.metrics(spark)
    res["quail_counters"] = {k: after.get(k, 0) - before.get(k, 0)
                             for k in ("requested_tokens", "fresh_tokens", "forward_passes", "output_tokens")}
    res["seeds"] = {k: v for k, v in seeds.items() if k != "warm"}
    res.update(ways)
    for way in ways.values():
        way["rows_per_s"] = round(a.rows / way["median_s"], 2)
    res["speedup"] = round(ways["predict_batch_udf"]["median_s"] / ways["quail"]["median_s"], 2)
    pairs = [(x, y) for qr, br in zip(ways["quail"]["runs"], ways["predict_batch_udf"]["runs"])
             for x, y in zip(qr["rows"], br["rows"])]
    res["rows_compared"], res["rows_differing"] = len(pairs), sum(x != y for x, y in pairs)
    h.write("cpu_extract", res, a.out)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
