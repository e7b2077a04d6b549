"""The ``quail-spark`` command.

    quail-spark enrich SPEC.json [--dry-run] [--fail-on-error] [--debug] [--spark-preset spark/local-cpu] [--conf K=V ...]
    quail-spark eval SPEC.json [--json PATH] [--model M] (see quail_spark.eval_command)

Outside spark-submit the command starts its own SparkSession from a preset
(default ``spark/local-cpu``) plus ``--conf``; under spark-submit
(``jobs/enrich.py``) it uses the session spark-submit configured, and called
in a process that already has an active session it uses that one (and leaves
it running).

Exit status of ``enrich`` (:data:`EXIT_CODES`): 0 done, 1 rows errored under
--fail-on-error (nothing committed), 2 a bad spec or input, or an estimate
above the spec's budget (nothing ran), 3 another run holds the output, 4 an
internal error, or a run stopped for passing its budget (nothing committed). A failure prints one line on stderr
naming the problem; ``--debug`` adds the traceback.
"""
from __future__ import annotations

import argparse
import sys
import traceback

EXIT_CODES = {0: "done", 1: "rows errored under --fail-on-error (nothing committed)",
              2: "bad spec or input, or the estimate exceeds the spec's budget (nothing ran)",
              3: "another run holds the output",
              4: "internal error, or the run passed the spec's budget and was stopped (nothing committed)"}
EPILOG = "exit status: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())


def enrich_parser(sub) -> None:
    e = sub.add_parser("enrich", help="add AI columns to a table's rows (incremental, atomic)", epilog=EPILOG)
    e.add_argument("spec", help="SPEC.json or SPEC.yaml (see docs/enrichment.md)")
    e.add_argument("--fail-on-error", action="store_true",
                   help="rows that cannot be scored fail the run (nothing is committed)")
    e.add_argument("--spark-preset", default=None,
                   help="conf/spark preset when this command starts Spark (default spark/local-cpu)")
    e.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    e.add_argument("--progress-every", type=float, default=10.0, metavar="S",
                   help="seconds between progress lines (default 10)")
    e.add_argument("--progress-dir", default=None, help="keep the executors' progress records here")
    e.add_argument("--debug", action="store_true", help="print the traceback of a failure")
    e.add_argument("--dry-run", action="store_true",
                   help="print the rows and columns a run would compute (a rerun: only the rows to recompute), "
                        "its tokens and estimated time; compute and commit nothing (docs/estimates.md)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quail-spark", description="AI-SQL on Apache Spark", epilog="enrich " + EPILOG)
    sub = p.add_subparsers(dest="command", required=True)
    for add, _ in COMMANDS.values():
        add(sub)
    return p


def enrich(args) -> int:
    from quail_spark.enrich import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
    except OSError as e:
        raise SpecError(f"{args.spec}: cannot read the spec ({e.strerror or e})") from None
    from pyspark.sql import SparkSession

    from quail_spark.enrich.job import run
    from quail_spark.spark_session import spark_session

    owned = SparkSession.getActiveSession() is None  # a session of the caller's keeps running
    spark = spark_session(args)
    try:
        if args.dry_run:
            from quail_spark.enrich.job import dry_run

            dry_run(spec, spark)
            return 0
        run(spec, spark, fail_on_error=args.fail_on_error, progress_every=args.progress_every,
            progress_dir=args.progress_dir)
    finally:
        if owned:
            spark.stop()
    return 0


def exit_code(e: BaseException) -> int:
    """The exit status of a failed command (see :data:`EXIT_CODES`)."""
    from quail_spark.enrich import SpecError
    from quail_spark.enrich.guard import EnrichFailed, OutputBusy

    if isinstance(e, EnrichFailed):
        return 1
    if isinstance(e, SpecError):
        return 2
    if isinstance(e, OutputBusy):
        return 3
    return 4


def eval_parser(sub) -> None:
    from quail_spark import eval_command

    eval_command.add_parser(sub)


def run_eval(args) -> int:
    return args.run(args)  # quail_spark.eval_command.main


COMMANDS = {"enrich": (enrich_parser, enrich), "eval": (eval_parser, run_eval)}  # name -> (its parser, its run)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command][1](args)
    except Exception as e:  # noqa: BLE001 - every failure is one line and an exit status
        from quail_spark.errors import error_line

        code = exit_code(e)
        what = error_line(e) if code < 4 else f"internal error: {type(e).__name__}: {error_line(e)}"
        if getattr(args, "debug", False):
            traceback.print_exc()
        elif code == 4:
            what += " (--debug prints the traceback)"
        print(f"quail-spark {args.command}: {what}", file=sys.stderr, flush=True)
        return code


if __name__ == "__main__":
    sys.exit(main())
