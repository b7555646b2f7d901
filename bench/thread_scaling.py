#!/usr/bin/env python3
"""A decode step's int8 products on one thread against two: how much a second
thread gains on the products of small models, whose weights are read cold.

Each round runs build/bench/quant_matmul_bench --m 1 once per product and
thread count, the thread counts alternating in order from round to round; the
weights cycle through copies that overflow the last-level cache, as a decode
step reads them. Reported: the median microseconds per product over rounds,
and the median over rounds of each round's one-thread / two-thread time.

  python bench/thread_scaling.py [--rounds 5] [--out bench/results/thread_scaling]
"""
import argparse
import json
import re
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (model, product, block type, n x k): SmolLM2-135M's Q4_0 file (fused q/k/v,
# o, fused gate/up, down, the Q8_0 output) and Qwen2.5-0.5B Q4_K_M's Q5_0
# q/k/v and o, its Q5_0 gate/up and its Q6_K down.
CASES = [("SmolLM2", "q/k/v", "Q4_0", "960x576"), ("SmolLM2", "o", "Q4_0", "576x576"),
         ("SmolLM2", "gate/up", "Q4_0", "3072x576"), ("SmolLM2", "down", "Q4_0", "576x1536"),
         ("SmolLM2", "output", "Q8_0", "49152x576"), ("Qwen2.5-0.5B", "q/k/v", "Q5_0", "1152x896"),
         ("Qwen2.5-0.5B", "o", "Q5_0", "896x896"), ("Qwen2.5-0.5B", "gate/up", "Q5_0", "9728x896"),
         ("Qwen2.5-0.5B", "down", "Q6_K", "896x4864")]
LINE = re.compile(r"^\s*(\S+) i8p\s+\S+\s+m=1\s+([\d.]+) us\s+([\d.]+) GB/s")


def product_us(build: Path, t: str, shape: str, threads: int) -> float:
    out = subprocess.run([str(build / "bench/quant_matmul_bench"), "--quick", "--type", t, "--m", "1",
                          "--threads", str(threads), "--shape", shape],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == t:
            return float(m.group(2))
    raise SystemExit(f"quant_matmul_bench printed no i8p line for {t} {shape}:\n{out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench/results/thread_scaling"))
    a = ap.parse_args()
    build = Path(a.build)
    limits = json.loads(subprocess.run([str(build / "bench/machine_bench"), "--threads", "2"],
                                       check=True, capture_output=True, text=True).stdout)
    runs = {c: [] for c in CASES}
    for r in range(a.rounds):
        order = (1, 2) if r % 2 == 0 else (2, 1)
        for c in CASES:
            runs[c].append({t: product_us(build, c[2], c[3], t) for t in order})
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    rows = []
    for (model, product, t, shape), rs in runs.items():
        n, k = (int(v) for v in shape.split("x"))
        rows.append({"model": model, "product": product, "type": t, "shape": shape,
                     "one_us": statistics.median(x[1] for x in rs), "two_us": statistics.median(x[2] for x in rs),
                     "speedup": statistics.median(x[1] / x[2] for x in rs), "rounds": rs, "n": n, "k": k})
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = f"python bench/thread_scaling.py --rounds {a.rounds}"
    out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "machine_limits": limits,
         "cases": [{**x, "rounds": [{str(t): v for t, v in r.items()} for r in x["rounds"]]} for x in rows]},
        indent=1) + "\n")
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?")
    lim = {x["threads"]: x for x in limits["threads"]}
    lines = ["# A decode step's int8 products: one thread against two, weights cold", "",
             f"{cpu}, SIMD target {limits['simd_target']}; machine_bench before the first round: read "
             f"{lim[1]['read_gbs']:.1f} GB/s on one thread, {lim[2]['read_gbs']:.1f} on two. Medians of "
             f"{a.rounds} rounds, the thread counts alternating. Command: `{command}`.", "",
             "| model | product | type | n x k | 1 thread us | 2 threads us | 1 / 2 (median of rounds) |",
             "|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['model']} | {x['product']} | {x['type']} | {x['shape']} | {x['one_us']:.1f} | "
                     f"{x['two_us']:.1f} | {x['speedup']:.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
