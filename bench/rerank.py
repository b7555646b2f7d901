"""Reranking throughput: hubzoo vs sentence-transformers' CrossEncoder, same run.

A tiny random MiniLM-sized cross-encoder (BertForSequenceClassification: 6 layers, hidden
384, 12 heads, intermediate 1536, one label; all-MiniLM-L6-v2's tokenizer, max_length 512),
built once into build/bench/. One query against documents of 3..120 words (seeded);
pairs/s = documents / seconds of one score call (tokenizing included), batch size 32 in
both, the same thread count. Engines alternate round by round so load drift on a shared
machine hits both alike; the speedup is the ratio of the median rounds. The scores are
checked against CrossEncoder.predict before timing.

    .venv/bin/python bench/rerank.py [--threads 2] [--docs 128] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hubzoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the a of engine model query passage document search reranker scores relevance "
         "between texts reads files from hub computes exactly same result on cpu").split()


def build_model(out: Path) -> Path:
    import transformers

    if (out / "model.safetensors").exists():
        return out
    config = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                                     num_attention_heads=12, intermediate_size=1536,
                                     max_position_embeddings=512, num_labels=1)
    config.architectures = ["BertForSequenceClassification"]
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok = transformers.AutoTokenizer.from_pretrained(ROOT / "models" / "all-MiniLM-L6-v2")
    tok.model_max_length = 512
    tok.save_pretrained(out)
    return out


def documents(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 120)))) + "." for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(args.threads)
    path = build_model(ROOT / "build" / "bench" / "rerank_minilm_l6")
    query = "which engine computes the same relevance scores as the reference?"
    docs = documents(args.docs)
    st = CrossEncoder(str(path), device="cpu")
    ours = hubzoo.Reranker.from_pretrained(path, num_threads=args.threads)
    pairs = [(query, d) for d in docs]
    ref = st.predict(pairs, batch_size=32)
    got = ours.score(query, docs, batch_size=32)
    max_abs = float(np.abs(got - ref).max())
    assert np.allclose(got, ref, rtol=1e-4, atol=1e-6), max_abs
    times = {"hubzoo": [], "sentence-transformers": []}
    for _ in range(args.rounds):
        for name in times:
            t0 = time.perf_counter()
            if name == "hubzoo":
                ours.score(query, docs, batch_size=32)
            else:
                st.predict(pairs, batch_size=32)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    speedup = med["sentence-transformers"] / med["hubzoo"]
    result = {
        "model": "tiny random BertForSequenceClassification L6 H384 (MiniLM-sized)",
        "threads": args.threads, "documents": args.docs, "rounds": args.rounds,
        "load_average": os.getloadavg(), "max_abs_diff": max_abs,
        "pairs_per_s": {k: args.docs / v for k, v in med.items()},
        "best_pairs_per_s": {k: args.docs / min(v) for k, v in times.items()},
        "speedup_median": speedup,
    }
    out = ROOT / "bench" / "results"
    (out / "rerank.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Reranking throughput: hubzoo vs sentence-transformers CrossEncoder",
        "",
        f"{result['model']}, {args.docs} documents of 3..120 words against one query, batch size 32, "
        f"{args.threads} threads, {args.rounds} alternating rounds (`bench/rerank.py`). "
        f"Scores agree with CrossEncoder.predict (max abs difference {max_abs:.2g}). "
        f"Load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} (a shared machine).",
        "",
        "| engine | pairs/s (median) | pairs/s (best) |",
        "|---|---|---|",
    ]
    for k in times:
        lines.append(f"| {k} | {result['pairs_per_s'][k]:.1f} | {result['best_pairs_per_s'][k]:.1f} |")
    lines += ["", f"Speedup (ratio of medians): **{speedup:.2f}x**", ""]
    (out / "rerank.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
