"""Pulling a repo from a mock Hub over loopback: `hubzoo pull` vs huggingface_hub.snapshot_download.

    .venv/bin/python bench/pull.py [--size-mb 512] [--shards 4] [--rounds 3]

A repo of --shards safetensors files (random bytes, --size-mb in all) plus config.json is
served by python/tests/mock_hub.py in its own process (LFS files redirect to its second
port, as the Hub's go to its CDN). Each round downloads it into a fresh temporary
HF cache with each client, in alternating order, each in its own process:
  hubzoo:  build/hubzoo pull --quiet ORG/NAME   (8 workers, the default)
  hf:      snapshot_download(ORG/NAME) with huggingface_hub's defaults (8 workers), progress
           bars off; its time is taken inside the process around the call (excludes Python
           start and imports, which favours huggingface_hub)
Throughput = bytes / seconds; the ratio is of the medians. Peak RSS of each download
process comes from wait4(). Writes bench/results/pull.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HUBZOO = ROOT / "build" / "hubzoo"
REPO = "bench/pull-repo"

SERVER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from mock_hub import MockHub
src = Path({src!r})
hub = MockHub()
hub.add_repo({repo!r}, {{p.name: p for p in sorted(src.iterdir())}})
print(hub.endpoint, flush=True)
while True:
    time.sleep(3600)
"""

HF_CLIENT = """
import os, sys, time
from huggingface_hub import snapshot_download
t0 = time.perf_counter()
path = snapshot_download({repo!r}, cache_dir=sys.argv[1])
print(time.perf_counter() - t0)
"""


def make_repo(dir: Path, size_mb: int, shards: int) -> int:
    dir.mkdir(parents=True)
    (dir / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    per = size_mb * 1_000_000 // shards
    chunk = os.urandom(1 << 20)
    for i in range(shards):
        with open(dir / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "wb") as f:
            left = per
            while left > 0:
                n = min(left, len(chunk))
                # Distinct content per shard (a different sha256 each).
                f.write(bytes([i]) + chunk[1:n] if left == per else chunk[:n])
                left -= n
    return sum(p.stat().st_size for p in dir.iterdir())


def run_rss(cmd: list[str], env: dict) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {err.read()[-2000:]}")
        return wall, usage.ru_maxrss * 1024, out.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "pull")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hubzoo_pull_bench_"))
    server = None
    try:
        total = make_repo(work / "src", args.size_mb, args.shards)
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER.format(tests=str(ROOT / "python" / "tests"), src=str(work / "src"),
                                                 repo=REPO)],
            stdout=subprocess.PIPE, text=True)
        endpoint = server.stdout.readline().strip()
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
        env.update(HF_ENDPOINT=endpoint, HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1")
        results = {"hubzoo": [], "hf": []}
        for r in range(args.rounds):
            order = ["hubzoo", "hf"] if r % 2 == 0 else ["hf", "hubzoo"]
            for who in order:
                cache = work / f"cache-{who}-{r}"
                if who == "hubzoo":
                    wall, rss, _ = run_rss([str(HUBZOO), "pull", "--quiet", REPO], {**env, "HF_HUB_CACHE": str(cache)})
                    seconds = wall
                else:
                    wall, rss, out = run_rss([sys.executable, "-c", HF_CLIENT.format(repo=REPO), str(cache)], env)
                    seconds = float(out.strip().splitlines()[-1])
                got = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and "blobs" in p.parts)
                assert got == total, f"{who}: {got} bytes in the cache, expected {total}"
                results[who].append({"seconds": seconds, "process_seconds": wall, "peak_rss": rss,
                                     "mb_per_s": total / seconds / 1e6})
                print(f"round {r} {who}: {seconds:.2f} s, {total / seconds / 1e6:.0f} MB/s, "
                      f"peak RSS {rss / 2**20:.1f} MiB", flush=True)
                shutil.rmtree(cache)
        report(args, total, results)
    finally:
        if server:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


def report(args, total: int, results: dict):
    med = {w: statistics.median(x["mb_per_s"] for x in v) for w, v in results.items()}
    rss = {w: max(x["peak_rss"] for x in v) for w, v in results.items()}
    ratio = med["hubzoo"] / med["hf"]
    data = {"bytes": total, "shards": args.shards, "rounds": args.rounds, "median_mb_per_s": med,
            "throughput_ratio_hubzoo_over_hf": ratio, "max_peak_rss_bytes": rss, "runs": results,
            "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()}
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# Pull: hubzoo vs huggingface_hub.snapshot_download (mock Hub, loopback)",
        "",
        f"Repo: {args.shards} safetensors files + config.json, {total / 1e6:.0f} MB; mock Hub "
        "(python/tests/mock_hub.py, LFS files redirected to its second port) in its own process; "
        f"{args.rounds} rounds, order alternating; each client in a fresh cache per round. Written by "
        "`bench/pull.py`.",
        "",
        "| client | median MB/s | runs (MB/s) | max peak RSS |",
        "|---|---|---|---|",
    ]
    for w, name in (("hubzoo", "`hubzoo pull` (process wall time)"),
                    ("hf", "`snapshot_download` (time inside the call)")):
        runs = ", ".join(f"{x['mb_per_s']:.0f}" for x in results[w])
        lines.append(f"| {name} | {med[w]:.0f} | {runs} | {rss[w] / 2**20:.1f} MiB |")
    lines += ["", f"Throughput ratio (hubzoo / huggingface_hub, medians): **{ratio:.2f}**; "
              f"hubzoo peak RSS {rss['hubzoo'] / 2**20:.1f} MiB.", "",
              f"Machine: {os.cpu_count()} CPUs; load average at the end {os.getloadavg()[0]:.1f} "
              "(shared with other work: absolute rates are the mock server's and the disk's as much as "
              "the clients'; both clients pay the same server).", ""]
    args.out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
