"""Inside a Spark task the engine counts the Python workers that share the machine (its cores / the
task's cpus) when it sizes a default CPU KV pool (gpu_worker.runtime.cpu_pool_bytes)."""
from __future__ import annotations

import os


def _share(_):
    from gpu_worker.runtime import workers_sharing

    return workers_sharing()


def test_a_spark_task_counts_the_workers_sharing_its_machine(spark):
    cores = len(os.sched_getaffinity(0))
    cpus = int(spark.conf.get("spark.task.cpus", "1"))
    assert spark.sparkContext.parallelize([0, 1], 2).map(_share).collect() == [max(1, cores // cpus)] * 2
