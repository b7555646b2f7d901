#!/usr/bin/env python3
"""A decode step's int8 product on panels read as one stream per thread against
several at once (ops/quant_int8_panels-inl.h Panel256Streams, the K types'
KPanel256), per block type, on SmolLM2's and Qwen2.5-0.5B's shapes.

Each round runs build/bench/quant_matmul_bench --one-stream once per type and
shape: the same weights timed with the default streams ("i8p") and with one
("i8p1") back to back in one process, weights cycled through copies that
overflow the last-level cache (GB/s of weight bytes). Medians over rounds, and
the median of each round's ratio. machine_bench's read bandwidth before the
first round puts the figures in proportion.

  python bench/decode_streams.py [--rounds 5] [--threads 2] [--out bench/results/decode_streams]
"""
import argparse
import json
import platform
import re
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The 32-weight types on SmolLM2's fused gate/up and its lm_head; the K types
# (k a multiple of 256) on Qwen2.5-0.5B's down and a lm_head-sized matrix.
CASES = [(t, s) for t in ("Q4_0", "Q4_1", "Q5_0", "Q8_0") for s in ("3072x576", "49152x576")]
CASES += [(t, s) for t in ("Q4_K", "Q6_K") for s in ("896x4864", "49152x512")]
LINE = re.compile(r"^\s*(\S+) (i8p1?)\s+\S+\s+m=1\s+([\d.]+) us\s+([\d.]+) GB/s")


def run_case(build: Path, t: str, shape: str, threads: int) -> dict:
    out = subprocess.run([str(build / "bench/quant_matmul_bench"), "--quick", "--one-stream", "--type",
                          t, "--m", "1", "--threads", str(threads), "--shape", shape],
                         check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == t:
            got[m.group(2)] = float(m.group(4))
    if set(got) != {"i8p", "i8p1"}:
        raise SystemExit(f"quant_matmul_bench printed no i8p / i8p1 line for {t} {shape}:\n{out}")
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench/results/decode_streams"))
    a = ap.parse_args()
    build = Path(a.build)
    limits = json.loads(subprocess.run([str(build / "bench/machine_bench"), "--threads", str(a.threads)],
                                       check=True, capture_output=True, text=True).stdout)
    runs = {f"{t} {s}": [] for t, s in CASES}
    for r in range(a.rounds):
        for t, s in CASES:
            runs[f"{t} {s}"].append(run_case(build, t, s, a.threads))
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    rows = []
    for key, rs in runs.items():
        one = statistics.median(x["i8p1"] for x in rs)
        many = statistics.median(x["i8p"] for x in rs)
        ratio = statistics.median(x["i8p"] / x["i8p1"] for x in rs)
        rows.append({"case": key, "one_stream_gbs": one, "streams_gbs": many, "ratio": ratio, "rounds": rs})
    lim = next(x for x in limits["threads"] if x["threads"] == a.threads)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"command": f"python bench/decode_streams.py --rounds {a.rounds} --threads {a.threads}",
         "machine": platform.processor() or platform.machine(), "machine_limits": limits,
         "cases": rows}, indent=1) + "\n")
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?")
    lines = [f"# int8 decode products: one stream per thread against several, {a.threads} threads", "",
             f"{cpu}, SIMD target {limits['simd_target']}; machine_bench before the first round: read "
             f"{lim['read_gbs']:.1f} GB/s (one stream per thread {lim['read_gbs_one_stream']:.1f}). "
             f"Medians of {a.rounds} rounds; each round times both in one process. Command: "
             f"`python bench/decode_streams.py --rounds {a.rounds} --threads {a.threads}`.", "",
             "| type, shape (n x k) | one stream GB/s | default streams GB/s | ratio (median of rounds) |",
             "|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['case']} | {x['one_stream_gbs']:.1f} | {x['streams_gbs']:.1f} | {x['ratio']:.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
