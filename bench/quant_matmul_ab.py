"""Two builds' quant_matmul_bench side by side: the int8 kernels before / after a change.

    python bench/quant_matmul_ab.py OLD_BENCH NEW_BENCH [--types Q4_K,Q5_K,Q6_K]
                                    [--targets native,AVX2] [--rounds 5] [--threads 2]
                                    [--out NAME]

OLD_BENCH / NEW_BENCH: two build/bench/quant_matmul_bench binaries (e.g. one built from a
`git worktree` of the commit before). Each round runs both (their order reversed every
other round) with `--quick --tiled --type T --threads N [--target AVX2]`, on Qwen2.5-0.5B's ffn_down
shape (896x4864) at m = 1 (GB/s of weights streamed past the LLC) and m = 512 (GFLOP/s),
labels i8 (few-row kernels on rows), i8t (the tiled path), i8p (panels, what a model's int8
load uses). Reports the median of the rounds and new / old; writes
bench/results/NAME.{json,md}.
"""

import argparse
import json
import pathlib
import statistics
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(binary: str, qtype: str, target: str, threads: int) -> list[tuple[str, str, float, str]]:
    cmd = [binary, "--quick", "--tiled", "--type", qtype, "--threads", str(threads)]
    if target != "native":
        cmd += ["--target", target]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[0] != qtype or not parts[1].startswith("i8"):
            continue
        m = next(p for p in parts if p.startswith("m="))
        rows.append((parts[1], m, float(parts[-2]), parts[-1]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--types", default="Q4_K,Q5_K,Q6_K")
    ap.add_argument("--targets", default="native,AVX2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="quant_matmul_ab")
    args = ap.parse_args()
    got: dict[tuple, list[float]] = {}
    units: dict[tuple, str] = {}
    for rnd in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        for which, binary in order if rnd % 2 == 0 else order[::-1]:
            for target in args.targets.split(","):
                for qtype in args.types.split(","):
                    for label, m, value, unit in run(binary, qtype, target, args.threads):
                        key = (target, qtype, label, m)
                        got.setdefault(key + (which,), []).append(value)
                        units[key] = unit
    rows = []
    for key in sorted(units):
        old = statistics.median(got[key + ("old",)])
        new = statistics.median(got[key + ("new",)])
        rows.append({"target": key[0], "type": key[1], "path": key[2], "m": key[3],
                     "unit": units[key], "old": old, "new": new, "new_over_old": new / old})
    out = ROOT / "bench" / "results" / args.out
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [f"# int8 kernels before / after, medians of {args.rounds} alternating rounds", "",
             f"`python bench/quant_matmul_ab.py OLD NEW --types {args.types} --targets "
             f"{args.targets} --rounds {args.rounds} --threads {args.threads}`; Qwen2.5-0.5B "
             f"ffn_down 896x4864, {args.threads} thread{'s' if args.threads > 1 else ''}.",
             "", "| target | type | path | m | unit | old | new | new / old |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['target']} | {r['type']} | {r['path']} | {r['m']} | {r['unit']} | "
                     f"{r['old']:.1f} | {r['new']:.1f} | {r['new_over_old']:.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
