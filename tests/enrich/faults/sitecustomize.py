"""Faults for enrichment runs that tests start as their own processes (test-only; never imported by the product).

A test puts this folder first on PYTHONPATH (``helpers.faults_env``): Python imports this module at the
start of the driver and of every Spark Python worker (which inherit the environment), and each fault
named in the environment wraps one product function as its module is imported, so no product module
carries a test-only branch:

- QUAIL_FAULT_ENGINE_DEVICE=cpu: executors build their engines on this device whatever the plan says
  (a 'cuda' job scheduled on fake GPUs, its engine on the CPU);
- QUAIL_FAULT_FAIL_FIRST_ATTEMPT=1: every first attempt of an AI task raises before its first batch;
- QUAIL_FAULT_BATCH_DELAY_S=0.5: each AI task sleeps after it records a batch's progress (a run long
  enough to be killed mid-way);
- QUAIL_FAULT_KILL=between-commits: the driver SIGKILLs itself after the output's data commit, before
  the rerun state's (Delta and Iceberg outputs).

Modules are patched when imported, not here: a Spark worker daemon forks its workers, and importing
pyarrow (threads) before the fork is what it must not do.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import signal
import sys
import time

ENGINE_DEVICE = "QUAIL_FAULT_ENGINE_DEVICE"
FAIL_FIRST_ATTEMPT = "QUAIL_FAULT_FAIL_FIRST_ATTEMPT"
BATCH_DELAY_S = "QUAIL_FAULT_BATCH_DELAY_S"
KILL = "QUAIL_FAULT_KILL"


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after the module named ``name`` is first executed."""

    def __init__(self):
        self.patches: dict = {}

    def add(self, name: str, patch) -> None:
        self.patches.setdefault(name, []).append(patch)

    def find_spec(self, name, path, target=None):
        patches = self.patches.pop(name, None)
        if patches is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            for patch in patches:
                patch(module)

        spec.loader.exec_module = exec_module
        return spec


def _engine_on(device: str):
    def patch(executor):
        get_engine = executor.get_engine
        executor.get_engine = lambda conf: get_engine({**conf, "device": device})
    return patch


def _fail_first_attempt(ai_stage):
    evaluate = ai_stage.evaluate_batch

    def evaluate_batch(plan, batch, attempt=0):
        if attempt == 0:
            raise RuntimeError(f"failure of a first task attempt injected by the test ({FAIL_FIRST_ATTEMPT})")
        return evaluate(plan, batch, attempt)
    ai_stage.evaluate_batch = evaluate_batch


def _delay_batches(seconds: float):
    def patch(ai_stage):
        add = ai_stage.Progress.add

        def add_then_wait(self, counts):
            add(self, counts)
            time.sleep(seconds)
        ai_stage.Progress.add = add_then_wait
    return patch


def _kill():
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_before_delta_state(deltalake):
    write = deltalake.write_deltalake

    def write_deltalake(target, *args, **kw):
        if str(target).endswith("__ai_state"):  # delta_sink.STATE_SUFFIX: the data version is committed
            _kill()
        return write(target, *args, **kw)
    deltalake.write_deltalake = write_deltalake


def _kill_before_iceberg_state(iceberg_sink):
    replace = iceberg_sink._replace_files
    calls = []

    def replace_files(t, staged, run_id):
        calls.append(run_id)
        if calls.count(run_id) == 2:  # IcebergSink.commit: the data snapshot, then the state's
            _kill()
        return replace(t, staged, run_id)
    iceberg_sink._replace_files = replace_files


def install(environ=os.environ) -> None:
    hook = PatchOnImport()
    if environ.get(ENGINE_DEVICE):
        hook.add("quail_spark.executor", _engine_on(environ[ENGINE_DEVICE]))
    if environ.get(FAIL_FIRST_ATTEMPT) == "1":
        hook.add("quail_spark.enrich.ai_stage", _fail_first_attempt)
    if float(environ.get(BATCH_DELAY_S) or 0):
        hook.add("quail_spark.enrich.ai_stage", _delay_batches(float(environ[BATCH_DELAY_S])))
    if environ.get(KILL) == "between-commits":
        hook.add("deltalake", _kill_before_delta_state)
        hook.add("quail_spark.enrich.iceberg_sink", _kill_before_iceberg_state)
    elif environ.get(KILL):
        raise ValueError(f"{KILL}={environ[KILL]!r}: expected 'between-commits'")
    if hook.patches:
        sys.meta_path.insert(0, hook)


install()
