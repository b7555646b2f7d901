"""`hubzoo serve` under hostile HTTP clients (issue 15), the real binary on SmolLM2:

- a 20 MB chunked body to /tokenize: 401 without the key and 413 with it, answered while
  the body is still arriving, the server's RSS growing by less than 20 MB (before: the
  whole body was read first; with the key /tokenize answered 200);
- 1000 idle keep-alive connections: /health answers within a second throughout and a
  generation completes (before: httplib held a thread per connection and /health timed
  out for ~20 s); the idle connections are closed by the server's keep-alive timeout;
- /metrics needs the key when one is set (before: readable by anyone on the port),
  unless the server runs with --metrics-public.
"""

from __future__ import annotations

import resource
import select
import socket
import threading
import time
from urllib.parse import urlparse

import httpx2 as httpx
import pytest

from test_server import KEY, MODEL_ID, Served


@pytest.fixture(scope="module")
def server(hubzoo_bin, smollm2_path, tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("hostile"), "--quiet", "--max-context", "512")
    yield s
    assert s.stop() == 0


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def address(url: str) -> tuple[str, int]:
    u = urlparse(url)
    return u.hostname, u.port


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One response with a Content-Length body: (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(head.split(b" ")[1]), body


def chunked_upload(url: str, path: str, total: int, key: str | None) -> tuple[int, bytes, int]:
    """POSTs `total` bytes as 64 KiB chunks, stopping once an answer arrives:
    (status, body, bytes sent)."""
    sock = socket.create_connection(address(url), timeout=30)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}"
                 "Transfer-Encoding: chunked\r\n\r\n".encode())
    piece = b'{"prompt": "' + b"a" * (65536 - 12)
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    sent = 0
    try:
        while sent < total and not select.select([sock], [], [], 0)[0]:
            sock.sendall(chunk)
            sent += len(piece)
        status, body = read_response(sock)
    finally:
        sock.close()
    return status, body, sent


def test_chunked_body_is_refused_while_it_arrives(server):
    pid = server.proc.pid
    before = rss_bytes(pid)
    status, body, sent = chunked_upload(server.url, "/tokenize", 20 << 20, key=None)
    assert status == 401 and b"invalid_api_key" in body
    assert sent < 20 << 20  # answered from the head, not after the body
    status, body, sent = chunked_upload(server.url, "/tokenize", 20 << 20, key=KEY)
    assert status == 413 and b"exceeds" in body, body
    assert sent < 20 << 20
    grown = rss_bytes(pid) - before
    assert grown < 20 << 20, f"RSS grew {grown / 2**20:.1f} MiB"
    assert server.http.get("/health").status_code == 200


def test_thousand_idle_connections_do_not_stop_health(server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    latencies, failures = [], []
    done = threading.Event()

    def probe():
        with httpx.Client(base_url=server.url, timeout=1.0) as c:
            while not done.is_set():
                t0 = time.monotonic()
                try:
                    ok = c.get("/health").status_code == 200
                except httpx.HTTPError as e:
                    ok = False
                    failures.append(repr(e))
                latencies.append(time.monotonic() - t0)
                if not ok:
                    failures.append("status")
                time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    idle = []
    try:
        for _ in range(1000):
            s = socket.create_connection(address(server.url), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(s)[0] == 200
            idle.append(s)  # now an idle keep-alive connection
        # All 1000 held open: work still gets done, and /health keeps answering
        # (at least 5 probes while they are held; a fast machine opens them all
        # in fewer than 5 of the prober's 50 ms periods).
        held = len(latencies)
        r = server.client().chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
        assert r.choices[0].message.content is not None
        deadline = time.monotonic() + 10
        while len(latencies) < held + 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        prober.join()
    assert not failures, failures[:5]
    assert len(latencies) >= 5 and max(latencies) < 1.0, max(latencies)
    # The keep-alive timeout (5 s) closes them: each reads EOF.
    deadline = time.monotonic() + 15
    for s in idle:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        assert s.recv(1) == b""
        s.close()


def test_metrics_need_the_key(server, hubzoo_bin, smollm2_path, tmp_path):
    assert httpx.get(server.url + "/metrics").status_code == 401
    r = server.http.get("/metrics")
    assert r.status_code == 200 and "hubzoo_requests_running" in r.text
    # The cheap public routes stay public.
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/").status_code == 200
    public = Served(tmp_path, "--quiet", "--metrics-public")
    try:
        r = httpx.get(public.url + "/metrics")
        assert r.status_code == 200 and "hubzoo_requests_running" in r.text
        assert httpx.get(public.url + "/v1/models").status_code == 401  # the rest still needs it
    finally:
        assert public.stop() == 0
