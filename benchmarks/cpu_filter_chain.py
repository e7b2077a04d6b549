"""FILTER and CHAIN on this CPU: the engine against transformers on the same prompts.

Documents: ~300-token pieces of Python's own documentation (pydoc_data.topics,
PSF license), so the text is real. Both sides score exactly the same token ids
(eng.render_filter); transformers runs padded batches and keeps only the last
position's logits. Ratios are measured in one run.

    python benchmarks/cpu_filter_chain.py --docs 200 --out benchmarks/results/cpu_filter_chain.json
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch

from gpu_worker import Engine, EngineConfig
from gpu_worker.reference import hf_model

QUESTIONS = ["Is the document about a Python statement?", "Does the document mention exceptions?",
             "Does the document describe a built-in type?"]


def documents(n: int, tokens: int, tok) -> list[str]:
    from pydoc_data.topics import topics

    text = "\n".join(topics[k] for k in sorted(topics))
    ids = tok.encode(text, add_special_tokens=False)
    return [tok.decode(ids[i * tokens:(i + 1) * tokens]) for i in range(n)]


@torch.inference_mode()
def hf_margins(model, prompts: list[list[int]], true_ids, false_ids, batch: int) -> np.ndarray:
    out = []
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # fewer pad tokens
    res = np.zeros(len(prompts))
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        L = max(len(prompts[i]) for i in idx)
        ids = torch.zeros(len(idx), L, dtype=torch.long)
        mask = torch.zeros(len(idx), L, dtype=torch.long)
        for r, i in enumerate(idx):  # left padding: the last position is every prompt's last token
            p = prompts[i]
            ids[r, L - len(p):] = torch.tensor(p)
            mask[r, L - len(p):] = 1
        lg = model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1].float()
        m = torch.logsumexp(lg[:, true_ids], -1) - torch.logsumexp(lg[:, false_ids], -1)
        res[idx] = m.numpy()
    return res if not out else res


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return r, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--hf-batch", type=int, default=8)
    ap.add_argument("--out", default="benchmarks/results/cpu_filter_chain.json")
    a = ap.parse_args()
    torch.manual_seed(0)
    eng = Engine(EngineConfig(model="smollm2-135m", device="cpu"))
    hf = hf_model(eng)
    t_ids, f_ids = eng.answer_token_ids
    docs = documents(a.docs, a.tokens, eng.tokenizer)
    res = {"machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
           "docs": len(docs), "doc_tokens": a.tokens, "hf_batch": a.hf_batch}

    # FILTER: one predicate, nothing shared but the chat template
    prompts = [eng.render_filter(d, QUESTIONS[0]) for d in docs]
    eng.tree.trim(keep_free=1.0); eng.reset_stats()
    m_eng, t_eng = timed(lambda: eng.filter(docs, [QUESTIONS[0]])[:, 0])
    m_hf, t_hf = timed(lambda: hf_margins(hf, prompts, t_ids, f_ids, a.hf_batch))
    res["filter"] = {"engine_s": t_eng, "transformers_s": t_hf, "speedup": t_hf / t_eng,
                     "requested_tokens": eng.stats["requested_tokens"], "fresh_tokens": eng.stats["fresh_tokens"],
                     "max_abs_margin_diff": float(np.abs(m_eng - m_hf).max())}
    print("FILTER", res["filter"], flush=True)

    # CHAIN: three predicates over the same documents, every (doc, predicate) scored
    prompts = [eng.render_filter(d, q) for d in docs for q in QUESTIONS]
    eng.tree.trim(keep_free=1.0); eng.reset_stats()
    m_eng, t_eng = timed(lambda: eng.chain(docs, QUESTIONS, short_circuit=False).reshape(-1))
    st = dict(eng.stats)
    m_hf, t_hf = timed(lambda: hf_margins(hf, prompts, t_ids, f_ids, a.hf_batch))
    res["chain"] = {"engine_s": t_eng, "transformers_s": t_hf, "speedup": t_hf / t_eng,
                    "requested_tokens": st["requested_tokens"], "fresh_tokens": st["fresh_tokens"],
                    "max_abs_margin_diff": float(np.abs(m_eng - m_hf).max())}
    print("CHAIN", res["chain"], flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
