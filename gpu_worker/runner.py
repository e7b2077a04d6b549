"""The only owner of the device: weights, KV tensors, per-pass metadata, forward."""
from __future__ import annotations

import numpy as np
import torch

from .attention import AttnMeta, Group
from .scheduler import Job, base_of


class KVCache:
    """K and V of every layer: [L, n_slots, n_kv, d] each (slot = one token)."""

    def __init__(self, num_layers, num_slots, n_kv, head_dim, dtype, device):
        self.k = torch.zeros(num_layers, num_slots, n_kv, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.num_slots = num_slots

    def layer(self, i: int):
        return self.k[i], self.v[i]

    @staticmethod
    def bytes_per_slot(cfg, dtype) -> int:
        return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * torch.finfo(dtype).bits // 8


class ModelRunner:
    def __init__(self, model, kv: KVCache, ops, device: torch.device):
        self.model, self.kv, self.ops, self.device = model, kv, ops, device
        self.pin = device.type == "cuda"

    def build(self, jobs: list[Job]):
        """Pack jobs (grouped by context node) into input tensors and AttnMeta."""
        if jobs and all(j.ctx_flat is not None for j in jobs):
            return self._build_step(jobs)
        # groups under one base (an anchor) adjacent, so their shared context is read once
        jobs = sorted(jobs, key=lambda j: (0, 0, 0) if j.ctx is None else (1, id(base_of(j.ctx)), id(j.ctx)))
        ids, pos, write, logit_index, requests = [], [], [], [], []
        cu = [0]
        groups: list[Group] = []
        ctx_cache: dict[int, torch.Tensor] = {}
        prev_ctx, prev_job, g_seq, g_tok = object(), None, 0, 0
        for s, job in enumerate(jobs):
            if job.ctx is None or job.ctx is not prev_ctx:
                if s > 0:
                    groups.append(self._group(prev_job, g_seq, s, g_tok, cu[-1], ctx_cache))
                prev_ctx, prev_job, g_seq, g_tok = job.ctx, job, s, cu[-1]
            base = cu[-1]
            for n, slots in zip(job.nodes, job.store):
                ids.extend(n.tokens)
                write.extend(slots if slots is not None else [-1] * len(n.tokens))
            n_tok = job.num_tokens
            pos.extend(range(job.start, job.start + n_tok))
            for off, r in job.outputs:
                logit_index.append(base + off)
                requests.append(r)
            cu.append(base + n_tok)
        groups.append(self._group(prev_job, g_seq, len(jobs), g_tok, cu[-1], ctx_cache))
        return self._meta(ids, pos, write, logit_index, requests, cu, groups, ctx_cache)

    def _build_step(self, jobs: list[Job]):
        """`build` of a decode step: every job one token after a context whose slots it brings flat
        (`Job.ctx_flat`), one output at that token. The same packing, groups and order as `build` gives
        such jobs, without walking nodes per token."""
        bases = {id(j): base_of(j.ctx) for j in jobs}
        jobs = sorted(jobs, key=lambda j: (id(bases[id(j)]), id(j.ctx)))
        n = len(jobs)
        ids = [j.nodes[0].tokens[0] for j in jobs]
        pos = [j.nodes[0].start for j in jobs]
        write = [-1 if j.store[0] is None else j.store[0][0] for j in jobs]
        requests = [j.outputs[0][1] for j in jobs]
        groups: list[Group] = []
        ctx_cache: dict[int, torch.Tensor] = {}
        prev = None
        for s, j in enumerate(jobs):
            if j.ctx is prev:  # two sequences at one node: one group
                groups[-1].seq_hi = groups[-1].tok_hi = s + 1
                continue
            prev, key = j.ctx, id(j.ctx)
            ctx_cache[key] = j.ctx_flat
            groups.append(self._ctx_group(j, j.ctx_flat, s, s + 1, s, s + 1, bases[id(j)]))
        return self._meta(ids, pos, write, range(n), requests, range(n + 1), groups, ctx_cache)

    def _meta(self, ids, pos, write, logit_index, requests, cu, groups, ctx_cache):
        """The pass's index arrays on the device (one copy) and its AttnMeta."""
        cu = list(cu)
        host = [torch.tensor(x, dtype=torch.long) for x in (ids, pos, write, logit_index)]
        ctx_keys = [k for k in ctx_cache if not isinstance(k, tuple)]  # one slot tensor per distinct context
        ids_d, pos_d, write_d, logit_d, *ctx_d = self._to_device_all(host + [ctx_cache[k] for k in ctx_keys])
        on_device = dict(zip(ctx_keys, ctx_d))
        for g in groups:
            if g.ctx_slots is not None:
                g.ctx_slots = on_device[g.ctx_key]
        meta = AttnMeta(cu_seqlens=cu, groups=groups, write_slots=write_d, logit_index=logit_d,
                        max_seqlen=max(b - a for a, b in zip(cu, cu[1:])))
        return ids_d, pos_d, meta, requests

    def _group(self, job, seq_lo, seq_hi, tok_lo, tok_hi, cache) -> Group:
        ctx = job.ctx
        if ctx is None:
            return Group(None, seq_lo, seq_hi, tok_lo, tok_hi)
        key = id(ctx)
        base = base_of(ctx)
        if key not in cache:
            cache[key] = self._context_slots(job, base, cache)  # host; moved with the pass's other indices
        return self._ctx_group(job, cache[key], seq_lo, seq_hi, tok_lo, tok_hi, base)

    @staticmethod
    def _ctx_group(job, slots, seq_lo, seq_hi, tok_lo, tok_hi, base) -> Group:
        """The group of a job's context: under its base (read once for every group below it) unless the
        job reads its base alone (`Job.shared` off)."""
        if not job.shared:
            return Group(slots, seq_lo, seq_hi, tok_lo, tok_hi, ctx_key=id(job.ctx))
        return Group(slots, seq_lo, seq_hi, tok_lo, tok_hi, base_key=id(base), base_len=base.end, ctx_key=id(job.ctx))

    @staticmethod
    def _context_slots(job, base, cache) -> torch.Tensor:
        """int64 slots of the job's context (host): its base's (an anchor's, converted once per pass for
        all the groups below it) and then the nodes between. A context (partly) stored by this pass
        names its nodes' slots in the job; a decode step's job brings them flat (`Job.ctx_flat`)."""
        if job.ctx_flat is not None:
            return job.ctx_flat
        ctx = job.ctx
        per_node = job.ctx_slots if job.ctx_slots is not None else [n.slots for n in ctx.path()]
        k = len(base.path())  # the nodes down to the base (it is on the context's path)
        bkey = ("base", id(base))
        if bkey not in cache:
            cache[bkey] = torch.tensor([x for s in per_node[:k] for x in s], dtype=torch.long)
        if ctx is base:
            return cache[bkey]
        return torch.cat([cache[bkey], torch.tensor([x for s in per_node[k:] for x in s], dtype=torch.long)])

    def _to_device_all(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """int64 host tensors on the device: one pinned buffer and one copy for the whole pass."""
        if self.device.type == "cpu":
            return xs
        return to_device_aligned(xs, self.device)

    def run(self, jobs: list[Job], full: bool = False, on_device: bool = False) -> "Launched":
        """Launch one pass; its answer-row logits (full: whole-vocabulary logits) come back through
        `Launched.wait` (on_device: `Launched.logits` is the device tensor, not copied to the host; a
        decode step picks its tokens there).

        Nothing here waits for the device: the caller reads the logits later,
        after it has prepared and launched the next pass. On a GPU the logits
        are copied to pinned host memory behind this pass and an event marks
        the copy, so reading them waits for this pass only, not for the
        passes launched after it.
        """
        ids, pos, meta, requests = self.build(jobs)
        if hasattr(self.ops, "prepare_meta"):
            self.ops.prepare_meta(meta, self.device)
        logits = self.model(ids, pos, meta, self.kv, self.ops, full=full)
        if self.device.type != "cuda" or on_device:
            return Launched(logits, None, requests)
        host = torch.empty(logits.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(logits, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return Launched(host, done, requests)


def to_device_aligned(xs: list[torch.Tensor], device) -> list[torch.Tensor]:
    """1-D int64 host tensors on `device` (through one pinned buffer and one non-blocking copy on a GPU), each view
    starting 16 bytes aligned (an odd-length array is followed by one unused element). Triton specializes
    a kernel on whether each pointer argument is 16-byte aligned: views at offsets that follow the
    lengths of the arrays before them would compile a new variant whenever a pass's parity first differs
    (the device idles ~0.3 s in the middle of a call while it compiles)."""
    sizes = [x.numel() for x in xs]
    parts = []
    for x, n in zip(xs, sizes):
        parts.append(x.reshape(-1))
        if n % 2:
            parts.append(x.new_zeros(1))
    cuda = torch.device(device).type == "cuda"
    # concatenated straight into the (pinned) buffer the copy reads: no second host copy to pin it
    flat = torch.cat(parts, out=torch.empty(sum(n + n % 2 for n in sizes), dtype=torch.int64, pin_memory=cuda))
    if cuda:
        flat = flat.to(device, non_blocking=True)
    out, off = [], 0
    for n in sizes:
        out.append(flat[off:off + n])
        off += n + n % 2
    return out


class Launched:
    """A launched pass: its logits (host memory once `done` has fired) and the requests they answer."""

    __slots__ = ("logits", "done", "requests")

    def __init__(self, logits: torch.Tensor, done, requests: list[int]):
        self.logits, self.done, self.requests = logits, done, requests

    def wait(self) -> np.ndarray:
        """Logits [n_out, n_ans] (or [n_out, vocab]) float32 as numpy; blocks until this pass has finished."""
        if self.done is not None:
            self.done.synchronize()
        return self.logits.float().numpy()
