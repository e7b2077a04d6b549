"""The engine through its public text API at default settings (docs/architecture.md and BENCHMARKS.md, Workloads), on one device.

Sections (``--sections``, comma-separated):
  WORKLOADS  FILTER, CHAIN, JOIN (three runs), FILTER+JOIN, PREFIX from text through
             Engine.filter / chain / join, each against transformers on a sample of its prompts;
  JOIN_IDS   the old JOIN measurement (ids straight into Engine._run, bench_workloads.run_join),
             three runs on the same default engine: regression or noise;
  SUSTAINED  one engine, 40 filter calls of 2,000 documents, per-call throughput;
  EXECUTOR   FILTER and JOIN through ArrowMapper's body (gpu_worker.ai_columns.with_columns, Arrow record
             batches in, no Spark), and the engine calls of the Spark SQL functions' bodies once per
             Arrow batch of the GPU preset;
  BIO2       500 anchors of ~5,000 tokens x 1,127 partners through Engine.join, and the same
             pairs of the first --bio2-ids-anchors anchors fed as ids (Engine.join_ids).

Text: words are single tokens of the tokenizer (a leading space and 3+ letters), so a document of n
words is ~n tokens. Partners are 2-5 words whose first words repeat, like reaction terms ("skin rash",
"skin pain"). Every result file carries the commit given by --commit (the run happens on a copy of
the working tree without .git). Results are written after every section (a killed run keeps them).

    PYTHONPATH=. python3 benchmarks/public_bench.py --tokenizer .cache/tok --commit $(git rev-parse HEAD) --out $OUT
    PYTHONPATH=. python benchmarks/public_bench.py --smoke --out /tmp/smoke   # CPU, tiny model and sizes

FP8: run the sections once with --margins DIR (bf16, saves every workload's margins), then again with
--quantize fp8 --margins DIR: each workload of the FP8 run reports its sign agreement with the bf16 margins
(|m| > 0.1) and the max |difference| (`vs_bf16`).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_hf  # noqa: E402
import bench_workloads as wl  # noqa: E402
from gpu_bench import count_pairs, matmul_rate, sign_report, sol_seconds, sync  # noqa: E402

from gpu_worker import Engine, EngineConfig  # noqa: E402
from gpu_worker import ai_calls  # noqa: E402
from gpu_worker import ai_columns  # noqa: E402
from gpu_worker import cuda_ops  # noqa: E402

log = logging.getLogger("public_bench")
PRESET = Path(__file__).resolve().parents[1] / "conf" / "spark" / "one-gpu.json"  # the Arrow batch size of Spark on a GPU
FULL = {"filter_docs": 2048, "doc_words": 300, "chain_docs": 1024, "join_anchors": 8, "anchor_words": 5000,
        "join_partners": 1000, "fj_anchors": 16, "fj_partners": 2000, "traces": 72, "trace_steps": 24,
        "sustained_calls": 40, "sustained_docs": 2000, "sustained_words": 100,
        "bio2_anchors": 500, "bio2_partners": 1127}
SMOKE = {"filter_docs": 24, "doc_words": 40, "chain_docs": 16, "join_anchors": 2, "anchor_words": 300,
         "join_partners": 20, "fj_anchors": 4, "fj_partners": 24, "traces": 3, "trace_steps": 5,
         "sustained_calls": 4, "sustained_docs": 20, "sustained_words": 30, "bio2_anchors": 6, "bio2_partners": 30}


class Words:
    def __init__(self, tokenizer, seed: int):
        vocab = tokenizer.get_vocab()
        words = {tokenizer.convert_tokens_to_string([t]) for t in vocab}
        self.words = np.array(sorted(w for w in words if len(w) >= 4 and w[0] == " " and w[1:].isalpha()
                                     and w[1:].islower()))
        self.rng = np.random.default_rng(seed)

    def text(self, n: int) -> str:
        return "".join(self.rng.choice(self.words, int(n))).strip()

    def texts(self, count: int, n) -> list[str]:
        return [self.text(n() if callable(n) else n) for _ in range(count)]

    def partners(self, count: int) -> list[str]:
        firsts = self.words[:150]
        return [" ".join([self.rng.choice(firsts)[1:]] + [self.rng.choice(self.words)[1:]
                                                           for _ in range(int(self.rng.integers(1, 5)))])
                for _ in range(count)]


def timed(eng, dev, fn):
    eng.reset_stats()
    eng.attended_pairs = 0
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    sync(dev)
    t0 = time.perf_counter()
    out = fn()
    sync(dev)
    wall = time.perf_counter() - t0
    st = {k: v for k, v in eng.stats.items() if k != "stages"}
    st["stages"] = eng.stats["stages"]
    st["engine_wall_s"] = st["wall_s"]  # inside the engine's operations; the rest is the caller's host work
    st["wall_s"], st["attended_pairs"] = wall, eng.attended_pairs
    st["requested_tok_s"] = st["requested_tokens"] / wall
    st["fresh_tok_s"] = st["fresh_tokens"] / wall
    st["peak_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    return out, st


def vs_bf16(args, key: str, m, st):
    """The margins of a bf16 run (`--margins`): saved by it, compared by a `--quantize fp8` run of the same texts.

    FP8 accuracy on every run: sign agreement on the margins with |m_bf16| > 0.1 and the max |difference|."""
    if not args.margins:
        return
    m = np.asarray(m, dtype=np.float64)
    path = Path(args.margins) / (key.replace(" ", "_").replace("+", "_") + ".npy")
    if args.quantize is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, m)
    elif path.exists():
        want = np.load(path)
        if want.shape == m.shape:
            ok = ~(np.isnan(want) | np.isnan(m))
            st["vs_bf16"] = sign_report(want[ok], m[ok])
            log.info("%s fp8 vs bf16: %s", key, st["vs_bf16"])


def with_sol(eng, st, rate, n_prompts):
    n_head = len(eng.renderer.answers.head_ids)
    sol, _ = sol_seconds(eng.model_config, st["fresh_tokens"], st["attended_pairs"], n_prompts, n_head, rate)
    st["sol_s"], st["pct_sol"] = sol, 100 * sol / st["wall_s"]
    if eng.rates:  # the planner's seconds for these tokens at the rates measured on load
        st["planned_s"], _ = sol_seconds(eng.model_config, st["fresh_tokens"], st["attended_pairs"], n_prompts,
                                         n_head, eng.rates["rate"] / 1e12, eng.rates["attn_rate"] / 1e12)
        st["planned_over_wall"] = st["planned_s"] / st["wall_s"]
    return st


def baseline(args, hf, eng, dev, prompts_fn, n_total: int):
    """transformers' estimated seconds for all n_total prompts, timed on a sample of `prompts_fn(k)` prompts."""
    if hf is None:
        return None
    sample = prompts_fn(min(n_total, args.hf_sample))
    t = bench_hf.time_baseline(hf, eng.model.head_rows, sample, dev, len(sample), args.hf_tokens)
    t["est_s"] *= n_total / len(sample)
    return t


