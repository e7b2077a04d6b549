"""Attention and GEMM probes for the JOIN shape on one GPU (one device call).

Times, with correctness against a float32 reference first:
  - the grouped context part of JOIN (13,000 partner tokens of one anchor x
    5,000 context keys, 32 q / 8 kv heads, d = 128, bf16, no mask) through
    torch's FA2 (grouped heads native, or GQA-packed), varlen_attn, cuDNN
    (dense, native GQA, expanded or GQA-packed) and quail_kernels.seg_attention
    (configurations swept);
  - the anchors' causal part (5,000 tokens) through FA2 and cuDNN;
  - the projections of one pass (16,384 tokens) in bf16 and FP8 (torch._scaled_mm,
    row-wise scales), quantization of the activations included or not.

    PYTHONPATH=. python3 benchmarks/probes/attn_probe.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import quail_kernels as kernels  # noqa: E402
from quail_kernels.seg_attention import seg_attention, seg_block_t, seg_items, segments  # noqa: E402

NQ, NKV, D = 32, 8, 128
REP = NQ // NKV


def bench(fn, warmup=10, rep=50) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")  # ms


def ref_attention(q, k, v, causal):
    """float32 [T, NQ, D] and lse [T, NQ] for one sequence (chunks over heads)."""
    outs, lses = [], []
    for h0 in range(0, NQ, 8):
        qh = q[:, h0:h0 + 8].float().transpose(0, 1)
        kh = k[:, h0 // REP:(h0 + 8) // REP].float().repeat_interleave(REP, 1).transpose(0, 1)
        vh = v[:, h0 // REP:(h0 + 8) // REP].float().repeat_interleave(REP, 1).transpose(0, 1)
        s = qh @ kh.transpose(1, 2) / math.sqrt(D)
        if causal:
            off = k.shape[0] - q.shape[0]
            mask = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool, device=q.device).tril(off)
            s = s.masked_fill(~mask, float("-inf"))
        lses.append(torch.logsumexp(s, -1).transpose(0, 1))
        outs.append((torch.softmax(s, -1) @ vh).transpose(0, 1))
    return torch.cat(outs, 1), torch.cat(lses, 1)


def err(o, lse, ro, rlse):
    o, lse = o.float(), lse.float()
    return {"out_rel": ((o - ro).norm() / ro.norm()).item(), "out_max": (o - ro).abs().max().item(),
            "lse_max": (lse - rlse).abs().max().item()}


def ctx_variants(Tq, C, dev):
    """name -> fn(q, k, v) -> (out [Tq, NQ, D], lse [Tq, NQ]); one group (one anchor)."""
    cu_q = torch.tensor([0, Tq], dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0, C], dtype=torch.int32, device=dev)
    v_ = {}

    def fa2(q, k, v):
        o, lse = torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, Tq, C, 0.0, False, False)[:2]
        return o, lse.t()
    v_["fa2_gqa"] = fa2

    cu_q4 = cu_q * REP

    def pack(q):  # [T, NQ, D] -> [T * REP, NKV, D]: row t*REP + g of head h = q[t, h*REP + g]
        return q.view(-1, NKV, REP, D).transpose(1, 2).reshape(-1, NKV, D)

    def unpack(o, lse):
        T = o.shape[0] // REP
        return (o.view(T, REP, NKV, D).transpose(1, 2).reshape(T, NQ, D),
                lse.reshape(NKV, T, REP).permute(1, 0, 2).reshape(T, NQ))

    def fa2_packed(q, k, v):
        o, lse = torch.ops.aten._flash_attention_forward(pack(q), k, v, cu_q4, cu_k, Tq * REP, C, 0.0, False,
                                                         False)[:2]
        return unpack(o, lse)
    v_["fa2_packed"] = fa2_packed

    try:
        from torch.nn.attention.varlen import AuxRequest, varlen_attn

        def varlen(q, k, v):
            ke, ve = k.repeat_interleave(REP, 1), v.repeat_interleave(REP, 1)
            o, aux = varlen_attn(q, ke, ve, cu_q, cu_k, Tq, C, return_aux=AuxRequest(lse=True))
            lse = aux.lse
            return o, lse.t() if lse.shape[0] == NQ else lse
        v_["varlen_expand"] = varlen
    except Exception as e:  # noqa: BLE001
        print("varlen_attn unavailable:", e)

    cud = torch.ops.aten._scaled_dot_product_cudnn_attention

    def cudnn_gqa(q, k, v):
        o, lse = cud(q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2), v.unsqueeze(0).transpose(1, 2),
                     None, True, 0.0, False, False)[:2]
        return o[0].transpose(0, 1), lse[0].reshape(NQ, -1).transpose(0, 1)
    v_["cudnn_gqa"] = cudnn_gqa

    def cudnn_expand(q, k, v):
        ke, ve = k.repeat_interleave(REP, 1), v.repeat_interleave(REP, 1)
        return cudnn_gqa(q, ke, ve)
    v_["cudnn_expand"] = cudnn_expand

    def cudnn_packed(q, k, v):
        qp = pack(q)
        o, lse = cud(qp.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2), v.unsqueeze(0).transpose(1, 2),
                     None, True, 0.0, False, False)[:2]
        return unpack(o[0].transpose(0, 1), lse[0].reshape(NKV, -1))
    v_["cudnn_packed"] = cudnn_packed

    if hasattr(torch.ops.aten, "_cudnn_attention_forward"):
        def cudnn_varlen(q, k, v):
            ke, ve = k.repeat_interleave(REP, 1), v.repeat_interleave(REP, 1)
            o, lse = torch.ops.aten._cudnn_attention_forward(q, ke, ve, None, cu_q, cu_k, Tq, C, True, 0.0,
                                                             False, False)[:2]
            return o, lse.t() if lse.shape[0] == NQ else lse
        v_["cudnn_varlen"] = cudnn_varlen

    seg = torch.from_numpy(segments([0], [Tq], [0], [C])).to(dev)
    for bm in (128, 256):
        bt = seg_block_t(REP, bm)
        items = torch.from_numpy(seg_items([Tq], bt)).to(dev)
        for bn, nw, ns in ((128, 8, 3), (128, 8, 2), (64, 8, 3), (64, 8, 4), (64, 4, 3), (128, 4, 3)):
            if bm == 256 and (nw == 4 or bn * ns > 256):
                continue

            def tri(q, k, v, bt=bt, items=items, bn=bn, nw=nw, ns=ns):
                return seg_attention(q, k, v, seg, items, bt, block_n=bn, num_warps=nw, num_stages=ns, tma=True)
            v_[f"seg_m{bm}_n{bn}_w{nw}_s{ns}_tma"] = tri
    # as in the engine: the partial self result merged in (here: a zero-weight one), two anchors' groups
    bt = seg_block_t(REP, 128)
    half = Tq // 2
    seg2 = torch.from_numpy(segments([0, half], [half, Tq - half], [0, 0], [C, C])).to(dev)
    items2 = torch.from_numpy(seg_items([half, Tq - half], bt)).to(dev)
    items1 = torch.from_numpy(seg_items([Tq], bt)).to(dev)
    for name, sg, it in (("merge", seg, items1), ("merge_2groups", seg2, items2)):
        def merged(q, k, v, sg=sg, it=it):
            out = torch.zeros_like(q)
            lse = torch.full(q.shape[:2], float("-inf"), dtype=torch.float32, device=q.device)
            return seg_attention(q, k, v, sg, it, bt, out=out, lse=lse, merge=True, block_n=128, num_warps=8,
                                 num_stages=3, tma=True)
        v_["seg_m128_n128_w8_s3_tma_" + name] = merged
    return v_


def causal_variants(T, dev):
    cu = torch.tensor([0, T], dtype=torch.int32, device=dev)
    cud = torch.ops.aten._scaled_dot_product_cudnn_attention
    v_ = {}

    def fa2(q, k, v):
        o, lse = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, T, T, 0.0, True, False)[:2]
        return o, lse.t()
    v_["fa2_gqa"] = fa2

    def cudnn(q, k, v, expand=False):
        if expand:
            k, v = k.repeat_interleave(REP, 1), v.repeat_interleave(REP, 1)
        o, lse = cud(q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2), v.unsqueeze(0).transpose(1, 2),
                     None, True, 0.0, True, False)[:2]
        return o[0].transpose(0, 1), lse[0].reshape(NQ, -1).transpose(0, 1)
    v_["cudnn_gqa"] = cudnn
    seg = torch.from_numpy(segments([0], [T], [0], [T])).to(dev)
    for bm in (128, 256):
        bt = seg_block_t(REP, bm)
        items = torch.from_numpy(seg_items([T], bt, longest_first=True)).to(dev)
        for bn, nw, ns, tma in ((128, 8, 3, True), (128, 8, 3, False), (64, 8, 3, True), (128, 8, 2, True)):
            if bm == 256 and bn * ns > 256:
                continue

            def tri(q, k, v, bt=bt, items=items, bn=bn, nw=nw, ns=ns, tma=tma):
                return seg_attention(q, k, v, seg, items, bt, causal=True, block_n=bn, num_warps=nw, num_stages=ns,
                                     tma=tma)
            v_[f"seg_m{bm}_n{bn}_w{nw}_s{ns}{'_tma' if tma else ''}"] = tri
    return v_


def run_attention(name, variants, q, k, v, causal, flops, res):
    ro, rlse = ref_attention(q, k, v, causal)
    table = {}
    for vn, fn in variants.items():
        try:
            o, lse = fn(q, k, v)
            e = err(o, lse, ro, rlse)
            ok = e["out_rel"] < 1e-2 and e["lse_max"] < 5e-2
            ms = bench(lambda: fn(q, k, v)) if ok else float("nan")
            table[vn] = dict(e, ms=ms, tflops=flops / ms / 1e9 if ok else 0.0, ok=ok)
            print(f"{name:8s} {vn:34s} rel {e['out_rel']:.1e} lse {e['lse_max']:.1e} "
                  f"{ms:8.3f} ms {table[vn]['tflops']:6.1f} TFLOP/s{'' if ok else '  WRONG'}", flush=True)
        except Exception as ex:  # noqa: BLE001
            table[vn] = {"error": f"{type(ex).__name__}: {ex}"[:300]}
            print(f"{name:8s} {vn:34s} ERROR {table[vn]['error'][:160]}", flush=True)
        torch.cuda.empty_cache()
    res[name] = table


def gemm_probe(res, dev, T=16384):
    shapes = {"qkv": (2560, 6144), "o": (4096, 2560), "gate_up": (2560, 19456), "down": (9728, 2560)}
    out = {}
    for nm, (K, N) in shapes.items():
        a = torch.randn(T, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) / math.sqrt(K)
        flops = 2 * T * K * N
        ms_bf = bench(lambda: a @ w.t())
        row = {"bf16_ms": ms_bf, "bf16_tflops": flops / ms_bf / 1e9}
        try:
            f8 = torch.float8_e4m3fn
            w_s = w.abs().amax(1, keepdim=True).float() / 448.0
            w8 = (w / w_s).to(f8)
            a_s = a.abs().amax(1, keepdim=True).float() / 448.0
            a8 = (a / a_s).to(f8)
            mm = lambda: torch._scaled_mm(a8, w8.t(), scale_a=a_s, scale_b=w_s.t(), out_dtype=torch.bfloat16)  # noqa
            ref = (a.float() @ w.float().t())
            got = mm().float()
            row["fp8_rel_err"] = ((got - ref).norm() / ref.norm()).item()
            ms8 = bench(mm)

            def quant_mm():
                s = a.abs().amax(1, keepdim=True).float() / 448.0
                return torch._scaled_mm((a / s).to(f8), w8.t(), scale_a=s, scale_b=w_s.t(), out_dtype=torch.bfloat16)
            ms8q = bench(quant_mm)
            row.update(fp8_ms=ms8, fp8_tflops=flops / ms8 / 1e9, fp8_with_quant_ms=ms8q)
        except Exception as ex:  # noqa: BLE001
            row["fp8_error"] = f"{type(ex).__name__}: {ex}"[:300]
        out[nm] = row
        print(f"gemm {nm:8s} " + " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in row.items()), flush=True)
    res["gemm"] = out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/attn_probe")
    ap.add_argument("--tq", type=int, default=13000)
    ap.add_argument("--ctx", type=int, default=5000)
    ap.add_argument("--skip-gemm", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    res = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name()}
    print(res, flush=True)
    torch.manual_seed(0)
    try:
        Tq, C = args.tq, args.ctx
        q = torch.randn(Tq, NQ, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(C, NKV, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(C, NKV, D, device=dev, dtype=torch.bfloat16)
        run_attention("ctx", ctx_variants(Tq, C, dev), q, k, v, False, 4.0 * Tq * C * NQ * D, res)
        del q, k, v
        T = C
        q = torch.randn(T, NQ, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(T, NKV, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(T, NKV, D, device=dev, dtype=torch.bfloat16)
        run_attention("causal", causal_variants(T, dev), q, k, v, True, 2.0 * T * T * NQ * D, res)
        del q, k, v
        if not args.skip_gemm:
            gemm_probe(res, dev)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    (out / "attn_probe.json").write_text(json.dumps(res, indent=1))
    best = sorted(((v.get("tflops", 0), n) for n, v in res.get("ctx", {}).items()), reverse=True)[:8]
    print("best ctx:", best)
    best = sorted(((v.get("tflops", 0), n) for n, v in res.get("causal", {}).items()), reverse=True)
    print("causal:", best)


if __name__ == "__main__":
    main()
