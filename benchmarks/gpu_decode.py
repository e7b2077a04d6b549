"""GENERATE and EXTRACT (DESIGN.md, Workloads) through the engine's public text API, with the run's own
decode speed of light and transformers' batched `generate` on a sample of the same prompts.

Yardsticks, measured in the same run: HBM bandwidth (a device-to-device copy, bytes read + written)
and the dense bf16 matmul rate. Speed of light of a decode workload (DESIGN.md, Speed of light): the
prefill's FLOPs at the matmul rate, plus, per decode step, the larger of (bytes read: the linear
weights and the output head once, every live sequence's KV, a document shared by an extraction's
fields once for them) / bandwidth and (FLOPs) / matmul rate, summed over the steps the engine ran at
the batch it ran (output_tokens / decode_steps live sequences on average, each attending to its
prompt and half its output on average).

    PYTHONPATH=.:benchmarks python3 benchmarks/gpu_decode.py --tokenizer .cache/tok --commit C --out $OUT
    bash benchmarks/gpu_decode.sh 1 | 2    # the H200 runs BENCHMARKS.md quotes (see the script)
    PYTHONPATH=.:benchmarks python benchmarks/gpu_decode.py --smoke --out /tmp/smoke   # CPU, tiny model
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import matmul_rate, sync  # noqa: E402
from public_bench import Words, timed  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402

log = logging.getLogger("gpu_decode")
FULL = {"gen_prompts": 4096, "gen_words": 200, "gen_tokens": 128, "hf_sample": 384, "hf_batch": 128,
        "ext_docs": 2048, "ext_words": 1000, "ext_fields": 8, "ext_tokens": 24}
SMOKE = {"gen_prompts": 12, "gen_words": 20, "gen_tokens": 8, "hf_sample": 8, "hf_batch": 4,
         "ext_docs": 4, "ext_words": 30, "ext_fields": 3, "ext_tokens": 8}
FIELDS = {"name": "string", "age": "integer", "city": "string", "date": "date", "amount": "double",
          "employer": "string", "married": "boolean", "tags": {"type": "array", "elementType": "string",
                                                               "containsNull": True}}


def copy_bandwidth(dev, gib: float = 4.0, reps: int = 10) -> float:
    """Device-to-device copy, bytes read + written per second (median of `reps`)."""
    if dev.type != "cuda":
        return float("nan")
    n = int(gib * 2**30) // 2
    a = torch.randn(n, device=dev, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    times = []
    for i in range(reps + 2):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        if i >= 2:
            times.append(s.elapsed_time(e) / 1e3)
    del a, b
    return 2 * n * 2 / float(np.median(times))


def decode_sol(mcfg, st, prompt_tokens: float, bw: float, rate: float, bytes_per: int, shared_tokens: float = 0,
               group: int = 1) -> dict:
    """Speed-of-light seconds of a run's prefill (fresh tokens) and decode steps (see the module doc).
    shared_tokens: the tokens of each prompt that `group` sequences share (an extraction's document):
    a step must read their KV once for the group, so its bytes count them once (its FLOPs per sequence)."""
    L, nq, d = mcfg.num_layers, mcfg.num_heads, mcfg.head_dim
    head = mcfg.vocab_size * mcfg.hidden_size
    kv_tok = 2 * L * mcfg.num_kv_heads * d * bytes_per
    steps = max(1, st["decode_steps"])
    batch = st["output_tokens"] / steps  # live sequences per step, on average
    ctx = prompt_tokens + st["output_tokens"] / max(1, st.get("sequences", 1)) / 2
    prefill = st["fresh_tokens"] - st["output_tokens"]
    pf_flops = 2 * mcfg.linear_params * prefill + 4 * L * nq * d * prefill * prompt_tokens / 2
    ctx_read = ctx - shared_tokens * (1 - 1 / group)  # the KV a step must read, per sequence
    step_bytes = (mcfg.linear_params + head) * bytes_per + batch * ctx_read * kv_tok
    step_flops = batch * (2 * (mcfg.linear_params + head) + 4 * L * nq * d * ctx)
    per_step = max(step_bytes / bw, step_flops / (rate * 1e12))
    return {"prefill_sol_s": pf_flops / (rate * 1e12), "decode_sol_s": steps * per_step,
            "sol_s": pf_flops / (rate * 1e12) + steps * per_step, "batch": batch, "ctx": ctx, "ctx_read": ctx_read,
            "step_bytes": step_bytes, "step_flops": step_flops, "step_sol_ms": 1e3 * per_step,
            "step_bound": "bytes" if step_bytes / bw >= step_flops / (rate * 1e12) else "flops"}


def extract_shared(st, docs: int, fields: int) -> tuple[float, int]:
    """(document tokens of a prompt, fields): the prompts' requested tokens count each document once per
    field, the prefill's fresh ones once per document (with prefix caching on), so the difference is the
    document (fields - 1) times."""
    if fields < 2:
        return 0.0, 1
    requested = st["requested_tokens"] - st["output_tokens"]
    fresh = st["fresh_tokens"] - st["output_tokens"]
    return max(0.0, (requested - fresh) / (docs * (fields - 1))), fields


def hf_generate(eng, dev, prompts: list[list[int]], new_tokens: int, batch: int) -> dict:
    """transformers' batched greedy `generate` (sdpa, static cache, left padding) on the engine's weights."""
    import bench_hf

    model = bench_hf.hf_model(eng)
    emb = model.model.embed_tokens.weight
    model.lm_head = torch.nn.Linear(emb.shape[1], emb.shape[0], bias=False, device=dev, dtype=emb.dtype)
    model.lm_head.weight = emb
    pad = eng.tokenizer.pad_token_id if eng.tokenizer.pad_token_id is not None else 0
    if len(prompts) <= batch:
        raise ValueError(f"hf_sample ({len(prompts)}) must be larger than hf_batch ({batch}): the first batch "
                         "warms up untimed")
    walls, made = [], 0
    for lo in range(0, len(prompts), batch):
        group = prompts[lo:lo + batch]
        width = max(map(len, group))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in group], device=dev)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group], device=dev)
        kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  cache_implementation="static", pad_token_id=pad)
        if lo == 0:  # the first batch warms up (static cache set-up, any compilation): not timed
            model.generate(input_ids=ids, attention_mask=mask, **kw)
            continue
        sync(dev)
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, **kw)
        sync(dev)
        walls.append(time.perf_counter() - t0)
        made += (out.shape[1] - width) * len(group)
    del model
    return {"prompts": len(prompts) - batch, "output_tokens": made, "wall_s": sum(walls),
            "output_tok_s": made / sum(walls)}


GEN_PROMPT = "Continue this text."


def gen_docs(eng, sz) -> list[str]:
    w = Words(eng.tokenizer, 51)
    return w.texts(sz["gen_prompts"], lambda: int(w.rng.integers(sz["gen_words"] * 3 // 4, sz["gen_words"] * 5 // 4)))


def generate(args, eng, dev, sz, bw, rate, res):
    docs, prompt = gen_docs(eng, sz), GEN_PROMPT
    eng.generate(docs[:8], prompt, max_tokens=4, ignore_eos=True)  # warm-up (kernels, first-call products)
    texts = []

    def run():  # the public text API; the ids of the same answers kept for the bf16 / fp8 comparison
        ids = eng.generate_ids(docs, prompt, max_tokens=sz["gen_tokens"], ignore_eos=True)
        texts.extend(eng.tokenizer.decode(x, skip_special_tokens=True) for x in ids)
        return ids

    outs, st = timed(eng, dev, run)
    st["sequences"] = len(docs)
    assert all(o is not None for o in outs) and len(texts) == len(docs)
    agreement(args, outs, st)
    host_idle(st)
    p_tok = (st["requested_tokens"] - st["output_tokens"]) / len(docs)
    st.update(decode_sol(eng.model_config, st, p_tok, bw, rate, eng.rt.dtype.itemsize))
    st["output_tok_s"] = st["output_tokens"] / st["wall_s"]
    st["pct_sol"] = 100 * st["sol_s"] / st["wall_s"]
    res["GENERATE"] = st
    log.info("GENERATE %s", {k: st[k] for k in ("wall_s", "output_tok_s", "pct_sol") if k in st})


def hf(args, eng, dev, sz, bw, rate, res):
    """transformers' batched `generate` on a sample of GENERATE's prompts, the same ids our engine prefills."""
    head, tail = eng.renderer.generate_parts(GEN_PROMPT)
    ids = [head + eng.renderer.encode_docs([d])[0] + tail for d in gen_docs(eng, sz)[:sz["hf_sample"]]]
    res["GENERATE_hf"] = hf_generate(eng, dev, ids, sz["gen_tokens"], sz["hf_batch"])
    if "output_tok_s" in res.get("GENERATE", {}):
        res["GENERATE"]["vs_hf"] = res["GENERATE"]["output_tok_s"] / res["GENERATE_hf"]["output_tok_s"]
    log.info("GENERATE_hf %s", res["GENERATE_hf"])


def extract(args, eng, dev, sz, bw, rate, res):
    w = Words(eng.tokenizer, 61)
    docs = w.texts(sz["ext_docs"], sz["ext_words"])
    fields = dict(list(FIELDS.items())[:sz["ext_fields"]])
    eng.extract(docs[:2], fields, max_tokens=4)
    outs, st = timed(eng, dev, lambda: eng.extract(docs, fields, max_tokens=sz["ext_tokens"]))
    st["sequences"] = len(docs) * len(fields)
    done = [o for o in outs if o is not None]
    st["answers"] = len(done) * len(fields)
    st["cut"] = sum(len(o.cut) for o in done)
    st["parsed"] = all(json.loads(o.to_json()) is not None for o in done)
    st["shared_decode"] = eng.config.shared_decode
    host_idle(st)
    p_tok = (st["requested_tokens"] - st["output_tokens"]) / st["sequences"]
    st.update(decode_sol(eng.model_config, st, p_tok, bw, rate, eng.rt.dtype.itemsize,
                         *extract_shared(st, len(docs), len(fields))))
    st["output_tok_s"] = st["output_tokens"] / st["wall_s"]
    st["pct_sol"] = 100 * st["sol_s"] / st["wall_s"]
    res["EXTRACT"] = st
    log.info("EXTRACT %s", {k: st[k] for k in ("wall_s", "output_tok_s", "pct_sol", "kv_regret_tokens")})


def host_idle(st):
    """Share of the decode wall in which the device waited on the host: 1 - (the steps' spans on the device,
    CUDA events from a step's first kernel to its last, + the admissions' spans there, their prefill and first
    tokens) / wall. The host's packing of a step and the graphs' captures (decode_capture_s, also reported
    apart) are host time, outside the spans; launch gaps inside a span are not in it: a step's span over its
    speed of light shows them. Results without decode_admit_device_s (admissions without spans of their own)
    counted the host's seconds in admissions (decode_admit_s) instead."""
    if st.get("decode_wall_s") and st.get("decode_device_s"):
        busy = st["decode_device_s"] + st.get("decode_admit_device_s", st["decode_admit_s"])
        st["host_idle_pct"] = 100 * (1 - busy / st["decode_wall_s"])
        st["step_span_ms"] = 1e3 * st["decode_device_s"] / max(1, st["decode_steps"])


def agreement(args, outs, st, first: int = 32):
    """bf16 saves its GENERATE ids (first `first` tokens); an fp8 run in the same --out compares with them:
    the share of sequences equal over those tokens and the distribution of the first differing step."""
    path = Path(args.out) / f"generate_ids_bf16_{len(outs)}.json"
    mine = [o[:first] for o in outs]
    if not args.quantize:
        path.write_text(json.dumps(mine))
        return
    if not path.exists():
        return
    ref = json.loads(path.read_text())
    if len(ref) != len(mine):
        return
    diff = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None) for x, y in zip(ref, mine)]
    st["vs_bf16_equal_first_%d" % first] = sum(d is None for d in diff) / len(diff)
    st["vs_bf16_first_diff_step"] = {str(k): int(v) for k, v in zip(*np.unique([d for d in diff if d is not None],
                                                                              return_counts=True))}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-4b-random")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--quantize", default=None)
    ap.add_argument("--sections", default="GENERATE,HF,EXTRACT",
                    help="GENERATE, HF (transformers on a sample of GENERATE's prompts), EXTRACT")
    ap.add_argument("--no-shared-decode", dest="shared_decode", action="store_false",
                    help="each sequence reads its document's KV itself (EngineConfig.shared_decode=False)")
    ap.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                    help="decode steps launched kernel by kernel (EngineConfig.cuda_graphs=False)")
    ap.add_argument("--swiglu-gemm-rows", type=int, default=None,
                    help="passes of up to this many rows take cuBLAS for the MLP's gate/up (CudaOps.swiglu_gemm_rows; "
                         "default: the engine's, 0: the fused kernel at every size)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default=None)
    ap.add_argument("--profile", action="store_true",
                    help="cProfile of each section's host work into <name>.<section>.prof.txt beside the results")
    ap.add_argument("--size", action="append", default=[], metavar="KEY=N",
                    help="override one size (e.g. ext_docs=256); the results file records the sizes run")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.smoke:
        args.model, args.device = "tiny-qwen3-random", "cpu"
    sz = dict(SMOKE if args.smoke else FULL)
    for kv in args.size:
        k, v = kv.split("=")
        if k not in sz:
            raise SystemExit(f"--size {kv}: expected one of {sorted(sz)}")
        sz[k] = int(v)
    eng = Engine(EngineConfig(model=args.model, device=args.device, tokenizer=args.tokenizer,
                              quantize=args.quantize, shared_decode=args.shared_decode,
                              cuda_graphs=args.cuda_graphs))
    dev = eng.rt.device
    if args.swiglu_gemm_rows is not None:
        eng.runner.ops.swiglu_gemm_rows = args.swiglu_gemm_rows
    bw, rate = copy_bandwidth(dev), matmul_rate(dev)
    if dev.type != "cuda":
        bw = 20e9  # a CPU's order of magnitude: the smoke run checks the script, not a figure
    res = {"commit": args.commit, "model": args.model, "quantize": args.quantize, "device": str(dev),
           "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
           "cuda_graphs": args.cuda_graphs, "swiglu_gemm_rows": args.swiglu_gemm_rows, "shared_decode": args.shared_decode, "copy_bytes_per_s": bw, "matmul_tflops": rate, "load_s": eng.load_s, "sizes": sz}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or f"decode_{args.quantize or 'bf16'}.json"
    for sec in args.sections.split(","):
        prof = cProfile.Profile() if args.profile else None
        try:
            if prof:
                prof.enable()
            {"GENERATE": generate, "HF": hf, "EXTRACT": extract}[sec](args, eng, dev, sz, bw, rate, res)
        except Exception as e:  # a section's failure is recorded; the next still runs
            log.exception("%s failed", sec)
            res[sec] = {"error": f"{type(e).__name__}: {e}"}
        finally:
            if prof:
                prof.disable()
                text = io.StringIO()
                for key in ("tottime", "cumulative"):
                    pstats.Stats(prof, stream=text).sort_stats(key).print_stats(35)
                (out / f"{Path(name).stem}.{sec}.prof.txt").write_text(text.getvalue())
        (out / name).write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps({k: {kk: v.get(kk) for kk in ("wall_s", "output_tok_s", "pct_sol", "vs_hf", "host_idle_pct",
                                                   "step_span_ms",
                                                   "preemptions", "kv_regret_tokens", "error")}
                      for k, v in res.items() if isinstance(v, dict) and k.isupper()}, indent=1))


if __name__ == "__main__":
    main()
