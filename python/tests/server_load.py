"""A bounded load on a running `hubzoo serve`, run as its own process by test_server.py.

    python server_load.py URL API_KEY REQUESTS CONCURRENCY

Mixes chat and text completions, streamed and not; every fifth streamed request is
dropped after its first chunk; a refused request (429/503 with an OpenAI error object)
waits Retry-After (1 s) and is sent again. Prints one JSON summary: final outcomes by
kind, the number of refusals along the way, and every unexpected answer (anything but
200, or 429/503 with an OpenAI error object).
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx  # the openai client's own HTTP library


MAX_ATTEMPTS = 10
refusals = 0
refusals_lock = threading.Lock()


def one(client: httpx.Client, i: int) -> tuple[str, str | None]:
    """Request i, retried as a polite client does: a refused request waits Retry-After
    (1 s) and tries again, up to MAX_ATTEMPTS times."""
    global refusals
    for _ in range(MAX_ATTEMPTS):
        outcome = attempt(client, i)
        if not outcome[0].startswith("refused"):
            return outcome
        with refusals_lock:
            refusals += 1
        time.sleep(1.0)
    return outcome


def attempt(client: httpx.Client, i: int) -> tuple[str, str | None]:
    rng = random.Random(i)
    stream = i % 2 == 0
    chat = i % 3 != 0
    body = {"max_tokens": rng.randint(1, 12), "temperature": rng.choice([0.0, 0.8]), "seed": i, "stream": stream}
    if chat:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": "Count to " + str(rng.randint(2, 50)) + " " * rng.randint(0, 40)}]
    else:
        path = "/v1/completions"
        body["prompt"] = "Once upon a time " * rng.randint(1, 20)
    drop = stream and i % 5 == 0
    try:
        if not stream:
            r = client.post(path, json=body)
            return classify(r.status_code, r.text)
        with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                return classify(r.status_code, r.read().decode())
            lines = 0
            done = False
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                lines += 1
                if drop and lines >= 1:
                    return "dropped", None
                if line == "data: [DONE]":
                    done = True
                elif "error" in json.loads(line[6:]):
                    return "stream_error", line
            return ("ok", None) if done else ("truncated", f"{lines} data lines, no [DONE]")
    except httpx.HTTPError as e:
        return "transport_error", repr(e)


def classify(status: int, text: str) -> tuple[str, str | None]:
    if status == 200:
        return "ok", None
    if status in (429, 503):
        try:
            if "error" in json.loads(text):
                return f"refused_{status}", None
        except ValueError:
            pass
    return f"status_{status}", text[:300]


def main() -> None:
    url, key, n, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(base_url=url, headers=headers, timeout=120, limits=limits) as client:
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda i: one(client, i), range(n)))
    counts: dict[str, int] = {}
    unexpected = []
    for outcome, detail in results:
        counts[outcome] = counts.get(outcome, 0) + 1
        if detail is not None:
            unexpected.append(detail)
    print(json.dumps({"counts": counts, "refusals": refusals, "unexpected": unexpected[:10]}))


if __name__ == "__main__":
    main()
