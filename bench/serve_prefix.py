"""Prefix-cache scenarios of `bench/serve.py --prefix` (issue 20), hubzoo with and without
the prefix cache (`--no-prefix-cache`), each run --repeats times; medians reported:

1. turn 8 of a chat whose history is ~2k tokens: time to first token. The turns before it
   run first, as a chat client sends them (each resends the whole history, the assistant
   turns being the model's own greedy answers), so with the cache turn 8 finds all but its
   new message cached;
2. 16 clients at once sharing a ~1k-token system prompt, each a different question:
   requests/s and completion tokens/s over the wall time;
3. a mixed workload (prompts of 50..600 tokens) at a fixed KV budget, that of 8 whole
   slots of --max-context positions: the most requests running at once (sampled from
   /metrics) and the wall time, paged budgeting (--kv-cache-bytes, 64 slots) against
   whole-slot budgeting (8 slots).

With --llama-server BIN --llama-gguf FILE, llama.cpp's server (prompt caching on) runs
scenarios 1 and 2 beside hubzoo: one slot for the conversation (it reuses its own slot's
history), 16 for the shared system prompt.

A benchmark, not a test. On a shared machine the timings are noisy: compare the medians.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("river stone lantern harbor meadow copper violet engine garden winter signal "
         "orchard candle bridge falcon marble thunder pocket silver compass").split()


def text(n_words: int, seed: int) -> str:
    """Deterministic filler prose of about n_words words."""
    out, x = [], seed * 2654435761 % 2**32
    for i in range(n_words):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(WORDS[x % len(WORDS)] + ("." if i % 12 == 11 else ""))
    return " ".join(out)


def start(args, free_port, extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [str(ROOT / "build/hubzoo"), "serve", "-m", args.model, "--port", str(port), "--quiet",
           "--dtype", args.dtypes[0], "--threads", str(args.threads), "--max-context", "2048",
           "--served-model-name", "m", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}"


def chat(url: str, messages: list[dict], max_tokens: int, ignore_eos: bool = True,
         extra: dict | None = None) -> dict:
    """One streamed chat request on a connection of its own (llama.cpp's server may close
    a kept-alive one; every engine alike): time to first token, completion and cached
    tokens, content."""
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": ignore_eos, "stream_options": {"include_usage": True}, **(extra or {})}
    t0 = time.perf_counter()
    first, usage, timings, content = None, {}, {}, []
    with httpx.Client(base_url=url, timeout=900) as client, \
            client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.read().decode(errors='replace')[:500]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            usage = j.get("usage") or usage
            timings = j.get("timings") or timings  # llama.cpp's server: prompt_n, cache_n
            piece = "".join((c.get("delta") or {}).get("content") or "" for c in j.get("choices", []))
            if piece and first is None:
                first = time.perf_counter()
            content.append(piece)
    end = time.perf_counter()
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", timings.get("cache_n", 0))
    return {"ttft": (first or end) - t0, "seconds": end - t0, "completion": usage.get("completion_tokens", 0),
            "prompt": usage.get("prompt_tokens", 0), "cached": cached or 0, "content": "".join(content)}


TOPICS = ("Tell me a long story about a lighthouse keeper.", "Explain in detail how bread is baked.",
          "Describe a journey across the mountains.", "Write a long letter to an old friend.",
          "Tell me everything about the history of maps.", "Describe a busy harbor at dawn.",
          "Explain how a garden changes over a year.", "Tell me a story about a clockmaker.")


def turn8(url: str, seed: int, extra: dict | None = None, answer_tokens: int = 200) -> dict:
    """Turns 1..8 of a conversation as a chat client sends it: every turn resends the whole
    history, whose assistant turns are the model's own greedy answers (up to answer_tokens
    each); turn 8's time to first token (its answer is one token)."""
    messages, last = [], {}
    for turn in range(8):
        messages.append({"role": "user", "content": TOPICS[(seed + turn) % len(TOPICS)] + " " +
                         text(25, seed * 100 + turn)})
        last = chat(url, messages, 1 if turn == 7 else answer_tokens, ignore_eos=False, extra=extra)
        messages.append({"role": "assistant", "content": last["content"]})
    return {"turn8_ttft_s": last["ttft"], "turn8_prompt_tokens": last["prompt"],
            "turn8_cached_tokens": last["cached"]}


