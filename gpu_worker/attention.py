"""Split attention over packed variable-length batches.

Every sequence in a forward pass has a context (the cached KV of its prefix,
read through slot indices; possibly empty) and its new tokens. New tokens
attend to the context without a mask and to themselves causally; the two
partial results merge by their log-sum-exp. Sequences that share a context
(a document's predicates, an anchor's partners) form one group, so the
context is read once per group, not once per sequence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Group:
    """Sequences [seq_lo, seq_hi) sharing one context; their tokens are [tok_lo, tok_hi)."""

    ctx_slots: torch.Tensor | None  # int64 [C] slot of each context key, or None
    seq_lo: int
    seq_hi: int
    tok_lo: int
    tok_hi: int
    base_key: int = 0  # groups with one base_key share their first base_len context slots (an anchor)
    base_len: int = 0
    ctx_key: int = 0  # groups with one ctx_key read the same context (one slot tensor)


@dataclass
class AttnMeta:
    """Per-forward metadata, set by the runner before a pass and dropped after it."""

    cu_seqlens: list[int]  # [n_seq + 1] token offsets of the packed sequences
    groups: list[Group]
    write_slots: torch.Tensor  # int64 [T], -1 where the token's KV is not kept
    logit_index: torch.Tensor  # int64 [n_out], packed positions whose logits are wanted
    max_seqlen: int = 0
    device_meta: dict = field(default_factory=dict)  # extra tensors for device kernels


def attend(q, k, v, causal_lens=None):
    """Softmax attention with its log-sum-exp, grouped-query heads, in float32.

    q: [S, n_q, Tq, d]; k, v: [S, n_kv, Tk, d]; causal_lens: None (no mask) or
    int64 [S] true lengths (then Tq == Tk, causal and padded keys masked).
    Returns out [S, n_q, Tq, d] (q.dtype) and lse [S, n_q, Tq] float32.
    """
    S, n_q, Tq, d = q.shape
    n_kv = k.shape[1]
    rep = n_q // n_kv
    qg = q.reshape(S, n_kv, rep * Tq, d).float()
    s = qg @ k.float().transpose(-1, -2) * (1.0 / math.sqrt(d))  # [S, n_kv, rep*Tq, Tk]
    s = s.view(S, n_kv, rep, Tq, -1)
    if causal_lens is not None:
        Tk = k.shape[2]
        i = torch.arange(Tq, device=q.device)[:, None]
        j = torch.arange(Tk, device=q.device)[None, :]
        ok = (j <= i)[None] & (j[None] < causal_lens[:, None, None])  # [S, Tq, Tk]
        s = s.masked_fill(~ok[:, None, None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [S, n_kv, rep, Tq]
    p = torch.exp(s - lse.unsqueeze(-1).clamp_min(-1e30))
    p = torch.nan_to_num(p, nan=0.0)
    o = p.view(S, n_kv, rep * Tq, -1) @ v.float()  # [S, n_kv, rep*Tq, d]
    return o.view(S, n_q, Tq, d).to(q.dtype), lse.reshape(S, n_q, Tq)


_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attend_fast(q, k, v, causal: bool):
    """`attend` through torch's fused CPU flash kernel, which also returns the LSE.

    Shapes as `attend`; causal means each query row i sees keys j <= i (right
    padding is harmless then: padded rows are dropped by the caller).
    """
    if _CPU_FLASH is None or q.device.type != "cpu":
        return attend(q, k, v, torch.full((q.shape[0],), k.shape[2], device=q.device) if causal else None)
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    o, lse = _CPU_FLASH(q, k, v, 0.0, causal)[:2]
    return o, lse.float()


PREFIXED_CAUSAL_FROM = 384  # query rows from which attend_prefixed runs one square causal call


def attend_prefixed(q, k, v, C: int):
    """Causal attention of L query rows over C prefix keys (all visible) + their own L keys, no LSE.

    q: [S, n_q, L, d]; k, v: [S, n_kv, C + L, d] -> out [S, n_q, L, d]. Row i sees keys j <= C + i
    (right padding is harmless: padded rows are dropped by the caller). One fused SDPA call with
    grouped-query heads native (no repeated K/V). Below PREFIXED_CAUSAL_FROM rows the call takes a
    mask and no query rows for the prefix; from there on it is causal over [prefix; rows] with C zero
    query rows put first (dropped after), which lets the CPU flash kernel skip the blocks above the
    diagonal: SmolLM2's shape on one core, 1 x 1,200 rows after 40, 21 ms against 35 masked; 2 x
    300 rows, 4.8 against 4.7.
    """
    L = q.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if L >= PREFIXED_CAUSAL_FROM:
        qz = torch.cat([q.new_zeros(q.shape[0], q.shape[1], C, q.shape[3]), q], 2)
        return torch.nn.functional.scaled_dot_product_attention(qz, k, v, is_causal=True, enable_gqa=gqa)[:, :, C:]
    ok = torch.arange(C + L, device=q.device)[None, :] <= torch.arange(L, device=q.device)[:, None] + C
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=ok, enable_gqa=gqa)


def merge(o_a, lse_a, o_b, lse_b):
    """Merge two partial attention results by log-sum-exp. o: [..., d], lse: [...]."""
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    tot = wa + wb
    out = (wa.unsqueeze(-1) * o_a.float() + wb.unsqueeze(-1) * o_b.float()) / tot.clamp_min(1e-30).unsqueeze(-1)
    return out.to(o_a.dtype), m + torch.log(tot)


FOLD_CTX = 128  # contexts up to this many tokens join the causal call instead of a second call + merge
# a folded group of at most this many sequences whose padding would add over this share of its tokens runs
# one call per sequence (SmolLM2 on one core, 16 documents of 90-200 tokens after a 30-token frame: 14.8 ms
# against 17.7 padded); more sequences (a join's partners) stay one padded call
UNPADDED_MAX_SEQS = 64
UNPADDED_WASTE = 1.25


def split_attention_torch(q, k, v, k_cache, v_cache, meta: AttnMeta, merge_fn=merge, fold_ctx: int = FOLD_CTX):
    """Split attention in plain torch. q: [T, n_q, d]; k, v: [T, n_kv, d] -> [T, n_q, d].

    Per group: the sequences padded to one batch attend causally to
    themselves; the group's cached context is attended once for all of them
    and merged by log-sum-exp. A context of at most `fold_ctx` tokens (a chat
    frame) is cheaper folded in: it is prepended to every sequence's keys and
    the causal call runs over [context; sequence] with zero query rows for
    the context positions, which are dropped.
    """
    out = torch.empty_like(q)
    cu = meta.cu_seqlens
    batches = meta.device_meta.get("one_token")
    if batches is None:
        batches = meta.device_meta["one_token"] = _one_token_batches(meta.groups, q.device)
    for rows, slots, ok in batches:
        kb, vb = (torch.cat([c[slots], x[rows, None]], 1).transpose(1, 2) for c, x in ((k_cache, k), (v_cache, v)))
        o = torch.nn.functional.scaled_dot_product_attention(q[rows, :, None], kb, vb, attn_mask=ok,
                                                             enable_gqa=q.shape[1] != k.shape[1])
        out[rows] = o[:, :, 0]
    for g in meta.groups:
        if _one_token(g):
            continue  # attended above
        lens = [cu[i + 1] - cu[i] for i in range(g.seq_lo, g.seq_hi)]
        L = max(lens)
        C = 0 if g.ctx_slots is None else g.ctx_slots.numel()
        if 0 < C <= fold_ctx:
            kc = k_cache.index_select(0, g.ctx_slots).transpose(0, 1)[None]  # [1, n_kv, C, d]
            vc = v_cache.index_select(0, g.ctx_slots).transpose(0, 1)[None]
            if len(lens) <= UNPADDED_MAX_SEQS and L * len(lens) > UNPADDED_WASTE * sum(lens):
                # a few sequences of unequal lengths (documents after a chat frame): one call each, no padding
                for i in range(g.seq_lo, g.seq_hi):
                    a, b = cu[i], cu[i + 1]
                    qi, ki, vi = (x[a:b].transpose(0, 1)[None] for x in (q, k, v))
                    o = attend_prefixed(qi, torch.cat([kc, ki], 2), torch.cat([vc, vi], 2), C)
                    out[a:b] = o[0].transpose(0, 1)
            else:
                qs, ks, vs = (_pad(x, cu, g, L) for x in (q, k, v))  # [S, heads, L, d]
                kc, vc = (x.expand(len(lens), -1, -1, -1) for x in (kc, vc))
                o = attend_prefixed(qs, torch.cat([kc, ks], 2), torch.cat([vc, vs], 2), C)
                out[g.tok_lo:g.tok_hi] = _unpad(o, lens)
            continue
        qs, ks, vs = (_pad(x, cu, g, L) for x in (q, k, v))  # [S, heads, L, d]
        o_self, lse_self = attend_fast(qs, ks, vs, causal=True)
        o_self, lse_self = _unpad(o_self, lens), _unpad(lse_self.unsqueeze(-1), lens).squeeze(-1)
        if C > 0:
            kc = k_cache.index_select(0, g.ctx_slots).transpose(0, 1)[None]  # [1, n_kv, C, d]
            vc = v_cache.index_select(0, g.ctx_slots).transpose(0, 1)[None]
            qg = q[g.tok_lo:g.tok_hi].transpose(0, 1)[None]  # [1, n_q, Tg, d]
            o_ctx, lse_ctx = attend_fast(qg, kc, vc, causal=False)
            o_ctx, lse_ctx = o_ctx[0].transpose(0, 1), lse_ctx[0].transpose(0, 1)  # [Tg, n_q, d], [Tg, n_q]
            o_self, _ = merge_fn(o_self, lse_self, o_ctx, lse_ctx)
        out[g.tok_lo:g.tok_hi] = o_self
    return out


ONE_TOKEN_WASTE = 2.0  # a batch of one-token rows pads no context to more than this many times its length


def _one_token(g: Group) -> bool:
    """Whether the group's sequences are one token each after a cached context (a decode step's)."""
    return g.ctx_slots is not None and g.tok_hi - g.tok_lo == g.seq_hi - g.seq_lo


def _one_token_batches(groups: list[Group], device) -> list[tuple]:
    """The rows that are one token after a cached context (a decode step's sequences), in batches of
    contexts of similar length: (rows int64 [B], context slots int64 [B, C] right-padded, mask bool
    [B, 1, 1, C + 1] of the keys each row sees: its context, then its own token last). One fused call
    per batch instead of one or two per sequence."""
    rows, ctxs = [], []
    for g in filter(_one_token, groups):
        rows += range(g.tok_lo, g.tok_hi)
        ctxs += [g.ctx_slots] * (g.tok_hi - g.tok_lo)
    order = sorted(range(len(rows)), key=lambda i: ctxs[i].numel())
    out, i = [], 0
    while i < len(order):
        j, first = i + 1, ctxs[order[i]].numel()
        while j < len(order) and ctxs[order[j]].numel() <= ONE_TOKEN_WASTE * first:
            j += 1
        part = order[i:j]
        lens = torch.tensor([ctxs[r].numel() for r in part], device=device)
        slots = torch.nn.utils.rnn.pad_sequence([ctxs[r] for r in part], batch_first=True)
        keys = torch.arange(slots.shape[1] + 1, device=device)
        ok = (keys[None] < lens[:, None]) | (keys[None] == slots.shape[1])
        out.append((torch.tensor([rows[r] for r in part], device=device), slots, ok[:, None, None]))
        i = j
    return out


def _pad(x, cu, g: Group, L: int):
    """[T, h, d] rows of the group's sequences -> [S, h, L, d], zero padded."""
    S = g.seq_hi - g.seq_lo
    if S == 1:
        return x[cu[g.seq_lo]:cu[g.seq_lo + 1]].transpose(0, 1)[None]
    out = x.new_zeros(S, x.shape[1], L, x.shape[2])
    for j, i in enumerate(range(g.seq_lo, g.seq_hi)):
        out[j, :, : cu[i + 1] - cu[i]] = x[cu[i]:cu[i + 1]].transpose(0, 1)
    return out


def _unpad(x, lens):
    """[S, h, L, e] -> [sum(lens), h, e]."""
    if len(lens) == 1:
        return x[0, :, : lens[0]].transpose(0, 1)
    return torch.cat([x[j, :, :n].transpose(0, 1) for j, n in enumerate(lens)])