def spread(n_total, k):
    return np.linspace(0, n_total - 1, k).round().astype(int).tolist()


def workloads(args, eng, dev, sz, rate, hf, res):
    w = Words(eng.tokenizer, 11)
    out = res.setdefault("workloads", {})
    q = wl.QUESTION
    docs = w.texts(sz["filter_docs"], sz["doc_words"])
    m, st = timed(eng, dev, lambda: eng.filter(docs, [q]))
    st = with_sol(eng, st, rate, len(docs))
    vs_bf16(args, "FILTER", m, st)
    st["hf"] = baseline(args, hf, eng, dev, lambda k: [eng.render_filter(docs[i], q) for i in spread(len(docs), k)],
                        len(docs))
    out["FILTER"] = st
    dump(args, res)

    docs = w.texts(sz["chain_docs"], sz["doc_words"])
    qs = list(wl.CHAIN_QUESTIONS)
    m, st = timed(eng, dev, lambda: eng.chain(docs, qs, short_circuit=True))
    ev = [(i, j) for j in range(len(qs)) for i in range(len(docs)) if not np.isnan(m[i, j])]
    st = with_sol(eng, st, rate, len(ev))
    vs_bf16(args, "CHAIN", m, st)
    st["evaluated_per_stage"] = [int((~np.isnan(m[:, j])).sum()) for j in range(len(qs))]
    st["hf"] = baseline(args, hf, eng, dev, lambda k: [eng.render_filter(docs[ev[i][0]], qs[ev[i][1]])
                                                       for i in spread(len(ev), k)], len(ev))
    out["CHAIN"] = st
    dump(args, res)

    partners = w.partners(sz["join_partners"])
    for run in range(3):
        anchors = w.texts(sz["join_anchors"], sz["anchor_words"])
        m, st = timed(eng, dev, lambda: eng.join(anchors, partners, wl.JOIN_QUESTION))
        st = with_sol(eng, st, rate, m.size)
        vs_bf16(args, f"JOIN run {run + 1}", m, st)
        if run == 0:
            n_p = len(partners)
            st["hf"] = baseline(args, hf, eng, dev, lambda k: [
                eng.render_join(anchors[i // n_p], partners[i % n_p], wl.JOIN_QUESTION)
                for i in spread(m.size, min(k, 48))], m.size)
        out[f"JOIN run {run + 1}"] = st
        dump(args, res)

    anchors, fparts = w.texts(sz["fj_anchors"], sz["anchor_words"]), w.partners(sz["fj_partners"])

    def filter_join():
        ka = eng.filter(anchors, [wl.ANCHOR_QUESTION])[:, 0]
        kp = eng.filter(fparts, [wl.PARTNER_QUESTION])[:, 0]
        keep_a = [a for a, v in zip(anchors, ka) if v > np.median(ka)]  # selectivity 0.5 each side
        keep_p = [p for p, v in zip(fparts, kp) if v > np.median(kp)]
        return eng.join(keep_a, keep_p, wl.JOIN_QUESTION)

    m, st = timed(eng, dev, filter_join)
    out["FILTER+JOIN"] = with_sol(eng, st, rate, len(anchors) + len(fparts) + m.size)
    dump(args, res)

    rows = []
    for _ in range(sz["traces"]):
        text = ""
        for _ in range(sz["trace_steps"]):
            text = (text + " " + w.text(int(w.rng.integers(60, 241)))).strip()
            rows.append(text)
    rows = [rows[i] for i in w.rng.permutation(len(rows))]
    m, st = timed(eng, dev, lambda: eng.filter(rows, [wl.TRACE_QUESTION]))
    st = with_sol(eng, st, rate, len(rows))
    vs_bf16(args, "PREFIX", m, st)
    st["hf"] = baseline(args, hf, eng, dev, lambda k: [eng.render_filter(rows[i], wl.TRACE_QUESTION)
                                                       for i in spread(len(rows), k)], len(rows))
    out["PREFIX"] = st
    dump(args, res)
    for name, st in out.items():
        if st.get("hf"):
            st["speedup_vs_hf"] = st["hf"]["est_s"] / st["wall_s"]
        log.info("%s: %.2f s, %.0f requested tok/s, %.1f%% SoL, x%.2f transformers", name, st["wall_s"],
                 st["requested_tok_s"], st.get("pct_sol", float("nan")), st.get("speedup_vs_hf", float("nan")))


def join_ids(args, eng, dev, sz, rate, res):
    out = res.setdefault("join_ids", [])
    sizes = wl.Sizes() if not args.smoke else wl.Sizes.smoke()
    for run in range(3):
        vocab = wl.Vocab(eng.tokenizer, 300 + run)
        r, st = timed(eng, dev, lambda: wl.run_join(eng, vocab, sizes))
        out.append(with_sol(eng, st, rate, len(r.margins)))
        log.info("JOIN ids run %d: %.0f requested tok/s", run + 1, st["requested_tok_s"])
        dump(args, res)


def sustained(args, eng, dev, sz, res):
    w = Words(eng.tokenizer, 21)
    calls = res.setdefault("sustained", [])
    for c in range(sz["sustained_calls"]):
        docs = w.texts(sz["sustained_docs"], lambda: int(w.rng.integers(sz["sustained_words"] // 2,
                                                                          3 * sz["sustained_words"] // 2)))
        _, st = timed(eng, dev, lambda: eng.filter(docs, [wl.QUESTION]))
        calls.append({k: st[k] for k in ("wall_s", "requested_tokens", "fresh_tokens", "requested_tok_s",
                                         "evict_visited", "evicted_nodes", "kv_kept_tokens",
                                         "kv_kept_unread_tokens")})
        calls[-1]["pool_used_pages"] = eng.pool.used_pages()
    first = np.mean([c["requested_tok_s"] for c in calls[:10]])
    last = np.mean([c["requested_tok_s"] for c in calls[-10:]])
    res["sustained_last10_over_first10"] = last / first
    log.info("SUSTAINED: last 10 / first 10 = %.3f", last / first)
    dump(args, res)


def executor(args, eng, dev, sz, res, rounds: int = 3):
    """What users call on executors, fed Arrow record batches of the GPU preset's size: the body of
    ``quail_spark.ArrowMapper`` / ``with_ai_columns`` (gpu_worker.ai_columns.with_columns: an ai_if
    column over documents; an ai_if column over (anchor, partner) rows, a cross join's), and the engine
    calls the Spark SQL functions' bodies make (quail_spark.executor: quail_chain -> Engine.chain,
    quail_join -> ai_calls.evaluate) once per Arrow batch; each against the public API on texts of the
    same sizes. No Spark (none on the GPU machine).

    ``rounds`` rounds; a round times each way once on fresh texts (nothing cached), the order rotated so
    each way runs first in one round (the first call after another operation pays for the pool's state).
    A way's figure is its median over the rounds of its throughput over the public API's in that round."""
    w = Words(eng.tokenizer, 31)
    rows = 64 if args.smoke else int(json.loads(PRESET.read_text())["spark.sql.execution.arrow.maxRecordsPerBatch"])
    fcall = ai_calls.Call("if", "Is {0} positive?", 1)
    call = ai_calls.Call("if", "Does {0} mention {1}?", 2)  # ai_if(template, anchor, partner) of an AI join
    fcol = ai_columns.AIColumn("positive", "", fcall, ("body",))
    jcol = ai_columns.AIColumn("mentions", "", call, ("body", "term"))
    partners = w.partners(sz["join_partners"])

    def mapped(col, table):  # ArrowMapper's body over the batches Spark would send
        return sum(b.num_rows for b in ai_columns.with_columns(lambda: eng, [col], table.to_batches(rows)))

    def filter_ways():
        return {"FILTER, ArrowMapper body": lambda docs: mapped(fcol, pa.table({"body": docs})),
                "FILTER public API": lambda docs: eng.filter(docs, [fcall.question]),
                "FILTER, SQL function body per Arrow batch": lambda docs: [  # udf_chain, one AI predicate
                    eng.chain(docs[i:i + rows], [fcall.question]) for i in range(0, len(docs), rows)]}

    def join_ways():
        def sql_body(anchors):  # udf_join: the pairs sorted by anchor, an Arrow batch at a time
            pa_, pp_ = [a for a in anchors for _ in partners], [p for _ in anchors for p in partners]
            return [ai_calls.evaluate(eng, call, [pa_[i:i + rows], pp_[i:i + rows]])
                    for i in range(0, len(pa_), rows)]
        return {"JOIN, ArrowMapper body": lambda anchors: mapped(jcol, pa.table({
                    "body": [a for a in anchors for _ in partners], "term": partners * len(anchors)})),
                "JOIN public API": lambda anchors: eng.join(anchors, partners, call.question),
                "JOIN, SQL function body per Arrow batch": sql_body}

    out = res.setdefault("executor", {"rounds": rounds, "batch_rows": rows})
    for ways, texts, api in ((filter_ways(), lambda: w.texts(sz["filter_docs"], sz["doc_words"]), "FILTER public API"),
                             (join_ways(), lambda: w.texts(sz["join_anchors"], sz["anchor_words"]), "JOIN public API")):
        names = list(ways)
        runs = {k: [] for k in names}
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                data = texts()  # fresh texts: nothing cached
                _, st = timed(eng, dev, lambda: ways[k](data))
                runs[k].append(st)
        for k in names:
            out[k] = {"runs": runs[k], "requested_tok_s": [st["requested_tok_s"] for st in runs[k]]}
            if k != api:
                ratios = [a["requested_tok_s"] / b["requested_tok_s"] for a, b in zip(runs[k], runs[api])]
                out[k].update(over_public_api=ratios, median_over_public_api=float(np.median(ratios)))
                log.info("EXECUTOR %s: %s of the public API in %d rounds, median %.2f", k,
                         ", ".join(f"{x:.2f}" for x in ratios), rounds, np.median(ratios))
    dump(args, res)


def bio2(args, eng, dev, sz, rate, res):
    w = Words(eng.tokenizer, 41)
    anchors = w.texts(sz["bio2_anchors"], lambda: int(w.rng.integers(4500, 5501)) if not args.smoke else 300)
    partners = w.partners(sz["bio2_partners"])
    m, st = timed(eng, dev, lambda: eng.join(anchors, partners, wl.JOIN_QUESTION))
    st = with_sol(eng, st, rate, m.size)
    st["pairs"] = int(m.size)
    vs_bf16(args, "BIO2", m, st)
    res["bio2_text"] = st
    log.info("BIO-2 text: %.1f s, %.0f requested tok/s, %.1f%% SoL", st["wall_s"], st["requested_tok_s"],
             st["pct_sol"])
    dump(args, res)
    k = min(args.bio2_ids_anchors, len(anchors))
    if k == 0:  # --bio2-ids-anchors 0: no ids-in subset
        return
    a_ids = eng.encode(anchors[:k])
    p_ids = eng.encode(partners)
    sub = w.texts(k, lambda: int(w.rng.integers(4500, 5501)) if not args.smoke else 300)
    m2, st2 = timed(eng, dev, lambda: eng.join(sub, partners, wl.JOIN_QUESTION))
    res["bio2_text_subset"] = with_sol(eng, st2, rate, m2.size)
    m3, st3 = timed(eng, dev, lambda: eng.join_ids(a_ids, p_ids, wl.JOIN_QUESTION))
    res["bio2_ids_subset"] = with_sol(eng, st3, rate, m3.size)
    res["bio2_ids_subset"]["max_abs_diff_vs_text"] = float(np.abs(m3 - m[:k]).max())
    res["bio2_text_over_ids"] = st["requested_tok_s"] / st3["requested_tok_s"]
    res["bio2_subset_text_over_ids"] = st2["requested_tok_s"] / st3["requested_tok_s"]
    log.info("BIO-2 ids (%d anchors): %.0f requested tok/s; text/ids %.3f (subset %.3f)", k, st3["requested_tok_s"],
             res["bio2_text_over_ids"], res["bio2_subset_text_over_ids"])
    dump(args, res)


def dump(args, res):
    (Path(args.out) / args.name).write_text(json.dumps(res, indent=1, default=float))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--sections", default="WORKLOADS,JOIN_IDS,SUSTAINED,EXECUTOR")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--hf-sample", type=int, default=256, help="prompts timed in transformers per workload (0: none)")
    ap.add_argument("--hf-tokens", type=int, default=200_000)
    ap.add_argument("--bio2-ids-anchors", type=int, default=100)
    ap.add_argument("--bio2-anchors", type=int, default=None, help="anchors of BIO2 (default 500)")
    ap.add_argument("--quantize", default=None, choices=[None, "fp8"], help="EngineConfig.quantize of the engine")
    ap.add_argument("--margins", default=None, help="folder of a bf16 run's margins: saved by a run without "
                    "--quantize, compared (sign agreement, max diff) by a --quantize fp8 run of the same sections")
    ap.add_argument("--ctx-launch", default="", help="KEY=VALUE,... over gpu_worker.cuda_ops.CTX_CONFIG (the "
                    "context kernel's launch; integers, true/false), to compare launches in one lease")
    ap.add_argument("--ctx-launch-fp8", default="", help="KEY=VALUE,... over gpu_worker.cuda_ops.CTX_CONFIG_FP8 (the "
                    "context kernel's launch on float8 keys, the FP8 engine's join contexts)")
    ap.add_argument("--name", default="public_bench.json")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    for flag, given, conf in (("--ctx-launch", args.ctx_launch, cuda_ops.CTX_CONFIG),
                              ("--ctx-launch-fp8", args.ctx_launch_fp8, cuda_ops.CTX_CONFIG_FP8)):
        for kv in filter(None, given.split(",")):
            key, val = kv.split("=")
            if not val.isdigit() and val.lower() not in ("true", "false"):
                raise SystemExit(f"{flag} {kv!r}: an integer or true/false")
            conf[key] = int(val) if val.isdigit() else val.lower() == "true"
    if args.smoke:
        args.model, args.device, args.hf_sample = args.model or "tiny-qwen3-random", args.device or "cpu", 8
    args.model, args.device = args.model or "qwen3-4b-random", args.device or "cuda"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                        handlers=[logging.StreamHandler(sys.stdout),
                                  logging.FileHandler(Path(args.out) / (Path(args.name).stem + ".log"))])
    dev = torch.device(args.device)
    sz = SMOKE if args.smoke else FULL
    sz = {**sz, "bio2_anchors": args.bio2_anchors} if args.bio2_anchors else sz
    res = {"commit": args.commit, "command": " ".join(sys.argv), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "model": args.model,
           "quantize": args.quantize, "ctx_config": dict(cuda_ops.CTX_CONFIG),
           "ctx_config_fp8": dict(cuda_ops.CTX_CONFIG_FP8), "sizes": sz,
           "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    res["matmul_tflops"] = rate = matmul_rate(dev)
    t0 = time.perf_counter()
    eng = Engine(EngineConfig(model=args.model, device=args.device, tokenizer=args.tokenizer,
                              quantize=args.quantize))  # defaults but quantize
    res.update(load_s=time.perf_counter() - t0, rates=eng.rates, kv_slots=eng.rt.kv_slots,
               token_budget=eng.rt.token_budget,
               ctx_budget=eng.rt.ctx_budget, ops=eng.rt.ops.name,
               static_gib=torch.cuda.memory_allocated(dev) / 2**30 if dev.type == "cuda" else None)
    count_pairs(eng)
    w = Words(eng.tokenizer, 1)
    eng.join(w.texts(2, 500), w.partners(50), wl.JOIN_QUESTION)  # warm-up: kernels compile
    eng.filter(w.texts(64, 300), [wl.QUESTION])
    eng.filter(w.texts(160, 300), [wl.QUESTION])  # ... and a pass of the full token budget
    sections = [s for s in args.sections.split(",") if s]
    hf = bench_hf.hf_model(eng) if "WORKLOADS" in sections and args.hf_sample else None
    for s in sections:
        log.info("section %s", s)
        if s == "WORKLOADS":
            workloads(args, eng, dev, sz, rate, hf, res)
        elif s == "JOIN_IDS":
            join_ids(args, eng, dev, sz, rate, res)
        elif s == "SUSTAINED":
            sustained(args, eng, dev, sz, res)
        elif s == "EXECUTOR":
            executor(args, eng, dev, sz, res)
        elif s == "BIO2":
            bio2(args, eng, dev, sz, rate, res)
        else:
            raise SystemExit(f"unknown section {s!r}")
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    dump(args, res)


if __name__ == "__main__":
    main()
