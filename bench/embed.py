"""Sentence-embedding throughput of all-MiniLM-L6-v2: hubzoo vs sentence-transformers and ONNX
Runtime, same run.

Both encode the same list of sentences with the same thread count (torch.set_num_threads /
num_threads), at batch sizes 1, 8 and 64: sentences/s = len(sentences) / seconds of one
encode(sentences, batch_size=b) call, tokenization included, as users see it. Two corpora
(seeded): "mixed", where a tenth of the sentences are long (60..200 words, past
max_seq_length) so padded batches carry much padding, and "short" (3..40 words each).
Engines alternate within each repeat so load drift on a shared machine hits both alike; the
tables give medians and the best run of each (on a machine others share, the load average is
recorded at the start and the end). Also measured in the same run: torch's fp32 GEMM
throughput (the bound on any fp32 engine here) and each engine's effective GFLOP/s of model
math (unpadded).

    .venv/bin/python bench/embed.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's idle BLAS threads would spin on the same cores

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hubzoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "the a of engine model sentence embedding vector reads files from hub and computes exactly "
    "same result as reference implementation on cpu with two threads while tests verify parity "
    "across padded batches tokens pooling normalisation retrieval query passage document search"
).split()
BASE = "sentence-transformers float32"


def sentences(n: int, long_fraction: float, seed: int = 0) -> list[str]:
    """Sentences of 3..40 words; long_fraction of them 60..200 words."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        long = rng.random() < long_fraction
        words = int(rng.integers(60, 200)) if long else int(rng.integers(3, 40))
        out.append(" ".join(rng.choice(WORDS, size=words)).capitalize() + ".")
    return out


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line)
    except Exception:
        return platform.processor()


def torch_gemm_gflops(threads: int) -> float:
    """fp32 torch.mm on a 512 x 1536 x 384 problem (the FFN shape of MiniLM), best of 20."""
    torch.set_num_threads(threads)
    a, b = torch.randn(512, 384), torch.randn(384, 1536)
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * 512 * 1536 * 384 / best / 1e9


def model_gflop(tokens_per_text: list[int], cfg: dict) -> float:
    """Matmul FLOPs of the encoder for these (unpadded) sequences: projections + attention."""
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    linear = 2 * (4 * h * h + 2 * h * inter) * layers
    return sum(n * linear + 4 * n * n * h * layers for n in tokens_per_text) / 1e9


def onnxruntime_version():
    try:
        import onnxruntime

        return onnxruntime.__version__
    except ImportError:
        return None


