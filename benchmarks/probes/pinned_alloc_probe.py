"""Does allocating page-locked host memory wait for the device? Host seconds of each allocation while ~0.4 s of
GEMMs are queued on the device: a new size (fresh cudaHostAlloc), the same size again (torch's caching host
allocator), and a non-blocking copy into it.

    python3 benchmarks/probes/pinned_alloc_probe.py
"""
import json
import time

import torch


def queued(seconds_of_work: int = 40):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(seconds_of_work):  # ~1.4 ms each at ~790 TFLOP/s
        a = (a @ a).clamp_(-1, 1)
    return a


def timed(fn):
    torch.cuda.synchronize()
    queued()
    t = time.perf_counter()
    fn()
    host = time.perf_counter() - t
    t = time.perf_counter()
    torch.cuda.synchronize()
    return {"host_s": round(host, 5), "then_waited_s": round(time.perf_counter() - t, 5)}


res = {}
queued()
torch.cuda.synchronize()
t = time.perf_counter()
queued(200)
torch.cuda.synchronize()
res["queued_work_s"] = (time.perf_counter() - t) * 40 / 200
res["nothing"] = timed(lambda: None)
res["new_pinned_1MiB"] = timed(lambda: torch.empty(1 << 18, dtype=torch.float32, pin_memory=True))
res["new_pinned_1MiB_again"] = timed(lambda: torch.empty(1 << 18, dtype=torch.float32, pin_memory=True))
res["new_pinned_3MiB"] = timed(lambda: torch.empty(3 << 18, dtype=torch.float32, pin_memory=True))
res["pin_memory_5MiB"] = timed(lambda: torch.empty(5 << 18).pin_memory())
buf = torch.empty(1 << 20, dtype=torch.int64, pin_memory=True)
res["h2d_from_preallocated"] = timed(lambda: buf[:1000].to("cuda", non_blocking=True))
res["event_record"] = timed(lambda: torch.cuda.Event().record())
print(json.dumps(res, indent=1))
