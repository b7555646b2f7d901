"""Where a decode step's time goes between the thread pool's jobs, per job.

    .venv/bin/python bench/pool_trace.py -m ~/.cache/hubzoo/models/gguf/gemma-3-270m-Q4_K_M.gguf
    .venv/bin/python bench/pool_trace.py -m models/SmolLM2-135M-Instruct --args "--dtype bfloat16 --mode bf16dot"

Builds hubzoo from HEAD with bench/patches/pool_trace.patch (source and build under
~/.cache/hubzoo/pool_trace), which times every parallel job of the run, and runs `hubzoo bench`
(batch 1 decode, no prefill figures) with it. Per job size n and kind, the median over the run's
jobs: the serial work before the job (from the caller's return from the previous job),
the job's time in the caller, the caller's wait for the others once its own part is done,
and the time inside the job's function on the caller and on the workers (summed). The
decode's jobs repeat every token, so `per token` (count / tokens) tells which rows are the
step's. A diagnostic, never a test: its timings include the trace's own clock reads
(~20 ns each, three per job and two per part of one).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from patched_build import build_patched  # noqa: E402
from run import log  # noqa: E402

KINDS = {0: "parallel_for", 1: "balanced", 2: "balanced, hinted"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--args", default="--dtype float32 --mode int8", help="more `hubzoo bench` arguments")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-build", action="store_true", help="run the binary the last call built")
    a = ap.parse_args()
    if a.no_build:
        binary = Path.home() / ".cache/hubzoo/pool_trace/build/hubzoo"
    else:
        log("building hubzoo with bench/patches/pool_trace.patch")
        binary = build_patched("pool_trace")
    cmd = [str(binary), "bench", "-m", a.model, "--threads", str(a.threads), "--prefill", "",
           "--decode-batch", "1", "--decode-tokens", str(a.tokens), "--repeats", "1"] + shlex.split(a.args)
    log(" ".join(cmd))
    p = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    tok_s = json.loads(p.stdout)["decode"][0]["tok_s"]
    print(f"decode {tok_s:.1f} tok/s ({1e6 / tok_s:.0f} us a token), {a.tokens} tokens, {a.threads} threads")
    print("| n | kind | per token | serial before us | job us | caller wait us | fn caller us | fn workers us |")
    print("|---|---|---|---|---|---|---|---|")
    for line in p.stderr.splitlines():
        f = line.split()
        if len(f) != 9 or f[0] != "pool_trace" or not f[1].isdigit():
            continue
        n, kind, count = int(f[1]), int(f[2]), int(f[3])
        gap, job, wait, cfn, wfn = (float(x) for x in f[4:])
        print(f"| {n} | {KINDS.get(kind, kind)} | {count / a.tokens:.1f} | {gap:.2f} | {job:.2f} | {wait:.2f} | "
              f"{cfn:.2f} | {wfn:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
