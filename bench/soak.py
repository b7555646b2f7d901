"""Soak: a long mixed load on one `hubzoo serve`, watching memory and errors.

Starts `hubzoo serve` on SmolLM2-135M-Instruct with all-MiniLM-L6-v2 for embeddings, the
chat template swapped for one that defines and calls macros (each render builds macro
closures: the leak issue 15 fixed). N client threads then send, for --minutes, a mix of
streamed and whole chat completions, text completions, embeddings and /tokenize; one
streamed request in four is dropped after its first chunk (a cancellation). Every 5 s
the server's VmRSS is sampled. A benchmark, not a test.

Reported: requests by kind and outcome, errors (any answer but 200, or 429 with an
OpenAI error object; connection failures count too), and RSS: first, last, peak, and the
least-squares slope over the run's second half (MB/hour), after caches and arenas have
settled. Results: bench/results/soak.json, soak.md and soak.png.

    .venv/bin/python bench/soak.py [--minutes 30] [--clients 10]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import free_port, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
EMBEDDER = ROOT / "models" / "all-MiniLM-L6-v2"

# ChatML, as SmolLM2's own template, but through macros (one calls the other).
MACRO_TEMPLATE = """\
{%- macro turn(role, text) -%}<|im_start|>{{ role }}
{{ text }}<|im_end|>
{% endmacro -%}
{%- macro system_turn(messages) -%}
{%- if messages[0]['role'] != 'system' -%}{{ turn('system', 'You are a helpful AI assistant.') }}{%- endif -%}
{%- endmacro -%}
{{- system_turn(messages) -}}
{%- for m in messages -%}{{ turn(m['role'], m['content']) }}{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}
"""

WORDS = "the a lighthouse keeper river mountain bread tea sea storm map clock garden".split()


def macro_snapshot(dst: Path) -> Path:
    """SmolLM2's snapshot with chat_template.jinja replaced by MACRO_TEMPLATE."""
    snap = dst / "SmolLM2-135M-Instruct-macros"
    snap.mkdir()
    for f in MODEL.iterdir():
        if f.name != "chat_template.jinja":
            (snap / f.name).symlink_to(f.resolve())
    (snap / "chat_template.jinja").write_text(MACRO_TEMPLATE)
    return snap


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.errors: list[str] = []

    def add(self, kind: str, outcome: str, error: str | None = None) -> str:
        with self.lock:
            self.outcomes[f"{kind}:{outcome}"] += 1
            if error is not None and len(self.errors) < 50:
                self.errors.append(f"{kind}: {error}")
        return outcome


def is_refusal(r: httpx.Response) -> bool:
    try:
        return r.status_code == 429 and "error" in r.json()
    except ValueError:
        return False


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def one_request(client: httpx.Client, rng: random.Random, tally: Tally) -> str:
    """Sends one random request; returns its outcome."""
    kind = rng.choices(["chat_stream", "chat", "completion", "embedding", "tokenize"], [4, 2, 2, 2, 1])[0]
    messages = [{"role": "user", "content": sentence(rng, rng.randint(3, 40))}]
    if rng.random() < 0.3:
        messages = [{"role": "system", "content": "Answer briefly."}, *messages,
                    {"role": "assistant", "content": sentence(rng, 5)},
                    {"role": "user", "content": sentence(rng, 8)}]
    sampling = {"max_tokens": rng.randint(1, 48), "temperature": rng.choice([0.0, 0.7]), "seed": rng.randint(0, 1 << 30)}
    try:
        if kind == "chat_stream":
            drop = rng.random() < 0.25
            body = {"messages": messages, "stream": True, **sampling}
            with client.stream("POST", "/v1/chat/completions", json=body) as r:
                if r.status_code != 200:
                    r.read()
                    outcome = "refused" if is_refusal(r) else f"http_{r.status_code}"
                    return tally.add(kind, outcome, None if outcome == "refused" else r.text[:200])
                for line in r.iter_lines():
                    if drop and line.startswith("data: "):
                        return tally.add(kind, "cancelled")
                    if line == "data: [DONE]":
                        return tally.add(kind, "ok")
                return tally.add(kind, "truncated", "stream ended without [DONE]")
        if kind == "chat":
            r = client.post("/v1/chat/completions", json={"messages": messages, **sampling})
        elif kind == "completion":
            r = client.post("/v1/completions", json={"prompt": sentence(rng, rng.randint(1, 60)), **sampling})
        elif kind == "embedding":
            inputs = [sentence(rng, rng.randint(1, 50)) for _ in range(rng.randint(1, 8))]
            r = client.post("/v1/embeddings", json={"input": inputs})
        else:
            r = client.post("/tokenize", json={"messages": messages})
        if r.status_code == 200:
            return tally.add(kind, "ok")
        elif is_refusal(r):
            return tally.add(kind, "refused")
        else:
            return tally.add(kind, f"http_{r.status_code}", r.text[:200])
    except httpx.HTTPError as e:
        return tally.add(kind, "transport_error", repr(e)[:200])


