"""Decode speed of SmolLM2-135M-Instruct in fp32 and bf16: hubzoo vs transformers, same run.

Every engine/dtype generates greedily from the same prompt with the same thread count;
decode tok/s = (new tokens - 1) / (time of generate - time of a 1-token generate), i.e.
prefill excluded. Medians over --repeats rounds; each round runs every engine in turn. Also measured in the same run: the
machine's read bandwidth (numpy sum over a 512 MiB array), which bounds decode at
bandwidth / weight bytes per token. Writes JSON, a markdown table and a PNG plot.

    .venv/bin/python bench/decode.py
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
    ap.add_argument("--json", default=str(ROOT / "bench/results/decode.json"))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    text = tok.apply_chat_template([{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
                                   add_generation_prompt=True, tokenize=False)
    ids = np.array([tok(text, add_special_tokens=False)["input_ids"]], dtype=np.int64)
    n = args.new_tokens

    def hf_engine(dtype):
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            args.model, dtype=getattr(torch, dtype), attn_implementation="eager").eval()
        t_ids = torch.tensor(ids)

        def gen(k):
            with torch.no_grad():
                out = hf.generate(t_ids, max_new_tokens=k, min_new_tokens=k, do_sample=False)
            return out[0, ids.shape[1]:].numpy()

        return gen

    def hz_engine(dtype, mode):
        ours = hubzoo.CausalLM.from_pretrained(args.model, dtype=dtype, mode=mode,
                                               num_threads=args.threads)
        return lambda k: ours.generate(ids, max_new_tokens=k, ignore_eos=True)[0]

    engines = {
        "transformers float32": hf_engine("float32"),
        "transformers bfloat16": hf_engine("bfloat16"),
        "hubzoo float32": hz_engine("float32", "fused"),
        "hubzoo bfloat16 eager": hz_engine("bfloat16", "eager"),
        "hubzoo bfloat16 fused": hz_engine("bfloat16", "fused"),
    }
    # Rounds alternate the engines, so a change in machine load hits all of them alike.
    for fn in engines.values():
        fn(n)  # warm up
    fulls = {name: [] for name in engines}
    ones = {name: [] for name in engines}
    for _ in range(args.repeats):
        for name, fn in engines.items():
            fulls[name].append(timed(lambda: fn(n), 1))
            ones[name].append(timed(lambda: fn(1), 1))
    res = {}
    for name in engines:
        full, one = statistics.median(fulls[name]), statistics.median(ones[name])
        res[name] = {"generate_s": full, "prefill_s": one, "decode_tok_s": (n - 1) / (full - one)}
        print(f"{name}: {res[name]['decode_tok_s']:.1f} tok/s", flush=True)
    same = bool(np.array_equal(engines["transformers float32"](n), engines["hubzoo float32"](n)))
    bandwidth = read_bandwidth_gbs(args.threads)
    # Weights read per decoded token: every parameter once (a tied embedding is read as
    # the lm_head; num_parameters counts shared tensors once).
    params = transformers.AutoModelForCausalLM.from_pretrained(args.model).num_parameters()
    report = {
        "model": os.path.basename(args.model.rstrip("/")),
        "threads": args.threads,
        "prompt_tokens": int(ids.shape[1]),
        "new_tokens": n,
        "repeats": args.repeats,
        "results": res,
        "hubzoo_bf16_fused_over_fp32": res["hubzoo bfloat16 fused"]["decode_tok_s"]
        / res["hubzoo float32"]["decode_tok_s"],
        "hubzoo_over_transformers_fp32": res["hubzoo float32"]["decode_tok_s"]
        / res["transformers float32"]["decode_tok_s"],
        "hubzoo_over_transformers_bf16": res["hubzoo bfloat16 fused"]["decode_tok_s"]
        / res["transformers bfloat16"]["decode_tok_s"],
        "same_tokens_fp32": same,
        "read_bandwidth_gbs": bandwidth,
        "bound_tok_s": {"float32": bandwidth * 1e9 / (4 * params),
                        "bfloat16": bandwidth * 1e9 / (2 * params)},
        "parameters": params,
        "machine": platform.processor() or platform.machine(),
        "cpu": subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True,
                              text=True).stdout.split(":")[-1].strip(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hubzoo": hubzoo.__version__,
        "git_commit": hubzoo.git_commit,
        "matmul_target": hubzoo.matmul_target(),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    md = Path(args.json).with_suffix(".md")
    b = report["bound_tok_s"]
    md.write_text(
        f"# Decode, {report['model']}, {args.threads} threads\n\n"
        f"{report['cpu']}; prompt {report['prompt_tokens']} tokens, {n} new tokens, "
        f"median of {args.repeats}. Read bandwidth ({args.threads} threads) {bandwidth:.1f} GB/s: decode bound "
        f"~{b['float32']:.0f} tok/s fp32, ~{b['bfloat16']:.0f} tok/s bf16 (weights only).\n\n"
        "| engine | decode tok/s | prefill+1 token (s) |\n|---|---|---|\n"
        + "".join(f"| {k} | {v['decode_tok_s']:.1f} | {v['prefill_s']:.3f} |\n"
                  for k, v in res.items())
        + f"\nhubzoo bf16 (fused) / hubzoo fp32: **{report['hubzoo_bf16_fused_over_fp32']:.2f}x**; "
        f"hubzoo / transformers: fp32 **{report['hubzoo_over_transformers_fp32']:.2f}x**, "
        f"bf16 **{report['hubzoo_over_transformers_bf16']:.2f}x**; identical fp32 tokens: {same}\n\n"
        f"![decode](decode.png)\n")
    plot(res, b, Path(args.json).with_suffix(".png"))
    print(md.read_text())


def read_bandwidth_gbs(threads: int) -> float:
    """Read bandwidth with `threads` threads: numpy sums over disjoint parts of 1 GiB
    (numpy releases the GIL), best of 5."""
    from concurrent.futures import ThreadPoolExecutor

    a = np.ones(256 * 1024 * 1024, dtype=np.float32)
    parts = np.array_split(a, threads)
    with ThreadPoolExecutor(threads) as ex:
        def once():
            list(ex.map(np.sum, parts))

        best = min(timed(once, 1) for _ in range(5))
    return a.nbytes / best / 1e9


def plot(res, bounds, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(res)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.barh(names, [res[k]["decode_tok_s"] for k in names],
            color=["#999" if k.startswith("transformers") else "#2a6" for k in names])
    ax.set_xlabel("decode tokens/s (higher is better)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
