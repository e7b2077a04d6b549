"""The daemon that forks the executors' Python workers (``spark.python.daemon.module``).

It is pyspark's own daemon with the engine's heavy modules (torch, the tokenizer classes,
gpu_worker, the SQL function bodies) imported once before the first fork. Spark forks a new worker
for each concurrent Python evaluation it has no idle worker for; each would otherwise import them
again, seconds per worker. Only imports happen here, and one layer built on the meta device (its
first build imports torch's reference kernels): no tensor holds data and no thread is started
before a fork."""
from __future__ import annotations


def _preload() -> None:
    try:
        import torch
        import transformers.activations  # noqa: F401 - what the model configurations import
        import transformers.models.llama.configuration_llama  # noqa: F401
        import transformers.models.qwen3.configuration_qwen3  # noqa: F401
        from transformers.models.auto import tokenization_auto  # noqa: F401

        import gpu_worker.engine  # noqa: F401
        import quail_spark.executor  # noqa: F401

        with torch.device("meta"):
            torch.nn.Embedding(2, 2)
    except Exception:  # noqa: BLE001 - a worker imports what it needs itself; preloading only saves time
        pass


if __name__ == "__main__":
    _preload()
    from pyspark import daemon

    daemon.manager()
