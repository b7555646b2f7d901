"""Greedy decode speed of a t5-small-sized random T5: hubzoo vs transformers, same run.

The model has t5-small's shapes (d_model 512, d_ff 2048, 6+6 layers, 8 heads, vocab 32128,
ReLU, tied head) with transformers' own random initialisation. Both engines encode the same
prompt and decode the same number of new tokens greedily with the same thread count
(torch.set_num_threads / num_threads); transformers uses its KV cache and eager attention,
with min_new_tokens so an EOS cannot end it early (hubzoo: ignore_eos). tok/s = new tokens /
seconds of one generate() call (encoder pass included). Engines alternate within each
repeat; the table gives medians and the best run of each, and the load average at the start
and the end (a shared machine moves the figures; compare the ratio).

    .venv/bin/python bench/t5.py [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import hubzoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
T5_SMALL = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                feed_forward_proj="relu", dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
                decoder_start_token_id=0)


def build(out: Path) -> Path:
    torch.manual_seed(0)
    config = transformers.T5Config(**T5_SMALL)
    config.architectures = ["T5ForConditionalGeneration"]
    model = transformers.T5ForConditionalGeneration._from_config(config, dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    return out


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "t5.md"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = build(Path(tmp) / "t5-small-random")
        hf = transformers.T5ForConditionalGeneration.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager").eval()
        engines = {"transformers float32": None,
                   "hubzoo float32": hubzoo.Seq2SeqLM.from_pretrained(path, num_threads=a.threads),
                   "hubzoo bfloat16 fused": hubzoo.Seq2SeqLM.from_pretrained(
                       path, dtype="bfloat16", num_threads=a.threads)}
        prompt = np.random.default_rng(0).integers(3, 32000, size=(1, a.prompt_tokens))
        n = a.new_tokens

        def run_hf():
            with torch.no_grad():
                out = hf.generate(input_ids=torch.as_tensor(prompt), do_sample=False,
                                  max_new_tokens=n, min_new_tokens=n)
            return out[0, 1:].numpy()

        rates: dict[str, list[float]] = {k: [] for k in engines}
        tokens = {}
        for _ in range(a.repeats):
            for name, model in engines.items():
                fn = run_hf if model is None else (
                    lambda m=model: m.generate(prompt, max_new_tokens=n, ignore_eos=True)[0])
                seconds, toks = timed(fn)
                rates[name].append(len(toks) / seconds)
                tokens[name] = np.asarray(toks)
    load_end = os.getloadavg()[0]
    base = statistics.median(rates["transformers float32"])
    lines = [f"# T5 greedy decode, t5-small-sized random model, {a.threads} threads", "",
             f"CPU: {platform.processor() or platform.machine()}, matmul target "
             f"{hubzoo.matmul_target()}. Prompt {a.prompt_tokens} tokens, {n} new tokens, "
             f"{a.repeats} generate() calls per engine, engines alternating; load average (1 min) "
             f"{load_start:.2f} at the start, {load_end:.2f} at the end. hubzoo "
             f"{hubzoo.__version__} ({hubzoo.git_commit}), torch {torch.__version__}, "
             f"transformers {transformers.__version__}.", "",
             "| engine | tok/s median (best) | ratio over transformers (median) |", "|---|---|---|"]
    for name, r in rates.items():
        lines.append(f"| {name} | {statistics.median(r):.1f} ({max(r):.1f}) | "
                     f"{statistics.median(r) / base:.2f}x |")
    same = np.array_equal(tokens["hubzoo float32"], tokens["transformers float32"])
    lines += ["", f"fp32 tokens equal to transformers': {same}."]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
