"""Decode at batch 1 against the bandwidth bound, per state of the machine, for one or two builds.

    .venv/bin/python bench/bound.py -m ~/.cache/hubzoo/models/gguf/gemma-3-270m-Q4_K_M.gguf \
        --b build/hubzoo --rounds 20 --json bench/results/bound.json
    .venv/bin/python bench/bound.py -m FILE --a /tmp/hubzoo_before --b build/hubzoo --rounds 20

The bar of issue 16 is decode b1 >= 85% of the bandwidth bound (read bandwidth / the file's bytes a
decode step reads). On a shared host the read bandwidth moves within seconds: the EPYC of
bench/results/*_zen4 puts its two vCPUs on one CCD (~35 GB/s, core-to-core round trip ~140 ns)
or on two (~60 GB/s, ~340 ns), and bench/quant.py's figure (the bandwidth measured before an
engine's run of tens of seconds, against the decode part of it) mixes the two. Here every run is
one short decode (`hubzoo bench`, batch 1 only, about a second) between two machine_bench
readings; a run whose two readings disagree (the host moved during it: the round trips on either
side of 250 ns, or bandwidths more than 15% apart) is counted and set aside, the others are each
compared with the mean of their two readings and grouped by state. With --a the two builds
alternate (A B, then B A), and each state's median ratios are compared. A benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant import bytes_read_per_token  # noqa: E402
from run import ROOT, log, machine_description, machine_now  # noqa: E402

TWO_CCD_NS = 250.0  # core-to-core round trip above which the two vCPUs sit on two CCDs


def decode_b1(binary: str, model: str, args) -> float:
    cmd = [binary, "bench", "-m", model, "--threads", str(args.threads), "--prefill", "",
           "--decode-batch", "1", "--decode-tokens", str(args.decode_tokens), "--repeats", "1"]
    cmd += args.extra.split()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800).stdout
    return json.loads(out)["decode"][0]["tok_s"]


def state_of(ns: float) -> str:
    return "two CCDs" if ns > TWO_CCD_NS else "one CCD"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="a .gguf file (its bytes read per token make the bound)")
    ap.add_argument("--b", default=str(ROOT / "build/hubzoo"), help="the hubzoo binary (the 'after' one)")
    ap.add_argument("--a", help="a 'before' binary to alternate with")
    ap.add_argument("--build", default=str(ROOT / "build"), help="where bench/machine_bench is")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--extra", default="--dtype float32 --mode int8", help="more `hubzoo bench` arguments")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    build = Path(args.build)
    read_bytes = bytes_read_per_token(Path(args.model))
    binaries = {"b": args.b} | ({"a": args.a} if args.a else {})
    runs = {k: [] for k in binaries}
    for r in range(args.rounds):
        order = list(binaries) if r % 2 == 0 else list(binaries)[::-1]
        for k in order:
            gbs0, ns0 = machine_now(build, args.threads, mib=256)
            ns0 = ns0 or 0.0  # (None with one thread: no round trip)
            tok_s = decode_b1(binaries[k], args.model, args)
            gbs1, ns1 = machine_now(build, args.threads, mib=256)
            ns1 = ns1 or 0.0
            same = state_of(ns0) == state_of(ns1) and abs(gbs0 - gbs1) <= 0.15 * max(gbs0, gbs1)
            gbs = (gbs0 + gbs1) / 2
            run = {"round": r, "tok_s": tok_s, "read_gbs": [gbs0, gbs1], "pingpong_ns": [ns0, ns1],
                   "state": state_of(max(ns0, ns1)) if same else "moved",
                   "bound_ratio": tok_s * read_bytes / (gbs * 1e9)}
            runs[k].append(run)
            log(f"round {r + 1}/{args.rounds} {k}: {tok_s:.1f} tok/s, {gbs0:.1f}/{gbs1:.1f} GB/s, "
                f"{ns0:.0f}/{ns1:.0f} ns -> {run['state']}, {run['bound_ratio']:.3f} of the bound")

    summary = {}
    for k, rs in runs.items():
        for state in ("one CCD", "two CCDs", "moved"):
            got = [x for x in rs if x["state"] == state]
            if got:
                summary.setdefault(k, {})[state] = {
                    "runs": len(got),
                    "bound_ratio_median": statistics.median(x["bound_ratio"] for x in got),
                    "bound_ratio_min_max": [min(x["bound_ratio"] for x in got), max(x["bound_ratio"] for x in got)],
                    "tok_s_median": statistics.median(x["tok_s"] for x in got),
                    "read_gbs_median": statistics.median(sum(x["read_gbs"]) / 2 for x in got)}
    print(f"{Path(args.model).name}: {read_bytes / 1e6:.0f} MB read per token, {args.threads} threads")
    print("| build | state | runs | decode b1 tok/s | read GB/s | b1 / bound (median, min-max) |")
    print("|---|---|---|---|---|---|")
    for k, states in summary.items():
        for state, s in states.items():
            lo, hi = s["bound_ratio_min_max"]
            print(f"| {k} | {state} | {s['runs']} | {s['tok_s_median']:.1f} | {s['read_gbs_median']:.1f} | "
                  f"{s['bound_ratio_median']:.3f} ({lo:.3f}-{hi:.3f}) |")
    if args.a:
        for state in ("one CCD", "two CCDs"):
            if state in summary.get("a", {}) and state in summary.get("b", {}):
                print(f"{state}: b/a of the median ratios "
                      f"{summary['b'][state]['bound_ratio_median'] / summary['a'][state]['bound_ratio_median']:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": " ".join([Path(sys.executable).name] + sys.argv),
                                         "machine": machine_description(), "model": args.model,
                                         "bytes_read_per_token": read_bytes, "binaries": binaries,
                                         "runs": runs, "summary": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
