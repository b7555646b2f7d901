"""N replicas of `hubzoo serve` behind one OpenAI-compatible endpoint, on Ray Serve.

    from ray import serve
    from hubzoo.ray.serve import build_app
    serve.run(build_app("HuggingFaceTB/SmolLM2-135M-Instruct", num_replicas=2, num_cpus=4))
    # http://127.0.0.1:8000/v1/chat/completions, streamed or not (docs/ray.md)

Two deployments:

- HubzooEngine (num_replicas): each replica starts the C++ server (`hubzoo serve`) on a
  loopback port with its own random API key, as many threads as the replica's num_cpus,
  and forwards requests to it. Its health check is the engine's own: the process alive,
  /health 200, /metrics readable, and the scheduler not stalled (requests running but no
  forward pass for stall_s). A failed check, or the replica process dying, makes Ray Serve
  replace the replica; the server process dies with its replica (a watchdog process between them).
  max_ongoing_requests equals the engine's KV slots, so a replica only gets what it can run
  now and Serve's router (power of two choices on ongoing requests) keeps the rest queued.
- OpenAIIngress: the HTTP entry. It checks the public API key, sends the request to an
  engine replica through a streaming handle, and while no byte of the reply has reached
  the client, retries on another replica when the one it used died (its actor died or its
  server went away). A non-streamed reply is only sent whole, so it is always retried; a
  streamed one is retried until its first chunk. Greedy and seeded requests give the same
  tokens on any replica (batch invariance), so a retried request's answer is the one the
  dead replica would have given.
"""

import asyncio
import json
import logging
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from typing import AsyncIterator, Dict, Optional, Sequence

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.exceptions import RayActorError

from .data import actor_threads

_log = logging.getLogger("ray.serve")

# Headers the engine's reply keeps on the way out (hop-by-hop ones are the proxy's own).
_PASS_HEADERS = ("content-type", "cache-control")


class EngineDown(RuntimeError):
    """The replica's `hubzoo serve` process is gone or refused the connection."""


def _hubzoo_bin() -> str:
    """The `hubzoo` command installed beside this Python (pip install puts it there)."""
    path = os.path.join(os.path.dirname(sys.executable), "hubzoo")
    return path if os.path.exists(path) else "hubzoo"


def parse_metrics(text: str) -> Dict[str, float]:
    """Prometheus text -> {name: value}, summed over label sets."""
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        name = name.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


