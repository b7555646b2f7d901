"""A/B of two hubzoo builds on one model: `hubzoo bench` of each, alternating, in fresh processes.

    .venv/bin/python bench/ab.py --a /tmp/hubzoo_before --b build/hubzoo \
        -m models/SmolLM2-135M-Instruct --rounds 5 --json bench/results/ab.json

Each round runs A then B (then B then A in the next round, so a drift in machine load hits
both alike) for every dtype asked. Reports the median over rounds of each figure, its
min-max spread, and B/A as the ratio of the medians: decode tok/s at each batch, prefill
tok/s at each length, load seconds and peak RSS. A benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def bench_once(binary: str, model: str, dtype: str, args) -> dict:
    cmd = [binary, "bench", "-m", model, "--dtype", dtype, "--threads", str(args.threads),
           "--prefill", args.prefill, "--decode-batch", args.decode_batch,
           "--decode-tokens", str(args.decode_tokens), "--repeats", str(args.repeats)]
    if args.mode:
        cmd += ["--mode", args.mode]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800).stdout
    return json.loads(out)


def figures(result: dict) -> dict[str, float]:
    f = {"load_s": result["load_seconds"], "peak_rss_mib": result["peak_rss_bytes"] / 2**20}
    for p in result["prefill"]:
        f[f"prefill_{p['tokens']}_tok_s"] = p["tok_s"]
    for d in result["decode"]:
        f[f"decode_b{d['batch']}_tok_s"] = d["tok_s"]
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the 'before' hubzoo binary")
    ap.add_argument("--b", required=True, help="the 'after' hubzoo binary")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--mode", default="", help="hubzoo bench --mode (default: the model's)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prefill", default="512")
    ap.add_argument("--decode-batch", default="1,4")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1, help="runs per figure inside one process")
    ap.add_argument("--json", type=Path, help="write every round and the summary here")
    args = ap.parse_args()

    rounds: dict[str, dict[str, list[dict]]] = {}
    for dtype in args.dtypes.split(","):
        rounds[dtype] = {"a": [], "b": []}
        for r in range(args.rounds):
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for side in order:
                binary = args.a if side == "a" else args.b
                rounds[dtype][side].append(figures(bench_once(binary, args.model, dtype, args)))
            print(f"[ab] {dtype} round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    summary: dict[str, dict[str, dict]] = {}
    lines = ["| dtype | figure | A median (min-max) | B median (min-max) | B/A |", "|---|---|---|---|---|"]
    for dtype, sides in rounds.items():
        summary[dtype] = {}
        for key in sides["a"][0]:
            a = [x[key] for x in sides["a"]]
            b = [x[key] for x in sides["b"]]
            ma, mb = statistics.median(a), statistics.median(b)
            summary[dtype][key] = {"a_median": ma, "b_median": mb, "a": a, "b": b, "b_over_a": mb / ma}
            lines.append(f"| {dtype} | {key} | {ma:.3g} ({min(a):.3g}-{max(a):.3g}) | "
                         f"{mb:.3g} ({min(b):.3g}-{max(b):.3g}) | {mb / ma:.3f} |")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"a": args.a, "b": args.b, "model": args.model,
                                         "rounds": args.rounds, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
