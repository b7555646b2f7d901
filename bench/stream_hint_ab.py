"""A worker-side prefetch on and off in one process: the next product's weights
(ThreadPool::StreamHint, `--switch stream_hint`) or a decode step's cached keys and values
(ThreadPool::prefetch_after_next_job, `--switch kv_fetch`).

    .venv/bin/python bench/stream_hint_ab.py                # every case, 3 runs each (~6 min)
    .venv/bin/python bench/stream_hint_ab.py --runs 1 --cases q8_0
    .venv/bin/python bench/stream_hint_ab.py --switch kv_fetch --cases gemma,q4_k,bf16dot

A few percent is below what separate processes resolve on a shared machine (paired rounds of
`hubzoo bench` move by +-10% from one process to the next). So this builds hubzoo from HEAD
with bench/patches/<switch>_ab.patch applied (source and build under
~/.cache/hubzoo/<switch>_ab), which switches the prefetch on and off every
HUBZOO_AB_PERIOD hinted jobs (484: 4 tokens of SmolLM2 at batch 1) and sums the time from
each hinted job to the next per setting. Reported per case: the median over runs of
(seconds per job off) / (seconds per job on), i.e. the speedup the prefetch gives.
Writes bench/results/<switch>_ab.{json,md}. A benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from patched_build import build_patched  # noqa: E402
from run import ROOT, log, machine_description  # noqa: E402

GGUF = Path.home() / ".cache/hubzoo/gguf"
SMOL = "SmolLM2-135M-Instruct-832db0699007"
# name: (model, hubzoo bench arguments)
CASES = {
    "q8_0": (GGUF / f"{SMOL}-q8_0.gguf", ["--dtype", "float32", "--mode", "int8"]),
    "q4_0": (GGUF / f"{SMOL}-q4_0.gguf", ["--dtype", "float32", "--mode", "int8"]),
    "q4_k": (GGUF / f"{SMOL}-q4_k.gguf", ["--dtype", "float32", "--mode", "int8"]),
    "q8_0 batch 4": (GGUF / f"{SMOL}-q8_0.gguf",
                     ["--dtype", "float32", "--mode", "int8", "--decode-batch", "4"]),
    "q8_0 exact": (GGUF / f"{SMOL}-q8_0.gguf", ["--dtype", "float32"]),
    "bf16dot": (ROOT / "models/SmolLM2-135M-Instruct", ["--dtype", "bfloat16", "--mode", "bf16dot"]),
    "qwen q4_k_m": (ROOT / "models/gguf/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
                    ["--dtype", "float32", "--mode", "int8"]),
    "gemma": (ROOT / "models/gguf/gemma-3-270m-Q4_K_M.gguf", ["--dtype", "float32", "--mode", "int8"]),
}
TITLES = {
    "stream_hint": "Prefetching the next product's weights (ThreadPool::StreamHint)",
    "kv_fetch": "Fetching a decode step's cached keys and values after the q/k/v product "
                "(ThreadPool::prefetch_after_next_job)",
}
LINE = re.compile(r"stream_hint_ab off_s=([\d.]+) off_jobs=(\d+) on_s=([\d.]+) on_jobs=(\d+)")


def run_case(binary: Path, model: Path, extra: list[str], tokens: int, threads: int) -> dict:
    cmd = [str(binary), "bench", "-m", str(model), "--threads", str(threads), "--prefill", "",
           "--decode-tokens", str(tokens), "--repeats", "1"] + extra
    if "--decode-batch" not in extra:
        cmd += ["--decode-batch", "1"]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    m = LINE.search(p.stderr)
    if not m:
        raise RuntimeError(f"no stream_hint_ab line from {' '.join(cmd)}:\n{p.stderr[-2000:]}")
    off_s, off_jobs, on_s, on_jobs = float(m[1]), int(m[2]), float(m[3]), int(m[4])
    return {"off_s": off_s, "off_jobs": off_jobs, "on_s": on_s, "on_jobs": on_jobs,
            "speedup": (off_s / off_jobs) / (on_s / on_jobs),
            "decode_tok_s": json.loads(p.stdout)["decode"][0]["tok_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default=",".join(CASES), help="comma list of: " + ", ".join(CASES))
    ap.add_argument("--switch", default="stream_hint", choices=sorted(TITLES))
    ap.add_argument("--out", help="default: bench/results/<switch>_ab")
    a = ap.parse_args()
    patch = f"{a.switch}_ab"
    log(f"building hubzoo with bench/patches/{patch}.patch")
    binary = build_patched(patch)
    report = {"command": " ".join([Path(sys.executable).name] + sys.argv), "machine": machine_description(),
              "switch": a.switch, "tokens": a.tokens, "threads": a.threads, "cases": {}}
    for name in a.cases.split(","):
        model, extra = CASES[name]
        runs = []
        for r in range(a.runs):
            log(f"{name}: run {r + 1}/{a.runs}")
            runs.append(run_case(binary, model, extra, a.tokens, a.threads))
        report["cases"][name] = {"model": str(model), "args": extra, "runs": runs,
                                 "speedup_median": statistics.median(x["speedup"] for x in runs)}
    out = Path(a.out or ROOT / f"bench/results/{patch}")
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    m = report["machine"]
    lines = [f"# {TITLES[a.switch]}, on vs off in one process", "",
             f"Machine: {m['cpu']}, {m['cores']} cores; hubzoo {m['git_commit']}; {a.threads} threads, "
             f"{a.tokens}-token decode, the prefetch switched every 484 hinted jobs. "
             f"`{report['command']}`", "",
             "| case | speedup (median) | runs | decode tok/s (mixed) |", "|---|---|---|---|"]
    for name, c in report["cases"].items():
        runs = ", ".join(f"{x['speedup']:.3f}" for x in c["runs"])
        tok = statistics.median(x["decode_tok_s"] for x in c["runs"])
        lines.append(f"| {name} | {c['speedup_median']:.3f}x | {runs} | {tok:.1f} |")
    lines += ["", "Speedup: seconds per hinted job (a product and the work up to the next one) with the "
              "prefetch off, over the same with it on."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
