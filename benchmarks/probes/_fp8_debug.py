import sys, json, torch, numpy as np
sys.path.insert(0, ".")
from kernels.kv_fp8 import gather_fp8, dequant
from kernels.seg_attention import seg_attention, seg_attention_ref, seg_block_t, seg_items, segments
bn, w, st, tma, merge, d = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), {"0": False, "1": True}.get(sys.argv[4], sys.argv[4]), sys.argv[5] == "1", int(sys.argv[6])
dev = "cuda"
n_q, n_kv = 32, 8
q_lens, k_lens = [300, 45], [1000, 129]
seg = segments([0, 300], q_lens, [0, 1000], k_lens)
T, C = 345, 1129
g = torch.Generator().manual_seed(0)
k = torch.randn(C, n_kv, d, generator=g).to(torch.bfloat16); v = torch.randn(C, n_kv, d, generator=g).to(torch.bfloat16)
q = torch.randn(T, n_q, d, generator=g).to(torch.bfloat16)
k8, vt8, amax = gather_fp8(k.cuda(), v.cuda(), torch.arange(C, device=dev))
torch.cuda.synchronize()
bt = seg_block_t(4, 128)
items = torch.from_numpy(seg_items(seg[1], bt)).cuda()
o0 = torch.zeros(T, n_q, d, dtype=torch.bfloat16, device=dev); l0 = torch.full((T, n_q), float("-inf"), device=dev)
o, l = seg_attention(q.cuda(), k8, vt8, torch.from_numpy(seg).cuda(), items, bt, out=o0, lse=l0, merge=merge, block_n=bn, num_warps=w, num_stages=st, tma=tma, amax=amax)
torch.cuda.synchronize()
kd, vd = dequant(k8.cpu(), vt8.cpu(), amax.cpu(), C)
ro, rl = seg_attention_ref(q, kd, vd, seg)
err = float((o.cpu().float() - ro).pow(2).mean().sqrt() / ro.pow(2).mean().sqrt())
print("OK", sys.argv[1:], "rel_rms", round(err, 4), "lse", float((l.cpu() - rl).abs().max()))
