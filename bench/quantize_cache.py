"""--quantize with and without the quantize-on-load cache (io/quant_cache.h): load seconds,
peak RSS and decode tok/s of `hubzoo bench` on an fp32/bf16 checkpoint quantized at load.

    .venv/bin/python bench/quantize_cache.py --rounds 5 --out bench/results/quantize_cache

Per type and round, three fresh processes in turn: the cache off (HUBZOO_QUANT_CACHE=off),
a miss (an empty cache directory, which the load fills) and a hit (the directory the miss
filled); the order of the three alternates between rounds, the hit always after its miss.
Medians and min-max over rounds. A benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, log, machine_description, run_process  # noqa: E402


def bench(binary: str, model: str, qtype: str, mode: str, threads: int, cache: str) -> dict:
    out, _ = run_process(
        [binary, "bench", "-m", model, "--quantize", qtype, "--dtype", "float32", "--mode", mode,
         "--threads", str(threads), "--prefill", "", "--decode-batch", "1", "--decode-tokens", "64",
         "--repeats", "1"],
        env={"HUBZOO_QUANT_CACHE": cache})
    r = json.loads(out)
    return {"load_s": r["load_seconds"], "peak_rss_mb": r["peak_rss_bytes"] / 2**20,
            "decode_tok_s": r["decode"][0]["tok_s"], "hits": r["quant_cache_hits"],
            "stores": r["quant_cache_stores"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "build/hubzoo"))
    ap.add_argument("-m", "--model", default=str(ROOT / "models/SmolLM2-135M-Instruct"))
    ap.add_argument("--types", default="q4_0,q8_0,q4_k_m")
    ap.add_argument("--mode", default="int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="", help="write OUT.json and OUT.md")
    a = ap.parse_args()

    runs: dict[str, dict[str, list[dict]]] = {}
    for qtype in a.types.split(","):
        runs[qtype] = {"off": [], "miss": [], "hit": []}
        for rnd in range(a.rounds):
            cache = tempfile.mkdtemp(prefix="hubzoo_qc_")
            try:
                cases = [("off", "off"), ("miss", cache), ("hit", cache)]
                if rnd % 2:  # off last instead of first
                    cases = cases[1:] + cases[:1]
                for name, where in cases:
                    r = bench(a.binary, a.model, qtype, a.mode, a.threads, where)
                    runs[qtype][name].append(r)
                    log(f"{qtype} round {rnd + 1}/{a.rounds} {name}: load {r['load_s']:.3f} s, "
                        f"peak {r['peak_rss_mb']:.0f} MB, {r['decode_tok_s']:.0f} tok/s, "
                        f"hits {r['hits']} stores {r['stores']}")
            finally:
                shutil.rmtree(cache, ignore_errors=True)

    def med(xs: list[dict], key: str) -> float:
        return statistics.median(x[key] for x in xs)

    lines = ["| type | cache | load s | min-max | peak RSS MB | decode tok/s | hits | stores |",
             "|---|---|---|---|---|---|---|---|"]
    summary: dict[str, dict] = {}
    for qtype, cases in runs.items():
        summary[qtype] = {}
        for name, xs in cases.items():
            s = {k: med(xs, k) for k in ("load_s", "peak_rss_mb", "decode_tok_s")}
            summary[qtype][name] = s
            loads = [x["load_s"] for x in xs]
            lines.append(f"| {qtype} | {name} | {s['load_s']:.3f} | {min(loads):.3f}-{max(loads):.3f} | "
                         f"{s['peak_rss_mb']:.0f} | {s['decode_tok_s']:.0f} | {xs[0]['hits']} | {xs[0]['stores']} |")
    print("\n".join(lines))
    if a.out:
        report = {"command": " ".join([Path(sys.executable).name] + sys.argv), "machine": machine_description(),
                  "model": a.model, "mode": a.mode, "threads": a.threads, "rounds": a.rounds,
                  "runs": runs, "median": summary}
        Path(a.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
        m = report["machine"]
        md = ["# --quantize with and without the quantize-on-load cache", "",
              f"Command: `{report['command']}` on {m.get('cpu', '?')} (hubzoo {m.get('git_commit', '?')}). "
              f"`hubzoo bench --quantize TYPE --mode {a.mode} --threads {a.threads}` on "
              f"{Path(a.model).name}, fresh processes; per round: the cache off, a miss (an empty "
              "cache, filled by that load) and a hit (the filled cache), order alternating. "
              f"Medians of {a.rounds} rounds (load: min-max too).", ""]
        Path(a.out + ".md").write_text("\n".join(md + lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