def client_loop(url: str, seed: int, deadline: float, tally: Tally) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=120) as client:
        while time.time() < deadline:
            if one_request(client, rng, tally) == "refused":
                time.sleep(1.0)  # Retry-After


def slope_mb_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of RSS over time, in MB/hour."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    cov = sum((t - mt) * (r - mr) for t, r in samples)
    return cov / var * 3600 if var else 0.0


def write_results(out: Path, result: dict, samples: list[tuple[float, float]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    r = result["rss_mb"]
    lines = [
        f"# Soak: {result['minutes']} min, {result['clients']} clients ({result['machine']})",
        "",
        f"Requests: {result['requests']}; errors (beyond 429 refusals): {result['errors']}",
        "",
        "| kind:outcome | count |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(result["outcomes"].items())],
        "",
        f"RSS: first {r['first']:.1f} MB, last {r['last']:.1f} MB, peak {r['peak']:.1f} MB; "
        f"slope over the second half {r['slope_second_half_mb_per_hour']:+.2f} MB/hour "
        f"(whole run {r['slope_all_mb_per_hour']:+.2f} MB/hour).",
        "",
        f"Reproduce: `{result['command']}`",
    ]
    (out / "soak.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([t / 60 for t, _ in samples], [m for _, m in samples])
    ax.set_xlabel("minutes")
    ax.set_ylabel("server VmRSS (MB)")
    ax.set_title("hubzoo serve under a mixed soak load")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(out / "soak.png", dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--binary", default=str(ROOT / "build" / "hubzoo"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hubzoo-soak-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [args.binary, "serve", "-m", str(macro_snapshot(tmp)), "--embedding-model", str(EMBEDDER),
           "--port", str(port), "--max-concurrency", "4", "--max-queue", "4", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tally = Tally()
    samples: list[tuple[float, float]] = []
    try:
        wait_ready(url, proc)
        start = time.time()
        deadline = start + args.minutes * 60
        threads = [threading.Thread(target=client_loop, args=(url, i, deadline, tally)) for i in range(args.clients)]
        for t in threads:
            t.start()
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode} during the soak")
            samples.append((time.time() - start, rss_mb(proc.pid)))
            time.sleep(5)
        for t in threads:
            t.join()
        samples.append((time.time() - start, rss_mb(proc.pid)))
        health = httpx.get(url + "/health", timeout=5).status_code
    finally:
        proc.terminate()
        stderr = proc.communicate(timeout=30)[1].decode(errors="replace")
        shutil.rmtree(tmp, ignore_errors=True)

    half = [s for s in samples if s[0] >= samples[-1][0] / 2]
    errors = sum(v for k, v in tally.outcomes.items() if not k.endswith((":ok", ":refused", ":cancelled")))
    result = {
        "minutes": args.minutes,
        "clients": args.clients,
        "machine": cpu_name(),
        "requests": sum(tally.outcomes.values()),
        "errors": errors,
        "outcomes": dict(tally.outcomes),
        "error_samples": tally.errors,
        "health_after": health,
        "rss_mb": {
            "first": samples[0][1],
            "last": samples[-1][1],
            "peak": max(m for _, m in samples),
            "slope_second_half_mb_per_hour": slope_mb_per_hour(half),
            "slope_all_mb_per_hour": slope_mb_per_hour(samples),
        },
        "rss_samples": samples,
        "server_stderr_tail": stderr[-2000:],
        "command": "python bench/soak.py " + " ".join(sys.argv[1:]),
    }
    write_results(Path(args.out), result, samples)
    print(json.dumps({k: v for k, v in result.items() if k not in ("rss_samples", "outcomes")}, indent=2))


if __name__ == "__main__":
    main()
