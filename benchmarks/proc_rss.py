"""Resident memory of a Spark application's processes, read from /proc (no psutil).

A sampler thread walks the process tree under one root (the driver, or a
``quail-spark enrich`` process): the root, the JVM and the Python processes whose command
line runs ``pyspark.daemon`` or ``pyspark.worker``. The daemon's children are
the Python workers (one per concurrently running task; each loads its own
engine). Every sample reads VmRSS of each process; VmHWM (the kernel's peak RSS
of the process) catches peaks between samples. Used by cpu_memory.py and
enrich_long_run.py.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def commit(repo: Path) -> str:
    """Short hash of HEAD, with '+dirty' when tracked files have uncommitted changes."""
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--", "."]).returncode
    return head + ("+dirty" if dirty else "")


def _parents() -> dict[int, int]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            out[int(d)] = int(stat[stat.rindex(")") + 2:].split()[1])  # the field after the state
    return out


def _status_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in KiB, or None for a process that is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    vals = {}
    for line in text.splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            vals[line[:5]] = int(line.split()[1])
    return (vals["VmRSS"], vals["VmHWM"]) if len(vals) == 2 else None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def role(cmd: str, parent_role: str | None) -> str | None:
    if "pyspark.daemon" in cmd:  # the daemon forks the workers: same command line, a daemon parent
        return "python_worker" if parent_role in ("python_daemon", "python_worker") else "python_daemon"
    if "pyspark.worker" in cmd:  # a worker started without the daemon
        return "python_worker"
    java = "org.apache.spark.deploy.SparkSubmit" in cmd or cmd.split(" ", 1)[0].endswith("/java")
    if java and parent_role == "root":  # (not the short-lived commands the JVM itself starts)
        return "jvm"
    return None


class Sampler(threading.Thread):
    """Samples the JVM and Spark Python processes under ``root`` every ``every`` seconds."""

    def __init__(self, root: int, every: float = 1.0):
        super().__init__(daemon=True)
        self.root, self.every = root, every
        self.t0 = time.time()
        self.procs: dict[int, dict] = {}   # pid -> role, cmd, first/last seen, peak sampled RSS, VmHWM
        self.samples: list[dict] = []      # {"t": s, "load1", "root"/"jvm"/"daemon": KiB, "workers": {pid: KiB}}
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.every)

    def stop(self):
        self._halt.set()
        self.join()
        self.sample()

    def sample(self):
        parents = _parents()
        kids: dict[int, list[int]] = {}
        for pid, pp in parents.items():
            kids.setdefault(pp, []).append(pid)
        t = round(time.time() - self.t0, 2)
        row = {"t": t, "load1": load_average()[0], "root": 0, "jvm": 0, "daemon": 0, "workers": {}}
        stack = [(self.root, None)]
        while stack:
            pid, parent_role = stack.pop()
            info = self.procs.get(pid)
            r = info["role"] if info else ("root" if pid == self.root else role(_cmdline(pid), parent_role))
            stack.extend((c, r) for c in kids.get(pid, []))
            vals = _status_kib(pid) if r else None
            if vals is None:
                continue
            rss, hwm = vals
            if info is None:
                info = self.procs[pid] = {"role": r, "cmd": _cmdline(pid)[:160], "first_s": t, "peak_rss_kib": 0}
            info["last_s"], info["hwm_kib"] = t, hwm
            info["peak_rss_kib"] = max(info["peak_rss_kib"], rss)
            if r == "python_worker":
                row["workers"][pid] = rss
            else:
                row[r if r in ("root", "jvm") else "daemon"] += rss
        self.samples.append(row)

    def worker_total(self, row: dict) -> int:
        return sum(row["workers"].values())

    def summary(self) -> dict:
        """Peaks in MiB: per process (the larger of the sampled RSS and VmHWM), and of the sampled sums."""
        mib = lambda kib: round(kib / 1024, 1)  # noqa: E731
        per = {pid: {"role": p["role"], "peak_mib": mib(max(p["peak_rss_kib"], p["hwm_kib"])),
                     "first_s": p["first_s"], "last_s": p["last_s"]} for pid, p in self.procs.items()}
        workers = {pid: p for pid, p in per.items() if p["role"] == "python_worker"}
        peak_total = max((r["root"] + r["jvm"] + r["daemon"] + self.worker_total(r) for r in self.samples),
                         default=0)
        peak_workers = max((self.worker_total(r) for r in self.samples), default=0)
        return {
            "python_workers": len(workers),
            "peak_per_worker_mib": max((p["peak_mib"] for p in workers.values()), default=0),
            "peak_workers_sum_mib": mib(peak_workers),
            "peak_jvm_mib": max((p["peak_mib"] for p in per.values() if p["role"] == "jvm"), default=0),
            "peak_root_mib": max((p["peak_mib"] for p in per.values() if p["role"] == "root"), default=0),
            "peak_total_mib": mib(peak_total),
            "sum_of_process_peaks_mib": round(sum(p["peak_mib"] for p in per.values()), 1),
            "processes": {str(pid): p for pid, p in sorted(per.items())},
            "samples": len(self.samples),
        }