def onnxruntime_engine(st, model_dir: str, threads: int):
    """ONNX Runtime (CPU execution provider) on the model's transformer, exported once by
    torch.onnx (TorchScript exporter, opset 17) into build/bench/; sentence-transformers'
    tokenizer, its length-sorted batching, mean pooling and normalisation done in numpy.
    None when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in st.tokenize(["a"])]
    path = ROOT / "build/bench" / f"{Path(model_dir).name}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        enc = st.tokenize(["an example sentence", "a"])
        axes = {n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]}
        class Wrapped(torch.nn.Module):  # keyword inputs, one output
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, *inputs):
                return self.model(**dict(zip(names, inputs))).last_hidden_state

        with torch.no_grad():
            torch.onnx.export(Wrapped(st[0].auto_model.eval()), tuple(enc[n] for n in names), str(path),
                              input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes,
                              opset_version=17, dynamo=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    normalize = any(type(m).__name__ == "Normalize" for m in st)

    def encode(texts, b):
        order = np.argsort([-len(t) for t in texts], kind="stable")  # as st.encode batches
        out = np.empty((len(texts), st.get_sentence_embedding_dimension()), dtype=np.float32)
        for i in range(0, len(texts), b):
            idx = order[i:i + b]
            enc = st.tokenize([texts[j] for j in idx])
            feeds = {n: enc[n].numpy() for n in names}
            h = sess.run(["last_hidden_state"], feeds)[0]
            m = feeds["attention_mask"][..., None].astype(np.float32)
            e = (h * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
            if normalize:
                e /= np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)
            out[idx] = e
        return out

    return encode


def run_corpus(texts, engines, ours, st, cfg, batch_sizes, repeats) -> dict:
    reference = st.encode(texts)
    max_abs = float(np.abs(ours["hubzoo float32"].encode(texts) - reference).max())
    ort_abs = (float(np.abs(engines["onnxruntime float32"](texts, 8) - reference).max())
               if "onnxruntime float32" in engines else None)
    tokens = [len(ours["hubzoo float32"].tokenize(t)) for t in texts]
    gflop = model_gflop(tokens, cfg)
    times = {name: {b: [] for b in batch_sizes} for name in engines}
    for b in batch_sizes:
        for fn in engines.values():
            fn(texts, b)  # warm-up
        for _ in range(repeats):
            for name, fn in engines.items():
                t0 = time.perf_counter()
                fn(texts, b)
                times[name][b].append(time.perf_counter() - t0)
    results = {}
    for name in engines:
        results[name] = {}
        for b in batch_sizes:
            med, best = statistics.median(times[name][b]), min(times[name][b])
            results[name][str(b)] = {
                "seconds_median": med,
                "seconds_best": best,
                "sentences_per_s": len(texts) / med,
                "sentences_per_s_best": len(texts) / best,
                "effective_gflops": gflop / med,
            }

    def ratios(key):
        return {name: {str(b): results[name][str(b)][key] / results[BASE][str(b)][key] for b in batch_sizes}
                for name in engines if name != BASE}

    return {
        "sentences": len(texts),
        "tokens": int(sum(tokens)),
        "max_tokens_per_sentence": int(max(tokens)),
        "model_gflop_per_pass": gflop,
        "max_abs_diff_fp32_vs_sentence_transformers": max_abs,
        "max_abs_diff_onnxruntime_vs_sentence_transformers": ort_abs,
        "results": results,
        "ratio_over_sentence_transformers": ratios("sentences_per_s"),
        "ratio_over_sentence_transformers_best_runs": ratios("sentences_per_s_best"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/all-MiniLM-L6-v2"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch-sizes", default="1,8,64")
    ap.add_argument("--out", default=str(ROOT / "bench/results/embed"))
    args = ap.parse_args()

    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    load_at_start = os.getloadavg()
    st = SentenceTransformer(args.model, device="cpu")
    ours = {
        "hubzoo float32": hubzoo.Embedder.from_pretrained(args.model, num_threads=args.threads),
        "hubzoo bfloat16 fused": hubzoo.Embedder.from_pretrained(
            args.model, dtype="bfloat16", mode="fused", num_threads=args.threads),
    }
    engines = {BASE: lambda texts, b: st.encode(texts, batch_size=b)}
    try:
        ort_encode = onnxruntime_engine(st, args.model, args.threads)
    except Exception as e:  # a peer that cannot run is reported, not fatal
        print(f"onnxruntime peer skipped: {type(e).__name__}: {e}", flush=True)
        ort_encode = None
    if ort_encode:
        engines["onnxruntime float32"] = ort_encode
    for name, emb in ours.items():
        engines[name] = lambda texts, b, emb=emb: emb.encode(texts, batch_size=b)
    cfg = json.loads((Path(args.model) / "config.json").read_text())
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    corpora = {
        "mixed": sentences(args.sentences, long_fraction=0.1),
        "short": sentences(args.sentences, long_fraction=0.0, seed=1),
    }
    report = {
        "model": Path(args.model).name,
        "threads": args.threads,
        "repeats": args.repeats,
        "corpora": {name: run_corpus(texts, engines, ours, st, cfg, batch_sizes, args.repeats)
                    for name, texts in corpora.items()},
        "torch_fp32_gemm_gflops": torch_gemm_gflops(args.threads),
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "torch": torch.__version__,
        "sentence_transformers": __import__("sentence_transformers").__version__,
        "onnxruntime": onnxruntime_version(),
        "transformers": __import__("transformers").__version__,
        "hubzoo": hubzoo.__version__,
        "git_commit": hubzoo.git_commit,
        "matmul_target": hubzoo.matmul_target(),
        "attn_implementation": st[0].auto_model.config._attn_implementation,
        "load_average_start": load_at_start,
        "load_average_end": os.getloadavg(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, batch_sizes, out.with_suffix(".md"))
    write_plot(report, batch_sizes, out.with_suffix(".png"))
    print(out.with_suffix(".md").read_text())


def write_markdown(r: dict, batch_sizes: list[int], path: Path) -> None:
    lines = [
        f"# Sentence embeddings, {r['model']}, {r['threads']} threads",
        "",
        f"CPU: {r['cpu']} ({r['matmul_target']}). {r['repeats']} encode() calls per corpus and batch "
        f"size, engines alternating; load average (1 min) {r['load_average_start'][0]:.2f} at the "
        f"start, {r['load_average_end'][0]:.2f} at the end (2 cores: above ~0.5, other processes "
        f"shared them). torch fp32 GEMM here (512x1536x384): {r['torch_fp32_gemm_gflops']:.0f} GFLOP/s.",
    ]
    for corpus, c in r["corpora"].items():
        lines += [
            "",
            f"## {corpus}: {c['sentences']} sentences, {c['tokens']} tokens (longest "
            f"{c['max_tokens_per_sentence']}), {c['model_gflop_per_pass']:.1f} GFLOP of model math",
            "",
            "| engine | " + " | ".join(f"batch {b} sent/s median (best)" for b in batch_sizes) + " | "
            + " | ".join(f"batch {b} GFLOP/s" for b in batch_sizes) + " |",
            "|---|" + "---|" * (2 * len(batch_sizes)),
        ]
        for name, res in c["results"].items():
            lines.append(
                f"| {name} | "
                + " | ".join(f"{res[str(b)]['sentences_per_s']:.1f} ({res[str(b)]['sentences_per_s_best']:.1f})"
                             for b in batch_sizes)
                + " | " + " | ".join(f"{res[str(b)]['effective_gflops']:.0f}" for b in batch_sizes) + " |")
        lines += ["", "Ratio over sentence-transformers (sentences/s), median runs (best runs):", ""]
        for name, ratio in c["ratio_over_sentence_transformers"].items():
            best = c["ratio_over_sentence_transformers_best_runs"][name]
            lines.append(f"- {name}: " + ", ".join(
                f"batch {b} **{ratio[str(b)]:.2f}x** ({best[str(b)]:.2f}x)" for b in batch_sizes))
        lines += ["", f"fp32 vectors: max |hubzoo - sentence-transformers| = "
                      f"{c['max_abs_diff_fp32_vs_sentence_transformers']:.2e}"
                  + (f", max |onnxruntime - sentence-transformers| = "
                     f"{c['max_abs_diff_onnxruntime_vs_sentence_transformers']:.2e}"
                     if c.get("max_abs_diff_onnxruntime_vs_sentence_transformers") is not None else "")
                  + "."]
    lines += [
        "",
        f"Versions: torch {r['torch']}, transformers {r['transformers']}, sentence-transformers "
        f"{r['sentence_transformers']} (attention: {r['attn_implementation']}), onnxruntime "
        f"{r.get('onnxruntime')}, hubzoo {r['hubzoo']} "
        f"({r['git_commit']}).",
        "",
    ]
    path.write_text("\n".join(lines))


def write_plot(r: dict, batch_sizes: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = list(r["corpora"])
    fig, axes = plt.subplots(1, len(corpora), figsize=(5 * len(corpora), 4), sharey=True)
    top = 0.0
    for ax, corpus in zip(axes, corpora):
        res = r["corpora"][corpus]["results"]
        names = list(res)
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            ys = [res[name][str(b)]["sentences_per_s"] for b in batch_sizes]
            top = max(top, *ys)
            ax.bar([j + i * width for j in range(len(batch_sizes))], ys, width, label=name)
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(batch_sizes))])
        ax.set_xticklabels([f"batch {b}" for b in batch_sizes])
        ax.set_title(f"{corpus} corpus")
    axes[0].set_ylabel("sentences / s")
    axes[0].set_ylim(0, top * 1.3)
    axes[0].legend(fontsize=8, loc="upper left", ncol=1)
    fig.suptitle(f"{r['model']} on {r['threads']} CPU threads")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
