"""Greedy decoding with continuous batching over the prefix tree and the paged KV pool.

A sequence's prompt (document first) is prefilled through the scheduler like
any request, so a document shared by several calls on a row is computed once;
its end node is pinned (`Passes.hold`) so the scheduler stores its KV. Then
each decode step is one forward pass of one new token per live sequence,
attending to its context: the tree's pages down to its node. The sequence's
generated KV grows in place in a node of its own (a new slot in its last page,
a new page every PAGE tokens), so a step inserts O(1) tokens and walks no path.

Sequences join (after their prefill) and leave (at an end) between steps, the
running batch at most `token_budget` sequences. When a new page cannot be had
(the pool full of pinned KV), the most recently admitted sequence is
preempted: unpinned, its KV left to the tree's eviction; it rejoins later with
a prefill of its prompt and the tokens it has generated, which reuses whatever
of its KV is still resident (counted in `stats["preemptions"]`).

With the decode kernel (step_graph.py) the host stays a step ahead: while a
step runs, the next one is placed and queued behind it, its inputs the first
step's tokens still on the device; the host then reads the first step's tokens,
takes them (stop strings, grammars) and computes the grammars' masks for the
queued step. A sequence ended by a token computes one more row, dropped.
Sequences waiting for room that an end has freed are admitted then, their
prefill queued behind the step; they join the step after.

Greedy: argmax of the float32 logits, ties to the lowest id; the grammar's
mask (extract) sets disallowed tokens to -inf first.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from .counters import Counters
from .kv_pool import PAGE
from .passes import Passes
from .prefix_tree import Node
from .scheduler import Job, base_of
from .runner import to_device_aligned
from .step_graph import DecodeStep, read_later

# the logits of an admission ([sequences, vocab] float32, on the device) stay under this: the running batch
# is at most this many bytes' worth of sequences (441 for a 151,936-token vocabulary)
LOGIT_BYTES = 1 << 28


@dataclass(eq=False)
class Seq:
    """One decoded answer: its prompt as (prefix, suffix) ids, the tokens chosen so far (`out`, the last
    one not yet computed while running), the grammar matcher (extract) or stop strings (generate)."""

    prefix: list[int]
    suffix: list[int]
    max_tokens: int
    key: object = None  # what besides the prompt decides the answer (identical sequences run once)
    label: str = ""  # the row (and field) it answers, for errors
    matcher: object = None
    mask: np.ndarray | None = None  # the grammar's allowed tokens at this point (packed int32), once computed
    stop: tuple = ()
    ignore_eos: bool = False
    out: list[int] = field(default_factory=list)
    scanned: int = 0  # characters of the answer's text searched for stop strings
    done: bool = False
    cut: bool = False  # ended by max_tokens or the model's context, not by an end token
    node: Node | None = None  # pinned end of the computed KV while running
    own: Node | None = None  # the node this sequence grows in place (it allocated its pages)
    row: int = -1  # the row of its last step's tokens on the device while that token is not yet taken
    ctx: np.ndarray | None = None  # int64 slots of the KV down to `node` ([:n_ctx]; one slot appended a step)
    n_ctx: int = 0


class Decoder:
    """Runs sequences to their end. Holds `Passes` (tree, pool, runner, counters), the vocabulary size,
    the end ids, the text decoder (stop strings), the grammars (extract) and the context limit."""

    def __init__(self, passes: Passes, vocab: int, stop_ids, decode_text, grammars, limit: int,
                 shared: bool = True, graphs: bool = True):
        self.passes, self.vocab, self.stop_ids = passes, vocab, frozenset(stop_ids)
        self.decode_text, self.grammars, self.limit = decode_text, grammars, limit
        self.shared = shared  # a document's KV read once per step for all the sequences below it
        self.events: list = []  # (start, end) CUDA events of this run's steps: the device's share of the wall
        self.admit_events: list = []  # the same of its admissions (their prefill and first tokens)
        self.max_seqs = max(1, min(passes.token_budget, LOGIT_BYTES // (4 * vocab)))
        self.graphs = graphs  # on a GPU, a step's forward replayed from a CUDA graph (step_graph.py)
        self.step: DecodeStep | bool | None = None  # the static buffers of steps, once the first step runs
        self.blocked = False  # the last admission left sequences waiting, and none has ended since

    @property
    def stats(self) -> Counters:
        return self.passes.stats

    def run(self, seqs: list[Seq]):
        """Decode every sequence (in place: `out`, `cut`); identical sequences are decoded once."""
        first: dict = {}
        twins = []
        for s in seqs:
            k = (s.key, s.max_tokens, s.stop, s.ignore_eos, tuple(s.prefix), tuple(s.suffix))
            if k in first:
                twins.append((s, first[k]))
            else:
                first[k] = s
        waiting, running, pending, admitted = deque(first.values()), [], None, None
        t0 = time.perf_counter()
        try:
            while waiting or running or pending is not None or admitted is not None:
                if pending is not None:  # a launched step whose tokens are still on the device
                    ahead = self._ahead(pending, running)  # the next step queued behind it
                    self._resolve(pending, running)
                    if admitted is not None:  # prefilled behind the pending step: they join the step after
                        self._join(admitted, waiting, running)
                        admitted = None
                    pending = self._select(*ahead) if ahead else None
                    if pending is not None and waiting and not self.blocked:
                        admitted = self._admit(waiting, running)  # room an end freed: queued behind the step
                    continue
                if admitted is not None:
                    self._join(admitted, waiting, running)
                    admitted = None
                if waiting:
                    self._join(self._admit(waiting, running), waiting, running)
                if running:
                    if self._fast():
                        plan, ctx_tokens = self._place_all(running, waiting)
                        pending = self._select(*self._launch(plan, ctx_tokens))
                    else:
                        self._step(running, waiting)
        except BaseException:
            self.passes._abandon()  # the pins of live sequences are not worth undoing one by one
            raise
        finally:
            self._account(t0)
        for s, twin in twins:
            s.out, s.cut, s.done = list(twin.out), twin.cut, True

    # admission ------------------------------------------------------------------
    def _admit(self, waiting: deque, running: list):
        """Prefill waiting sequences while the running batch and the pool have room for them; their first
        tokens chosen on the device behind the prefill. Returns the admission for `_join` (None: nothing
        admitted), which waits for those tokens: nothing here waits for the device."""
        p, tree = self.passes, self.passes.tree
        batch, pages = [], 0  # (growth is not reserved: a sequence short of a page preempts another)
        while waiting and len(running) + len(batch) < self.max_seqs:
            s = waiting[0]
            need = tree.pool.pages_for(len(s.prefix) + len(s.suffix) + len(s.out))
            if (batch or running) and not tree.make_room((pages + need) * PAGE):
                break
            pages += need
            batch.append(waiting.popleft())
        self.blocked = bool(waiting)
        if not batch:
            return None
        ends = []
        for s in batch:
            if p.share:
                at = tree.insert(s.prefix)
                tree.mark_prefix(at)  # the document: worth keeping for the row's other calls
            else:  # prefix caching off: a tree of its own, dropped when it ends or is preempted
                at = tree.insert(s.prefix, at=tree.root(("decode", id(s))))
            ends.append(tree.insert(s.suffix + s.out, at=at))
            p.hold(ends[-1])
        t0 = time.perf_counter()
        start, end = self._span()  # the admission's span on the device (after any step queued before)
        if start is not None:
            start.record()
        logits = p.serve(ends, sum(len(s.prefix) + len(s.suffix) + len(s.out) for s in batch), self.vocab)
        # the grammars' first masks computed on llguidance's threads while the device runs the prefill
        # (a row whose prompt the pool could not keep is picked too, and dropped by `_join`)
        picked = self._pick(batch, logits, end)
        if start is not None:
            self.admit_events.append((start, end))
        self.stats.decode_admit_s += time.perf_counter() - t0
        return batch, ends, read_later(picked)

    def _join(self, admitted, waiting: deque, running: list):
        """An admission's sequences take their first tokens (the host waits for them here) and join the
        running batch; those whose prompt the pool could not keep wait for room again (None: nothing to join)."""
        if admitted is None:
            return
        p, tree = self.passes, self.passes.tree
        batch, ends, picked = admitted
        t0 = time.perf_counter()
        toks = picked()
        self.stats.decode_admit_s += time.perf_counter() - t0  # (waits for the prefill, behind any step before)
        back = []
        for k, (s, end) in enumerate(zip(batch, ends)):
            if end.slots is None:  # the pool could not keep its prompt: it waits for room
                p.unpin(end)
                if not p.share:
                    tree.drop_root(("decode", id(s)))
                back.append(s)
                continue
            s.node, s.own = end, None
            flat = [x for n in end.path() for x in n.slots]
            s.ctx, s.n_ctx = np.array(flat + [0] * max(len(flat), 64), dtype=np.int64), len(flat)
            self._take(s, toks[k])
            if s.done:
                self._finish(s)
            else:
                running.append(s)
        if back and not running:
            raise RuntimeError(f"the KV pool ({p.kv_slots} slots) cannot hold one prompt of "
                               f"{len(back[0].prefix) + len(back[0].suffix)} tokens and its answer; "
                               "raise EngineConfig(kv_pool_tokens=...)")
        waiting.extendleft(reversed(back))

    # one decode step ---------------------------------------------------------------
    def _step(self, running: list, waiting: deque):
        """One pass of one token per running sequence (within the pass's context budget), through the
        runner's jobs (ops without the decode kernel: the plain-torch reference), its tokens taken at once."""
        p = self.passes
        plan, ctx_tokens = self._place_all(running, waiting)
        start, end = self._span()
        timed = start is not None
        if timed:
            start.record()
        jobs = [Job(s.node, [x], [slot], outputs=[(0, r)], ctx_flat=torch.from_numpy(s.ctx[:s.n_ctx]),
                    shared=self.shared)
                for r, (s, x, slot, _) in enumerate(plan)]  # (views: a step only appends past n_ctx)
        launched = p.runner.run(jobs, full=True, on_device=True)
        order, logits = launched.requests, launched.logits  # the logits' rows are in the runner's order
        toks = self._pick([plan[r][0] for r in order], logits, end if timed else None).tolist()
        if timed:
            self.events.append((start, end))
        for r, tok in zip(order, toks):
            self._grow(*plan[r])
            self._take(plan[r][0], tok)
        running[:] = running[len(plan):] + [s for s, *_ in plan if not s.done]  # those left out go first
        for s, *_ in plan:
            if s.done:
                self._finish(s)
        self._count(len(plan), ctx_tokens)

    # steps from static buffers, one queued ahead -----------------------------------------------
    # A step is launched (`_launch`), its rows' tokens chosen on the device (`_select`), and while it runs the
    # next one is placed and queued behind it (`_ahead`) before its tokens come back (`_resolve`): the next
    # step reads them on the device, so the GPU does not wait for the host between steps. A sequence whose
    # token ends it computes one row after its end, dropped.
    def _launch(self, plan: list, ctx_tokens: int) -> tuple:
        start, end = self._span()
        order, logits = self._launch_step(plan, start)
        return plan, order, logits, start, end, ctx_tokens

    def _select(self, plan, order, logits, start, end, ctx_tokens) -> tuple:
        """The launched step's sequences grown by their input token's KV (one whose last token ended it
        gives back a page it took), then its tokens chosen on the device (after the grammars' masks, which
        read the tokens taken before). Returns the pending step."""
        for s, x, slots, fresh in plan:
            if s.done:  # ended by the token before: this row is dropped
                self.stats.decode_dropped_rows += 1
                if slots is not None and slots[0] % PAGE == 0:
                    self.passes.tree.pool.release(slots)
                continue
            self._grow(s, x, slots, fresh)
        seqs = [plan[r][0] for r in order]
        read = self.step.keep(self._pick(seqs, logits, end))
        for k, s in enumerate(seqs):
            if not s.done:
                s.row = k
        return plan, order, read, start, end, ctx_tokens

    def _resolve(self, pending: tuple, running: list):
        """The pending step's tokens taken (the host waits for them here); sequences that end are released."""
        plan, order, read, start, end, ctx_tokens = pending
        toks = read()
        if end is not None:
            self.events.append((start, end))
        ended = []
        for k, r in enumerate(order):
            s = plan[r][0]
            if s.done:
                continue
            s.row = -1
            self._take(s, toks[k])
            if s.done:
                ended.append(s)
        in_plan = {id(s) for s, *_ in plan}
        running[:] = [s for s in running if id(s) not in in_plan] + [s for s, *_ in plan if not s.done]
        for s in ended:
            self._finish(s)
        self._count(len(plan), ctx_tokens)

    def _ahead(self, pending: tuple, running: list):
        """The step after the pending one, launched before the pending one's tokens are read (`_launch`'s tuple), or
        None where the pool has too few free pages for the step without preempting. A sequence whose pending token
        is not yet known joins only where it grows in place (the slot does not depend on the token) and only if its
        length alone does not end it; the others run a step later."""
        p, tree = self.passes, self.passes.tree
        in_plan = {id(s) for s, *_ in pending[0]}
        cand = [s for s in running if id(s) not in in_plan] + [
            s for s, *_ in pending[0] if not s.done and not self._full(s, len(s.out) + 1)]
        chosen, base_ids, ctx_tokens = [], set(), 0
        for s in cand:
            if s.row >= 0 and not (s.own is s.node and not s.node.children):
                continue
            base, cost = self._cost(s, base_ids)
            if chosen and ctx_tokens + cost > p.ctx_budget:
                break
            base_ids.add(id(base))
            ctx_tokens += cost
            chosen.append(s)
        pages = sum(1 for s in chosen if s.row < 0 or (s.node.slots[-1] + 1) % PAGE == 0)
        if not chosen or (pages and not tree.make_room(pages * PAGE)):
            return None
        plan = []
        for s in chosen:
            if s.row < 0:
                plan.append((s, *self._place(s)))  # (room made above: a page at most each)
                continue
            nxt = s.node.slots[-1] + 1
            plan.append((s, Node([-1], None, s.node.end), [nxt] if nxt % PAGE else tree.allocate(1), False))
        self.stats.decode_ahead_steps += 1
        return self._launch(plan, ctx_tokens)

    def _cost(self, s: Seq, base_ids: set) -> tuple:
        """(its base, the cached context tokens the sequence adds to a step: its document once a step, when
        shared, after the first sequence of `base_ids` reading it)."""
        base = base_of(s.node)
        return base, s.node.end - base.end + (0 if self.shared and id(base) in base_ids else base.end)

    def _count(self, rows: int, ctx_tokens: int):
        st = self.stats
        for k in ("requested_tokens", "fresh_tokens", "min_fresh_tokens"):
            st[k] += rows
        st.forward_passes += 1
        st.decode_steps += 1
        st.decode_context_tokens += ctx_tokens  # the cached KV the step reads (a shared document once)
        self.passes.tree.passes += 1

    def _fast(self) -> bool:
        """Whether steps run from static buffers through the decode attention kernel (step_graph.py): where
        the ops have Triton's kernels, in 16-bit on a GPU (float32 there is the plain-torch reference's)."""
        if self.step is None:
            r = self.passes.runner
            ok = getattr(r.ops, "kernels", None) is not None and (
                r.device.type == "cpu" or r.kv.k.dtype in (torch.bfloat16, torch.float16))
            self.step = DecodeStep(r, self.max_seqs, self.graphs) if ok else False
        return bool(self.step)

    def _launch_step(self, plan: list, start=None) -> tuple[list[int], torch.Tensor]:
        """Launch a step on the static buffers: its sequences grouped by base (a shared document's KV one
        segment for the group, each sequence's own words and tokens one more), or one segment each with
        shared decode off. Returns (the plan's index of each logits row, the logits on the device); `start`
        (a CUDA event) is recorded as the step's first kernel is queued (after the host's packing)."""
        groups: dict = {}
        for r, (s, *_) in enumerate(plan):
            groups.setdefault(id(base_of(s.node)) if self.shared else id(s), []).append(r)
        n = len(plan)
        ids, pos, write = (np.empty(n, dtype=np.int64) for _ in range(3))
        order, pieces, seg, koff = [], [], [], 0
        for rows in groups.values():
            first = plan[rows[0]][0]
            bl = base_of(first.node).end if self.shared and len(rows) > 1 else 0
            if bl:
                pieces.append(first.ctx[:bl])
                seg.append((len(order), len(rows), koff, bl))
                koff += bl
            for r in rows:
                s, x, slot, _ = plan[r]
                if s.n_ctx == len(s.ctx):
                    s.ctx = np.concatenate([s.ctx, np.zeros_like(s.ctx)])
                s.ctx[s.n_ctx] = (slot if slot is not None else x.slots)[0]  # (_grow writes it again)
                i = len(order)
                # a token still on the device: -1 - its row in the last step's tokens (step_graph.py)
                ids[i] = s.out[-1] if s.row < 0 else -1 - s.row
                pos[i], write[i] = s.n_ctx, -1 if slot is None else slot[0]
                own = s.ctx[bl:s.n_ctx + 1]
                pieces.append(own)
                seg.append((i, 1, koff, len(own)))
                koff += len(own)
                order.append(r)
        q_lo, q_n, k_lo, k_n = np.array(seg, dtype=np.int64).T
        from quail_kernels.decode_attention import plan_decode, seqs_per_item

        st = self.step
        qb = seqs_per_item(st.rep, shared=bool((q_n > 1).any()))  # fewer query rows an item without a shared document
        dplan = plan_decode(q_lo, q_n, k_lo, k_n, n, qb)
        cap = st.capture_s
        logits = st.launch(ids, pos, write, np.concatenate(pieces), dplan, start, qb)
        self.stats.decode_capture_s += st.capture_s - cap
        return order, logits

    def _place_all(self, running: list, waiting: deque) -> tuple[list, int]:
        """The sequences of this step, each placed (`_place`: its input token's node and slot), within the
        pass's context budget; the latest admitted preempted while a page is missing. Returns (plan, the
        cached context tokens the step reads: a shared document once)."""
        p = self.passes
        plan, base_ids, ctx_tokens = [], set(), 0
        i = 0
        while i < len(running):
            s = running[i]
            base, cost = self._cost(s, base_ids)
            if plan and ctx_tokens + cost > p.ctx_budget:
                break  # the rest run next step, first
            got = self._place(s)
            while got is None and len(running) > i + 1:
                self._preempt(running.pop(), waiting)
                got = self._place(s)
            if got is None:
                if i == 0:
                    raise RuntimeError(f"the KV pool ({p.kv_slots} slots) cannot hold one sequence of "
                                       f"{s.node.end + 1} tokens; raise EngineConfig(kv_pool_tokens=...)")
                self._preempt(running.pop(i), waiting)
                break
            base_ids.add(id(base))
            ctx_tokens += cost
            plan.append((s, *got))
            i += 1
        return plan, ctx_tokens

    def _span(self) -> tuple:
        """(start, end) timing events of a span of work on a GPU, else (None, None)."""
        if self.passes.runner.device.type != "cuda":
            return None, None
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def _account(self, t0: float):
        """decode_wall_s: this run's wall; decode_admit_s: the host's in its admissions (launching their prompts'
        prefill, then waiting for their first tokens); decode_capture_s: the CUDA graphs' captures (step_graph.py:
        once per batch bucket of the engine); on CUDA, decode_device_s: each step's span on the device, from its
        first kernel's start to its last kernel's end (launch gaps inside a step included), and
        decode_admit_device_s: each admission's (its prefill and first tokens), so the wall less both is where the
        device waited on the host."""
        ev, self.events = self.events, []
        adm, self.admit_events = self.admit_events, []
        for spans in (ev, adm):
            if spans:
                spans[-1][1].synchronize()
        self.stats.decode_device_s += sum(a.elapsed_time(b) for a, b in ev) / 1e3
        self.stats.decode_admit_device_s += sum(a.elapsed_time(b) for a, b in adm) / 1e3
        self.stats.decode_wall_s += time.perf_counter() - t0

    def _place(self, s: Seq):
        """(node of the input token, its slot list or None, whether the node is new) for this step, or
        None when no page is free."""
        t, n, tree = s.out[-1], s.node, self.passes.tree
        if s.own is n and not n.children:  # grow in place: the rest of its last page, else a new page
            nxt = n.slots[-1] + 1
            slots = [nxt] if nxt % PAGE else tree.allocate(1)
            return None if slots is None else (Node([t], None, n.end), slots, False)
        x = tree.insert([t], at=n)  # a node of its own (or one an earlier call left here)
        slots = None if x.slots is not None else tree.allocate(1)  # resident: computed for its logits only
        if x.slots is None and slots is None:
            tree.unlink_upward(x)
            return None
        x.pending += 1  # pinned at once (no later allocation of this step evicts it): the pin moves down
        return x, slots, slots is not None

    def _grow(self, s: Seq, x: Node, slots, fresh_node: bool):
        if s.n_ctx == len(s.ctx):
            s.ctx = np.concatenate([s.ctx, np.zeros_like(s.ctx)])
        s.ctx[s.n_ctx] = (slots if slots is not None else x.slots)[0]  # the new token's KV joins the context
        s.n_ctx += 1
        n = s.node
        if x.parent is None:  # grown in place (its input token: the last taken)
            n.tokens.append(s.out[-1])
            n.slots.extend(slots)
            return
        if fresh_node:
            self.passes.tree.set_slots(x, slots)
        s.node, s.own = x, (x if fresh_node else None)

    # tokens ------------------------------------------------------------------------
    def _pick(self, seqs: list[Seq], logits: torch.Tensor, done=None) -> torch.Tensor:
        """Greedy tokens of logits [n, vocab] on their device (the first maximum: ties go to the lowest id);
        a grammar's disallowed tokens at -inf first (a row after its sequence's end: none). `done`, a CUDA
        event, is recorded once the step's last kernel is launched."""
        masked = [k for k, s in enumerate(seqs) if s.matcher is not None and not s.done]
        with torch.inference_mode():
            if masked:
                self._fill_masks([seqs[k] for k in masked])
                packed = torch.from_numpy(np.stack([seqs[k].mask for k in masked]))
                if logits.device.type == "cuda":  # (a copy from pageable memory would wait for the device)
                    packed = packed.pin_memory().to(logits.device, non_blocking=True)
                rows = to_device_aligned([torch.tensor(masked, dtype=torch.long)], logits.device)[0]
                ok = self._unpack(packed, logits.shape[1])
                logits[rows] = logits[rows].masked_fill(~ok, float("-inf"))
            ids = logits.argmax(-1)
            if done is not None:
                done.record()
            return ids

    def _take(self, s: Seq, tok: int):
        """The sequence's next token is `tok`: appended, or the end; sets `done` / `cut`."""
        if s.matcher is not None:
            if tok == self.grammars.eos and s.matcher.is_accepting():
                s.done = True
                return
            if not s.matcher.consume_token(tok):
                raise RuntimeError(f"{s.label}: the grammar refused token {tok}: {s.matcher.get_error()}")
            s.out.append(tok)
            s.mask = None
            # finished: nothing can follow, or only the end (its step saved; it counts against max_tokens)
            s.done = s.matcher.is_stopped() or (len(s.out) < s.max_tokens and s.matcher.is_accepting()
                                                and self._only_end(s))
        elif tok in self.stop_ids and not s.ignore_eos:
            s.done = True
            return
        else:
            s.out.append(tok)
            if s.stop:  # searched from where a stop string could start in the new text
                text = self.decode_text(s.out)
                lo = max(0, s.scanned - max(map(len, s.stop)) + 1)
                s.done = any(text.find(x, lo) >= 0 for x in s.stop)
                s.scanned = len(text)
        if not s.done and self._full(s, len(s.out)):
            s.done = s.cut = True

    def _full(self, s: Seq, n_out: int) -> bool:
        """Whether an answer of n_out tokens ends the sequence by its length (max_tokens or the context)."""
        return n_out >= s.max_tokens or len(s.prefix) + len(s.suffix) + n_out >= self.limit

    def _mask(self, s: Seq) -> np.ndarray:
        """The tokens the grammar allows next, packed (int32 words; computed once per token)."""
        if s.mask is None:
            s.mask = self.grammars.packed([s.matcher])[0]
        return s.mask

    def _fill_masks(self, seqs: list[Seq]):
        """The masks of the sequences that have none yet, computed together (llguidance's threads)."""
        need = [s for s in seqs if s.mask is None]
        for s, row in zip(need, self.grammars.packed([s.matcher for s in need])):
            s.mask = row

    @staticmethod
    def _unpack(packed: torch.Tensor, vocab: int) -> torch.Tensor:
        """bool [n, vocab] of int32 masks [n, words] on their device (bit i of word w: token 32 w + i)."""
        shifts = torch.arange(8, device=packed.device, dtype=torch.uint8)  # bytes, little-endian words
        bits = ((packed.view(torch.uint8).unsqueeze(-1) >> shifts) & 1).bool().reshape(packed.shape[0], -1)
        if bits.shape[1] >= vocab:
            return bits[:, :vocab]
        return torch.cat([bits, bits.new_zeros(bits.shape[0], vocab - bits.shape[1])], 1)

    def _only_end(self, s: Seq) -> bool:
        return self.grammars.only_end(self._mask(s))

    def _finish(self, s: Seq):
        self.blocked = False
        self._release(s)
        self.stats.output_tokens += len(s.out)

    def _preempt(self, s: Seq, waiting: deque):
        self.blocked = False
        self._release(s)
        self.stats.preemptions += 1
        waiting.appendleft(s)

    def _release(self, s: Seq):
        """Unpin the sequence's KV (left to eviction; with prefix caching off, dropped)."""
        self.passes.unpin(s.node)
        if not self.passes.share:
            self.passes.tree.drop_root(("decode", id(s)))
        s.node = s.own = s.ctx = None
