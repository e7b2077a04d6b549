"""A decode step's forward from static device buffers, captured as one CUDA graph per batch bucket.

A decode step is one token per running sequence. Its inputs are the token
ids (a token the step before chose on the device, not yet read by the host:
its row there, read in the graph from the tokens `keep` holds), positions, KV
write slots and the attention's work list (segments of a flat slot list:
quail_kernels.decode_attention); they are copied into device
buffers that never move, the batch is padded to a bucket (16, 32, 48, 64, then
multiples of 32), and the bucket's forward is replayed from a CUDA graph
captured on first use: one launch for the ~400 kernels of a step instead of a
Python launch each. Off the GPU the same buffers run the forward eagerly.

The buffers grow (and the graphs are captured again) when a step's work list
outgrows them.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from .attention import AttnMeta


def bucket(n: int) -> int:
    """The padded batch of n sequences: multiples of 16 up to 64, then of 32 (one graph each)."""
    return 16 * -(-n // 16) if n <= 64 else 32 * -(-n // 32)


def read_later(ids: torch.Tensor, host: torch.Tensor | None = None):
    """The function that gives the int tensor `ids` as a list, copied behind the work queued so far into `host`
    (a host buffer of their shape, pinned on a GPU; a new one where None): it waits for that copy only."""
    cuda = ids.device.type == "cuda"
    if host is None:
        host = torch.empty(ids.shape, dtype=ids.dtype, pin_memory=cuda)
    host.copy_(ids, non_blocking=cuda)
    ev = None
    if cuda:
        ev = torch.cuda.Event()
        ev.record()

    def read() -> list[int]:
        if ev is not None:
            ev.synchronize()
        return host.tolist()
    return read


class DecodeStep:
    """Owns the static buffers and graphs of decode steps over one model runner's model and KV cache."""

    def __init__(self, runner, max_seqs: int, graphs: bool):
        self.runner, self.model, self.kv, self.ops = runner, runner.model, runner.kv, runner.ops
        self.device = runner.device
        self.graphs = graphs and self.device.type == "cuda"
        self.max_b = bucket(max_seqs)
        cfg = self.model.cfg
        self.n_kv, self.rep, self.d = cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim
        self.dtype = self.kv.k.dtype
        self.vocab = self.model.head_all.shape[0]
        self.logits = torch.empty(self.max_b, self.vocab, dtype=self.dtype, device=self.device)
        self.arange = torch.arange(self.max_b, device=self.device)
        # the last step's tokens, chosen on the device: an input id of -1 - r reads row r (`keep`)
        self.tokens = torch.zeros(self.max_b, dtype=torch.long, device=self.device)
        self._tok_host = torch.zeros(self.max_b, dtype=torch.long, pin_memory=self.device.type == "cuda")
        self._host = [None, None]  # two pinned host buffers, alternating (a step fills one while the other copies)
        self._copied = [None, None]  # the event after each one's copy
        self._turn = 0
        self._alloc(8 * self.max_b, 1 << 20, 16 * self.max_b)
        self.captures = 0  # graphs captured (a counter: buckets x buffer sizes)
        self.capture_s = 0.0  # host seconds spent capturing them (each after one eager forward of its step)

    # buffers ---------------------------------------------------------------------------
    def _alloc(self, items: int, slots: int, partials: int):
        """Device buffers for a work list of up to `items` items, `slots` slots and `partials` partial rows
        (even sizes: every view 16-byte aligned); drops the captured graphs, which point at the old ones."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # (nothing queued still reads the old buffers)
        B = self.max_b
        self.cap_items, self.cap_slots, self.cap_parts = items, slots + slots % 2, partials + partials % 2
        sizes = {"ids": B, "pos": B, "write": B, "ptr": B + 2, "n_items": 2, "items": 5 * items,
                 "slots": self.cap_slots, "ents": self.cap_parts}
        self.off, o = {}, 0
        for k, n in sizes.items():
            self.off[k] = (o, n)
            o += n
        self.head_len = self.off["slots"][0]  # ids .. items: copied whole every step
        self.buf = torch.zeros(o, dtype=torch.long, device=self.device)
        self.v = {k: self.buf[a:a + n] for k, (a, n) in self.off.items()}
        self.v["items"] = self.v["items"].view(5, items)
        self.part_o = torch.empty(self.cap_parts, self.n_kv, self.rep, self.d, dtype=torch.float32, device=self.device)
        self.part_lse = torch.empty(self.cap_parts, self.n_kv, self.rep, dtype=torch.float32, device=self.device)
        self._host = [None, None]
        self._graphs: dict[tuple, torch.cuda.CUDAGraph] = {}  # (bucket, sequences per work item)
        self._pool = None  # (a dropped graph's pool id cannot be captured into again)

    def _host_buffer(self) -> np.ndarray:
        """This step's pinned host buffer (numpy view), once its last copy has finished."""
        t = self._turn = 1 - self._turn
        if self._host[t] is None:
            self._host[t] = torch.zeros(self.buf.numel(), dtype=torch.long, pin_memory=self.device.type == "cuda")
        elif self._copied[t] is not None:
            self._copied[t].synchronize()
        return self._host[t].numpy()

    # a step ------------------------------------------------------------------------------
    def launch(self, ids, pos, write, slots, plan, start=None, qb: int = 0) -> torch.Tensor:
        """Launch the forward of n = len(ids) tokens: ids (int64; -1 - r: row r of the tokens `keep` holds), pos,
        write (-1: not stored), the flat slot list and its `DecodePlan`. Returns the logits [n, vocab] (a view of a
        buffer the next launch overwrites). `qb`: the plan's sequences per work item (one graph per bucket and qb).
        `start`: a CUDA event recorded just before the forward is queued (after its inputs' copies and any capture:
        `capture_s` counts those)."""
        n = len(ids)
        B = bucket(n) if self.graphs else n  # (eager: no padding)
        n_items, n_slots, n_parts = plan.items.shape[1], len(slots), plan.n_partials
        if n_items > self.cap_items or n_slots > self.cap_slots or n_parts > self.cap_parts:
            self._alloc(max(self.cap_items, 2 * n_items), max(self.cap_slots, 2 * n_slots),
                        max(self.cap_parts, 2 * n_parts))
        h = self._host_buffer()
        o = self.off
        for name, x, pad in (("ids", ids, 0), ("pos", pos, 0), ("write", write, -1)):
            a = o[name][0]
            h[a:a + n] = x
            h[a + n:a + B] = pad
        a = o["ptr"][0]
        h[a:a + n + 1] = plan.ptr
        h[a + n + 1:a + B + 1] = plan.ptr[-1]  # padded rows: no partials (zeros)
        h[o["n_items"][0]] = n_items
        a = o["items"][0]
        h[a:a + 5 * self.cap_items].reshape(5, self.cap_items)[:, :n_items] = plan.items
        a = o["slots"][0]
        h[a:a + n_slots] = slots
        e = o["ents"][0]
        h[e:e + n_parts] = plan.ents
        host = self._host[self._turn]
        cuda = self.device.type == "cuda"
        for lo, hi in ((0, self.head_len), (a, a + n_slots), (e, e + n_parts)):
            self.buf[lo:hi].copy_(host[lo:hi], non_blocking=cuda)
        if cuda:
            ev = self._copied[self._turn] = torch.cuda.Event()
            ev.record()
        if not self.graphs:
            if start is not None:
                start.record()
            self._forward(B, n_items, qb)
        else:
            g = self._graphs.get((B, qb))
            if g is None:
                t0 = time.perf_counter()
                g = self._graphs[(B, qb)] = self._capture(B, qb)
                self.capture_s += time.perf_counter() - t0
            if start is not None:
                start.record()
            g.replay()
        return self.logits[:n]

    def keep(self, ids: torch.Tensor):
        """A step's tokens (on the device) kept as the next step's inputs and copied to the host behind it;
        returns the function that waits for that copy and gives them as a list (`read_later`)."""
        n = len(ids)
        self.tokens[:n].copy_(ids)
        return read_later(self.tokens[:n], self._tok_host[:n])

    def _forward(self, B: int, programs: int = 0, qb: int = 0):
        """The forward of B rows from the buffers; programs: the attention's work items (0: all `cap_items`,
        the fixed grid a graph replays); qb: sequences per work item."""
        v = self.v
        attn = {"slots": v["slots"], "items": v["items"], "n_items": v["n_items"][:1], "ptr": v["ptr"][:B + 1],
                "ents": v["ents"], "part_o": self.part_o, "part_lse": self.part_lse, "programs": programs, "qb": qb}
        meta = AttnMeta(cu_seqlens=[], groups=[], write_slots=v["write"][:B], logit_index=self.arange[:B],
                        device_meta={"decode": attn})
        ids = v["ids"][:B]
        ids = torch.where(ids < 0, self.tokens[(-1 - ids).clamp(min=0)], ids)  # tokens still on the device
        self.model(ids, v["pos"][:B], meta, self.kv, self.ops, full=True, out=self.logits[:B])

    def _capture(self, B: int, qb: int) -> torch.cuda.CUDAGraph:
        """The bucket's forward as a CUDA graph (after one eager run, which compiles its kernels; it computes
        this step, and the replay computes it again: the same KV written to the same slots)."""
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            self._forward(B, 0, qb)
        torch.cuda.current_stream(self.device).wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=self._pool):  # the buckets' graphs share one memory pool (the first's)
            self._forward(B, 0, qb)
        if self._pool is None:
            self._pool = g.pool()
        self.captures += 1
        return g
