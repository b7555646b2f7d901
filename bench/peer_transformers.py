"""transformers on PyTorch CPU, measured like `hubzoo bench` (one JSON object on stdout).

Run as its own process by bench/run.py, so load time, time to first token from process
start and peak RSS are those of a fresh process:

    .venv/bin/python bench/peer_transformers.py --model DIR --dtype float32 --threads 2

--gguf-file NAME loads DIR/NAME as transformers does (gguf_file=: the weights dequantized at
load, then cast to --dtype).

first token: the CLOCK_MONOTONIC time at which the argmax of the first forward over a
--ttft-prompt token prompt is known (bench/run.py subtracts the time it spawned this process). prefill: one forward of P tokens with use_cache. decode: B
sequences of 16 tokens, generate() greedy with min_new_tokens = max_new_tokens = N:
B * (N - 1) / (time(N tokens) - time(1 token)).
"""

from __future__ import annotations

import time

import argparse
import json
import resource
import statistics


def ids_for(n: int, vocab: int, seed: int) -> list[int]:
    """The synthetic prompt of cli/bench.cc (same generator, same ids)."""
    mask = (1 << 64) - 1
    s = (0x9E3779B97F4A7C15 * (seed + 1)) & mask
    out = []
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        out.append(100 + (s >> 33) % (vocab // 2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--gguf-file", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", default="128,512,2048")
    ap.add_argument("--decode-batch", default="1,4,16")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--ttft-prompt", type=int, default=39)
    args = ap.parse_args()

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=getattr(torch, args.dtype), gguf_file=args.gguf_file).eval()
    load_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    with torch.inference_mode():
        x = torch.tensor([ids_for(args.ttft_prompt, vocab, 0)])
        int(model(x, use_cache=True).logits[0, -1].argmax())
    first_token = time.clock_gettime(time.CLOCK_MONOTONIC)

    prefill = []
    for p in [int(v) for v in args.prefill.split(",") if v]:
        x = torch.tensor([ids_for(p, vocab, p)])
        times = []
        with torch.inference_mode():
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                model(x, use_cache=True, logits_to_keep=1)
                times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        prefill.append({"tokens": p, "seconds": t, "tok_s": p / t})

    decode = []
    n = args.decode_tokens
    for b in [int(v) for v in args.decode_batch.split(",") if v]:
        x = torch.tensor([ids_for(16, vocab, 1000 + s) for s in range(b)])

        def gen(k):
            t0 = time.perf_counter()
            model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=k,
                           min_new_tokens=k, do_sample=False, pad_token_id=0)
            return time.perf_counter() - t0

        rates = []
        with torch.inference_mode():
            gen(2)  # warm-up
            for _ in range(args.repeats):
                full, one = gen(n), gen(1)
                rates.append(b * (n - 1) / (full - one))
        rate = statistics.median(rates)
        decode.append({"batch": b, "tok_s": rate, "step_ms": 1e3 * b / rate})

    print(json.dumps({
        "engine": "transformers",
        "dtype": args.dtype,
        "threads": args.threads,
        "attn_implementation": model.config._attn_implementation,
        "load_seconds": load_s,
        "first_token_monotonic_s": first_token,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "prefill": prefill,
        "decode": decode,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }))


if __name__ == "__main__":
    main()
