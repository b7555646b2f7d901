"""A/B of two builds' decode-step attention: build/bench/attention_decode_bench of each, alternating.

    .venv/bin/python bench/attention_ab.py --a /tmp/before/attention_decode_bench \
        --b build/bench/attention_decode_bench --rounds 8 \
        --args "--ctx 144,512,2048 --threads 2 --layers 18 --heads 4 --kv-heads 1 --d 256 --f16"

Each round runs A then B (B then A in the next round, so that a drift in the machine's state
hits both alike), each in a fresh process. Reports, per context length, the median over rounds of
the cold and hot microseconds per layer, their min-max spread, and B/A as the ratio of the
medians. A benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
from pathlib import Path


def run(binary: str, args: list[str]) -> dict[int, tuple[float, float]]:
    out = subprocess.run([binary] + args, check=True, capture_output=True, text=True, timeout=600).stdout
    rows = {}
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) == 4 and f[0].isdigit():
            rows[int(f[0])] = (float(f[1].split()[0]), float(f[1].split()[1]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the 'before' attention_decode_bench")
    ap.add_argument("--b", required=True, help="the 'after' attention_decode_bench")
    ap.add_argument("--args", default="", help="attention_decode_bench arguments, for both")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json", type=Path, help="append every round and the summary here")
    a = ap.parse_args()
    args = shlex.split(a.args)
    rounds: dict[str, list[dict]] = {"a": [], "b": []}
    for r in range(a.rounds):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            rounds[side].append(run(getattr(a, side), args))
    print(f"`attention_decode_bench {a.args}`, {a.rounds} rounds")
    print("| ctx | A cold us | B cold us | B/A cold | A hot us | B hot us | B/A hot |")
    print("|---|---|---|---|---|---|---|")
    summary = []
    for ctx in sorted(rounds["a"][0]):
        row = {"ctx": ctx}
        cells = []
        for i, kind in enumerate(("cold", "hot")):
            xs = {s: [rd[ctx][i] for rd in rounds[s]] for s in ("a", "b")}
            ma, mb = statistics.median(xs["a"]), statistics.median(xs["b"])
            row[kind] = {"a": ma, "b": mb, "ratio": mb / ma}
            cells += [f"{ma:.1f} ({min(xs['a']):.1f}-{max(xs['a']):.1f})",
                      f"{mb:.1f} ({min(xs['b']):.1f}-{max(xs['b']):.1f})", f"{mb / ma:.2f}"]
        summary.append(row)
        print(f"| {ctx} | " + " | ".join(cells) + " |")
    if a.json:
        data = json.loads(a.json.read_text()) if a.json.exists() else []
        data.append({"args": a.args, "rounds": {s: [{str(k): v for k, v in rd.items()} for rd in rounds[s]]
                                                for s in rounds}, "summary": summary})
        a.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