class HubzooEngine:
    """One replica: a `hubzoo serve` child on loopback, and a proxy to it."""

    def __init__(self, model: str, *, served_model_name: Optional[str] = None, num_threads: int = 0,
                 max_concurrency: int = 8, args: Sequence[str] = (), hubzoo_bin: Optional[str] = None,
                 startup_timeout_s: float = 300, stall_s: float = 120):
        self.key = secrets.token_hex(16)
        self.stall_s = stall_s
        self.log_path = tempfile.NamedTemporaryFile(prefix="hubzoo-serve-", suffix=".log",
                                                    delete=False).name
        # Through the watchdog, so the server dies with this replica (_watchdog.py).
        cmd = [sys.executable, "-m", "hubzoo.ray._watchdog", hubzoo_bin or _hubzoo_bin(), "serve", "-m", model, "--host", "127.0.0.1",
               "--port", "0", "--threads", str(num_threads or actor_threads()),
               "--max-concurrency", str(max_concurrency), "--quiet", *args]
        if served_model_name:
            cmd += ["--served-model-name", served_model_name]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, HUBZOO_API_KEY=self.key))
        self.url = self._wait_listening(startup_timeout_s)
        self.session: Optional[aiohttp.ClientSession] = None
        self.metrics: Dict[str, float] = {}
        self._progress = (0.0, time.monotonic())  # (engine steps, when they last changed)

    def _log_tail(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-2000:]

    def _wait_listening(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineDown(f"hubzoo serve exited with {self.proc.returncode}: {self._log_tail()}")
            m = re.search(r"listening on (http://\S+)", self._log_tail())
            if m:
                return m.group(1)
            time.sleep(0.1)
        self.proc.kill()
        raise EngineDown(f"hubzoo serve did not start in {timeout:.0f} s: {self._log_tail()}")

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self.key}"},
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self.session

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise EngineDown(f"hubzoo serve exited with {self.proc.returncode}: {self._log_tail()}")

    def _engine_lost(self) -> None:
        """The server exited: end this replica soon, so the router stops picking it now and
        Serve starts a new one (rather than at the next health check); the request that
        found out gets EngineDown and is retried elsewhere by the ingress."""
        if self.proc.poll() is not None:
            asyncio.get_running_loop().call_later(0.2, os._exit, 1)

    async def forward(self, method: str, path: str, body: Optional[bytes]) -> AsyncIterator:
        """Yields (status, {header: value}) and then the body's chunks as they come."""
        if self.proc.poll() is not None:
            self._engine_lost()
            self._check_alive()
        try:
            async with self._session().request(method, self.url + path, data=body) as resp:
                headers = {k: resp.headers[k] for k in _PASS_HEADERS if k in resp.headers}
                yield resp.status, headers
                async for chunk in resp.content.iter_any():
                    yield chunk
        except aiohttp.ClientConnectionError as e:  # refused, reset, or the server died mid-reply
            await asyncio.sleep(0.05)  # let a dying server's exit status arrive
            self._engine_lost()
            raise EngineDown(f"hubzoo serve at {self.url}: {e}") from e

    async def check_health(self) -> None:
        """Ray Serve's health check, from the engine's own /health and /metrics."""
        self._check_alive()
        s = self._session()
        async with s.get(self.url + "/health", timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                raise EngineDown(f"/health answered {r.status}: {await r.text()}")
        async with s.get(self.url + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                raise EngineDown(f"/metrics answered {r.status}")
            self.metrics = parse_metrics(await r.text())
        steps, since = self._progress
        now_steps = self.metrics.get("hubzoo_engine_steps_total", 0.0)
        if now_steps != steps or self.metrics.get("hubzoo_requests_running", 0.0) == 0:
            self._progress = (now_steps, time.monotonic())
        elif time.monotonic() - since > self.stall_s:
            raise EngineDown(f"requests running but no forward pass for {self.stall_s:.0f} s")

    def engine_metrics(self) -> dict:
        """The last metrics the health check read, and this replica's ids (for tests, ops)."""
        return {"metrics": self.metrics, "pid": os.getpid(), "server_pid": self.proc.pid}

    def __del__(self):
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()


def _error(status: int, message: str, kind: str = "server_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}},
                        status_code=status)


def _is_replica_loss(e: BaseException) -> bool:
    """A failure that means the replica went away (retry elsewhere), not a bad request."""
    return isinstance(e, (RayActorError, EngineDown))


app = FastAPI()


@serve.ingress(app)
class OpenAIIngress:
    """The public endpoint: key check, then a replica; retried while nothing was sent.
    (No `from __future__ import annotations` in this module: FastAPI reads the route
    signatures' types at run time.)"""

    def __init__(self, engine, *, api_key: Optional[str] = None, retries: int = 5):
        self.engine = engine.options(stream=True)
        self.api_key = api_key
        self.retries = retries
        self.retried = 0  # replica losses this ingress recovered from (observable in tests)

    async def _start(self, method: str, path: str, body: bytes, whole: bool):
        """(status, headers, chunks received, the rest of the stream or None). Retries on
        another replica while no chunk is in hand; with whole=True reads the entire body
        (so that is retried as a unit)."""
        for attempt in range(self.retries + 1):
            gen = self.engine.forward.remote(method, path, body)
            try:
                status, headers = await gen.__anext__()
                chunks = []
                async for chunk in gen:
                    chunks.append(chunk)
                    if not whole:
                        return status, headers, chunks, gen
                return status, headers, chunks, None
            except Exception as e:  # noqa: BLE001 (only replica losses are retried)
                if not _is_replica_loss(e) or attempt == self.retries:
                    raise
                self.retried += 1
                _log.warning("engine replica lost before the reply started (%s: %s); retrying "
                             "%s %s on another replica", type(e).__name__, str(e)[:200], method, path)
                await asyncio.sleep(0.2 * (attempt + 1))  # 3 s in all: a dead replica is dropped
        raise AssertionError("unreachable")

    @app.get("/health")
    async def health(self):
        return {"status": "ok"}

    @app.get("/ingress/stats")
    async def stats(self):
        return {"retried": self.retried}

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"])
    async def proxy(self, path: str, request: Request):
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "invalid or missing API key", "invalid_request_error")
        body = await request.body()
        stream = False
        if request.method == "POST" and body:
            try:
                stream = bool(json.loads(body).get("stream"))
            except (ValueError, AttributeError):
                stream = False  # the engine answers the malformed body with its own 400
        try:
            status, headers, chunks, rest = await self._start(request.method, "/v1/" + path,
                                                              body or None, whole=not stream)
        except Exception as e:  # noqa: BLE001
            if _is_replica_loss(e):
                return _error(503, f"no engine replica could take the request: {e}")
            raise
        if rest is None:
            return Response(b"".join(chunks), status_code=status, headers=headers)

        async def relay():
            for c in chunks:
                yield c
            try:
                async for c in rest:
                    yield c
            except Exception as e:  # noqa: BLE001 the replica died mid-stream: say so, end
                err = {"error": {"message": f"engine replica lost mid-stream: {e}",
                                 "type": "server_error"}}
                yield f"data: {json.dumps(err)}\n\n".encode()

        return StreamingResponse(relay(), status_code=status, headers=headers)


def build_app(model: str, *, num_replicas: int = 2, num_cpus: float = 1,
              max_concurrency: int = 8, api_key: Optional[str] = None,
              served_model_name: Optional[str] = None, engine_args: Sequence[str] = (),
              retries: int = 5, health_check_period_s: float = 5,
              health_check_timeout_s: float = 30, hubzoo_bin: Optional[str] = None):
    """The Serve application: num_replicas engines of num_cpus CPUs each (hubzoo threads =
    num_cpus, max_concurrency KV slots), and the ingress. engine_args go to `hubzoo serve`
    (for example ["--dtype", "bfloat16", "--max-context", "4096"])."""
    engine = serve.deployment(HubzooEngine).options(
        name="HubzooEngine", num_replicas=num_replicas,
        ray_actor_options={"num_cpus": num_cpus},
        max_ongoing_requests=max_concurrency,
        health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s)
    ingress = serve.deployment(OpenAIIngress).options(
        name="OpenAIIngress", ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=max(100, 4 * num_replicas * max_concurrency))
    bound = engine.bind(model, served_model_name=served_model_name,
                        num_threads=max(1, int(num_cpus)), max_concurrency=max_concurrency,
                        args=list(engine_args), hubzoo_bin=hubzoo_bin)
    return ingress.bind(bound, api_key=api_key, retries=retries)