def shared_system(url: str, seed: int, clients: int = 16, max_tokens: int = 16,
                  extra: dict | None = None) -> dict:
    system = {"role": "system", "content": text(750, 7)}  # ~1k tokens, the same for every client
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda i: chat(url, [system, {"role": "user", "content": text(
            20, seed * 1000 + i)}], max_tokens, extra=extra), range(clients)))
    wall = time.perf_counter() - t0
    return {"requests_per_s": clients / wall, "completion_tok_s": sum(r["completion"] for r in results) / wall,
            "wall_s": wall, "cached_tokens": sum(r["cached"] for r in results),
            "prompt_tokens": sum(r["prompt"] for r in results)}


def running_peak(url: str, stop: threading.Event, out: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            for line in client.get("/metrics").text.splitlines():
                if line.startswith("hubzoo_requests_running{"):
                    out[0] = max(out[0], int(float(line.split()[-1])))
            time.sleep(0.05)


def mixed(url: str, seed: int, n: int = 32) -> dict:
    lengths = [50 + (i * 137 + seed * 31) % 550 for i in range(n)]  # words: ~60..800 tokens
    peak, stop = [0], threading.Event()
    sampler = threading.Thread(target=running_peak, args=(url, stop, peak))
    sampler.start()
    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda i: chat(url, [{"role": "user", "content": text(
                lengths[i], seed * 7000 + i)}], 16), range(n)))
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        sampler.join()
    return {"peak_running": peak[0], "wall_s": wall, "requests": n}


def slot_bytes(model: str, positions: int, dtype: str) -> int:
    """KV bytes of one sequence of `positions`, as hubzoo's own cache accounts them (a
    snapshot folder or a GGUF file)."""
    import hubzoo

    return hubzoo.CausalLM.from_pretrained(model, dtype=dtype, num_threads=1).kv_slot_bytes_at(positions)


def start_llama(args, free_port, slots: int) -> tuple[subprocess.Popen, str]:
    """llama.cpp's server on --llama-gguf (prompt caching on: cache_prompt in every request)."""
    port = free_port()
    cmd = [args.llama_server, "-m", args.llama_gguf, "--port", str(port), "-np", str(slots),
           "-c", str(slots * 2048), "-t", str(args.threads), "--jinja", "--poll", str(args.llama_poll)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}"


def run(args, wait_ready, start_server, scenario, **kwargs) -> list[dict]:
    out = []
    for r in range(args.repeats):
        proc, url = start_server()
        try:
            wait_ready(url, proc)
            out.append(scenario(url, r + 1, **kwargs))
        finally:
            proc.terminate()
            proc.wait(30)
    return out


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


LLAMA = "llama.cpp (cache_prompt)"


