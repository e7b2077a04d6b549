"""Long differential runs: ``python -m tests.differential.run --seeds 5 --queries 400``.

Generates ``--queries`` queries per seed (seeds 0..N-1, or ``--first``), checks each on every path
against the SQLite oracle, shrinks each new failure, and prints the counts: agreed, wrong, known,
refused by all (with reasons, Spark's own or ours), ties; then each new failure's minimal query.

``--start I`` skips each seed's queries before index I (a long run continued), ``--only I,J`` checks
those indices alone. A run holds one SparkSession whose Python workers take several GB at times: more
than three runs side by side on 24 GB have had their JVMs killed for memory.

``--entry NAME`` rechecks one known.py entry: only the queries of its shape (``--max`` of them,
each of its alternative tags in turn, the queries with fewest tags first), with the entry disabled so
that its failures count as new; ``--tag`` picks queries by tag the same way."""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter


def session():
    """A local[2] SparkSession with the quail-spark extension (the test suite's settings)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("QUAIL_CPU_KV_POOL_MIB", "256")
    import quail_spark
    from pyspark.sql import SparkSession

    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "4", "spark.python.worker.reuse": "true",
            **quail_spark.spark_conf()}
    builder = SparkSession.builder.master("local[2]").appName("quail-differential")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    return spark


class Tally:
    """Counts per outcome, refusal reasons, and the new failures' minimal queries."""

    def __init__(self):
        self.kinds, self.reasons, self.failures, self.seen = Counter(), Counter(), [], set()

    def add(self, oracle, paths, q, out, shrink_s: float) -> None:
        from .check import shrink

        self.kinds[out.kind.split(":")[0] if out.kind.startswith("known") else out.kind] += 1
        if out.kind.startswith("known"):
            self.kinds[out.kind] += 1
        for path, source, text in out.reasons:
            self.reasons[(path, source, text[:160])] += 1
        if out.kind != "wrong":
            return
        # one shrink per way of failing: the paths, and a refusal's text or "rows"
        key = tuple((p, w[:90] if w.startswith("refused") else "rows") for p, w in sorted(out.failures.items()))
        if key in self.seen or shrink_s <= 0:
            self.failures.append(out.message(q))
        else:
            self.seen.add(key)
            small, got = shrink(oracle, paths, q, out, shrink_s)
            self.failures.append("minimal " + got.message(small) + "\n  generated: " + q.text("spark"))
        print(self.failures[-1], flush=True)

    def report(self) -> str:
        from .known import KNOWN

        lines = ["counts: " + ", ".join(f"{k}={v}" for k, v in sorted(self.kinds.items()))]
        unmatched = [n for n in KNOWN if self.kinds[f"known:{n}"] == 0]
        lines.append(f"known-failure entries no query matched: {unmatched}")
        lines += [f"refused by all: {n} x {path} ({source}): {text}" for (path, source, text), n in
                  sorted(self.reasons.items(), key=lambda x: -x[1])[:40]]
        lines += ["", f"{len(self.failures)} new failures:"] + self.failures
        return "\n".join(lines)


def chosen(seeds, n: int, tags: list, entry: str | None, most: int | None, start: int = 0, only=None):
    """(seed, index, query) to check: every query of every seed, the seeds in turn (so that a run
    stopped early covers each); or, given tags or a known.py entry (which is then disabled), those of
    its shape, the tags in turn, the queries with fewest tags first."""
    from .grammar import Gen
    from .known import KNOWN, fits

    gens = {seed: Gen(seed) for seed in seeds}
    every = ((seed, i, q) for i in range(n) for seed, gen in gens.items() for q in [gen.query()] if i >= start
             and (not only or i in only))
    if not tags and not entry:
        return every
    needs = [tuple(tags)] if tags else []
    if entry:
        needs += KNOWN.pop(entry)[0]
    fit = sorted((c for c in every if fits(c[2].shape, needs)), key=lambda c: len(c[2].shape))
    by_tag = {t: [c for c in fit if t in c[2].shape] for t in needs[-1]}  # the last set's tags in turn
    out, seen, most = [], set(), min(most or len(fit), len(fit))
    while len(out) < most:
        for t in by_tag:
            c = next((c for c in by_tag[t] if c[:2] not in seen), None)
            if c and len(out) < most:
                out.append(c)
                seen.add(c[:2])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first", type=int, default=0, help="the first seed")
    ap.add_argument("--queries", type=int, default=400, help="queries per seed")
    ap.add_argument("--start", type=int, default=0, help="skip each seed's queries before this index")
    ap.add_argument("--only", help="check only these query indices of each seed (comma-separated)")
    ap.add_argument("--verbose", action="store_true", help="one line per query")
    ap.add_argument("--shrink-seconds", type=float, default=180.0, help="per new failure (0: no shrinking)")
    ap.add_argument("--tag", action="append", default=[], help="check only queries holding this tag (repeatable: any)")
    ap.add_argument("--entry", help="check only queries of this known.py entry's shape, with the entry disabled")
    ap.add_argument("--max", type=int, help="with --tag / --entry: at most this many queries")
    args = ap.parse_args(argv)
    from gpu_worker import Engine, EngineConfig

    from .check import check
    from .oracle import Oracle
    from .paths import Paths

    spark = session()
    oracle, paths, tally = Oracle(Engine(EngineConfig(model="tiny-llama-random", device="cpu"))), Paths(spark), Tally()
    start, done = time.monotonic(), 0
    seeds = range(args.first, args.first + args.seeds)
    try:
        for seed, i, q in chosen(seeds, args.queries, args.tag, args.entry, args.max, args.start,
                                  {int(x) for x in args.only.split(",")} if args.only else None):
            t0 = time.monotonic()
            out = check(oracle, paths, q)
            if args.verbose:
                print(f"seed {seed} query {i}: {out.kind} ({time.monotonic() - t0:.1f} s)", flush=True)
            tally.add(oracle, paths, q, out, args.shrink_seconds)
            done += 1
            if done % 25 == 0:
                print(f"{done} queries, {time.monotonic() - start:.0f} s, {dict(tally.kinds)}", flush=True)
    except KeyboardInterrupt:
        print(f"stopped after {done} queries", flush=True)
    print(tally.report(), flush=True)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
