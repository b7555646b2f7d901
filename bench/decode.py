"""fp32 decode speed of SmolLM2-135M-Instruct: hubzoo vs transformers, same run.

Both generate greedily from the same prompt with the same thread count; decode
tok/s = (new tokens - 1) / (time of generate - time of a 1-token generate), i.e.
prefill excluded. Medians over --repeats runs. Writes JSON and a markdown table.

    .venv/bin/python bench/decode_fp32.py --json bench/results/decode_fp32.json
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

import numpy as np
import torch
import transformers

import hubzoo

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=str(ROOT / "bench/results/decode_fp32.json"))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    text = tok.apply_chat_template([{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
                                   add_generation_prompt=True, tokenize=False)
    ids = np.array([tok(text, add_special_tokens=False)["input_ids"]], dtype=np.int64)
    n = args.new_tokens

    hf = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    t_ids = torch.tensor(ids)

    def hf_gen(k):
        with torch.no_grad():
            out = hf.generate(t_ids, max_new_tokens=k, min_new_tokens=k, do_sample=False)
        return out[0, ids.shape[1]:].numpy()

    ours = hubzoo.CausalLM.from_pretrained(args.model, num_threads=args.threads)

    def hz_gen(k):
        return ours.generate(ids, max_new_tokens=k)[0]

    hf_gen(n), hz_gen(n)  # warm up
    res = {}
    for name, fn in (("transformers", hf_gen), ("hubzoo", hz_gen)):
        full = timed(lambda: fn(n), args.repeats)
        one = timed(lambda: fn(1), args.repeats)
        res[name] = {"generate_s": full, "prefill_s": one, "decode_tok_s": (n - 1) / (full - one)}
    same = bool(np.array_equal(hf_gen(n)[: len(hz_gen(n))], hz_gen(n)))
    report = {
        "model": os.path.basename(args.model.rstrip("/")),
        "dtype": "float32",
        "threads": args.threads,
        "prompt_tokens": int(ids.shape[1]),
        "new_tokens": n,
        "repeats": args.repeats,
        "results": res,
        "ratio_hubzoo_over_transformers": res["hubzoo"]["decode_tok_s"] / res["transformers"]["decode_tok_s"],
        "same_tokens": same,
        "machine": platform.processor() or platform.machine(),
        "cpu": subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hubzoo": hubzoo.__version__,
        "git_commit": hubzoo.git_commit,
        "matmul_target": hubzoo.matmul_target(),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    md = Path(args.json).with_suffix(".md")
    md.write_text(
        f"# fp32 decode, {report['model']}, {args.threads} threads\n\n"
        f"{report['cpu']}; prompt {report['prompt_tokens']} tokens, {n} new tokens, median of {args.repeats}.\n\n"
        "| engine | decode tok/s | prefill+1 token (s) |\n|---|---|---|\n"
        + "".join(f"| {k} | {v['decode_tok_s']:.1f} | {v['prefill_s']:.3f} |\n" for k, v in res.items())
        + f"\nhubzoo / transformers: **{report['ratio_hubzoo_over_transformers']:.2f}x**; "
        f"identical tokens: {same}\n")
    print(md.read_text())


if __name__ == "__main__":
    main()