def main(args, _start_hubzoo, wait_ready, free_port, cpu_name) -> None:
    budget = 8 * slot_bytes(args.model, 2048, args.dtypes[0]) if "mixed" in args.scenarios else 0
    hubzoo = lambda extra: lambda: start(args, free_port, extra)  # noqa: E731
    configs = {
        "turn8": [("prefix cache", hubzoo(["--max-concurrency", "4"]), {}),
                  ("no prefix cache", hubzoo(["--max-concurrency", "4", "--no-prefix-cache"]), {})],
        "shared_system": [("prefix cache", hubzoo(["--max-concurrency", "16"]), {}),
                          ("no prefix cache", hubzoo(["--max-concurrency", "16", "--no-prefix-cache"]), {})],
        "mixed": [("paged budget", hubzoo(["--max-concurrency", "64", "--kv-cache-bytes", str(budget)]), {}),
                  ("whole slots", hubzoo(["--max-concurrency", "8", "--kv-cache-bytes", str(budget)]), {})],
    }
    if args.llama_server:
        if not args.llama_gguf:
            raise SystemExit("--llama-server needs --llama-gguf (the same model as a GGUF file)")
        cache_prompt = {"extra": {"cache_prompt": True}}
        configs["turn8"].append((LLAMA, lambda: start_llama(args, free_port, 1), cache_prompt))
        configs["shared_system"].append((LLAMA, lambda: start_llama(args, free_port, 16), cache_prompt))
    scenarios = {"turn8": turn8, "shared_system": shared_system, "mixed": mixed}
    report = {"model": Path(args.model).name, "dtype": args.dtypes[0], "threads": args.threads, "cpu": cpu_name(),
              "repeats": args.repeats, "kv_budget_bytes": budget, "load_average_before": os.getloadavg()[0],
              "llama_gguf": Path(args.llama_gguf).name if args.llama_server else None, "scenarios": {}}
    for name, scenario in scenarios.items():
        if name not in args.scenarios:
            continue
        report["scenarios"][name] = {}
        for label, start_server, kwargs in configs[name]:
            runs = run(args, wait_ready, start_server, scenario, **kwargs)
            report["scenarios"][name][label] = runs
            print(name, label, json.dumps(runs), flush=True)
    report["load_average_after"] = os.getloadavg()[0]
    out = Path(args.prefix_json)
    out.write_text(json.dumps(report, indent=2) + "\n")
    s = report["scenarios"]
    peer = (f"llama.cpp's server on {report['llama_gguf']} beside it ({LLAMA})" if args.llama_server
            else "hubzoo only (no llama.cpp server given)")
    lines = [
        f"# Prefix cache and paged KV: {report['model']} {report['dtype']} ({args.threads} threads, {report['cpu']})",
        "", f"Medians of {args.repeats} runs, configurations one after another; 1-minute load average "
        f"{report['load_average_before']:.2f} before, {report['load_average_after']:.2f} after. {peer}.", "",
        "| scenario | with | without | ratio |", "|---|---:|---:|---:|"]
    if "turn8" in s:
        lines += turn8_rows(s["turn8"]["prefix cache"], s["turn8"]["no prefix cache"])
    if "shared_system" in s:
        lines += shared_rows(s["shared_system"]["prefix cache"], s["shared_system"]["no prefix cache"])
    if "mixed" in s:
        lines += mixed_rows(s["mixed"]["paged budget"], s["mixed"]["whole slots"], budget)
    if args.llama_server:
        lines += ["", f"| scenario | hubzoo (prefix cache) | {LLAMA} | hubzoo / llama.cpp |", "|---|---:|---:|---:|"]
        if "turn8" in s:
            on, peer_runs = s["turn8"]["prefix cache"], s["turn8"][LLAMA]
            lines.append(f"| turn-8 TTFT (s); prompt tokens {int(median(on, 'turn8_prompt_tokens'))} / "
                         f"{int(median(peer_runs, 'turn8_prompt_tokens'))}, cached "
                         f"{int(median(on, 'turn8_cached_tokens'))} / {int(median(peer_runs, 'turn8_cached_tokens'))} | "
                         f"{median(on, 'turn8_ttft_s'):.3f} | {median(peer_runs, 'turn8_ttft_s'):.3f} | "
                         f"{median(peer_runs, 'turn8_ttft_s') / median(on, 'turn8_ttft_s'):.2f}x faster |")
        if "shared_system" in s:
            on, peer_runs = s["shared_system"]["prefix cache"], s["shared_system"][LLAMA]
            lines.append(f"| 16 clients, shared system prompt: requests/s | {median(on, 'requests_per_s'):.2f} | "
                         f"{median(peer_runs, 'requests_per_s'):.2f} | "
                         f"{median(on, 'requests_per_s') / median(peer_runs, 'requests_per_s'):.2f}x |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def turn8_rows(on, off) -> list[str]:
    return [
        f"| turn-8 TTFT (s), {int(median(on, 'turn8_prompt_tokens'))}-token prompt, "
        f"{int(median(on, 'turn8_cached_tokens'))} cached | {median(on, 'turn8_ttft_s'):.3f} | "
        f"{median(off, 'turn8_ttft_s'):.3f} | {median(off, 'turn8_ttft_s') / median(on, 'turn8_ttft_s'):.1f}x |"]


def shared_rows(sh_on, sh_off) -> list[str]:
    return [
        f"| 16 clients, shared system prompt: requests/s | {median(sh_on, 'requests_per_s'):.2f} | "
        f"{median(sh_off, 'requests_per_s'):.2f} | "
        f"{median(sh_on, 'requests_per_s') / median(sh_off, 'requests_per_s'):.1f}x |"]


def mixed_rows(paged, whole, budget) -> list[str]:
    return [
        f"| mixed workload at {budget / 2**20:.0f} MiB KV: most requests running (paged vs whole slots) | "
        f"{median(paged, 'peak_running'):.0f} | {median(whole, 'peak_running'):.0f} | "
        f"{median(paged, 'peak_running') / max(median(whole, 'peak_running'), 1):.1f}x |",
        f"| mixed workload: wall time (s) (paged vs whole slots) | {median(paged, 'wall_s'):.1f} | "
        f"{median(whole, 'wall_s'):.1f} | {median(whole, 'wall_s') / median(paged, 'wall_s'):.1f}x |"]
