"""A mock Hugging Face Hub on 127.0.0.1 for the download tests (and bench/pull.py).

Two threaded HTTP servers: the Hub (model info, tree listing, resolve/) and a "CDN" on
another port that LFS files redirect to, as the Hub redirects to its CDN. Both record
every request (method, path, headers). Faults are injected per file through `faults`.

Endpoints as huggingface_hub 2.4 calls them:
  GET  /api/models/{repo}/revision/{rev}        {"id", "sha", "siblings": [{"rfilename"}]}
  GET  /api/models/{repo}/tree/{rev}?recursive  [{"type": "file", "path", "size", "oid", "lfs"}]
  HEAD|GET /{repo}/resolve/{rev}/{path}         small files: 200, ETag = git blob sha1;
                                                LFS files: 302 to the CDN, X-Linked-Etag =
                                                sha256, X-Linked-Size
  HEAD|GET (cdn) /blobs/{sha256}                Range: bytes=N- answered with 206
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".onnx", ".h5", ".msgpack", ".pt")


@dataclass
class MockFile:
    data: bytes | None  # in memory, or
    path: Path | None  # streamed from disk (the benchmark's large files)
    size: int
    lfs: bool
    etag: str  # sha256 for LFS, git blob sha1 otherwise

    def read(self, start: int = 0, end: int | None = None):
        """Yields the bytes [start, end) in 1 MiB chunks."""
        end = self.size if end is None else end
        if self.data is not None:
            for i in range(start, end, 1 << 20):
                yield self.data[i : min(end, i + (1 << 20))]
            return
        with open(self.path, "rb") as f:
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    return
                left -= len(chunk)
                yield chunk


def make_file(name: str, data: bytes | None = None, path: Path | None = None) -> MockFile:
    lfs = name.endswith(LFS_SUFFIXES)
    if data is None:
        h = hashlib.sha256() if lfs else hashlib.sha1()
        size = path.stat().st_size
        if not lfs:
            h.update(b"blob %d\0" % size)
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return MockFile(None, path, size, lfs, h.hexdigest())
    if lfs:
        etag = hashlib.sha256(data).hexdigest()
    else:
        etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return MockFile(data, None, len(data), lfs, etag)


@dataclass
class Faults:
    """Per file name (repo path) unless noted; counts are decremented as they fire."""

    drop_after: dict[str, int] = field(default_factory=dict)  # close after N body bytes
    drop_times: dict[str, int] = field(default_factory=dict)  # how often (default once)
    wrong_sha: set[str] = field(default_factory=set)  # serve corrupted bytes
    status: dict[str, tuple[int, dict, int]] = field(default_factory=dict)  # (code, headers, times)
    api_status: tuple[int, dict, int] | None = None  # the model-info call
    slow: dict[str, float] = field(default_factory=dict)  # sleep before the body
    gated_token: str | None = None  # resolve/ and api/ need "Bearer <token>"
    sibling_names: list[str] | None = None  # replaces the siblings list (hostile tests)


class MockHub:
    def __init__(self):
        self.repos: dict[str, dict] = {}  # repo -> {"refs": {rev: commit}, "commits": {commit: {path: MockFile}}}
        self.faults = Faults()
        self.requests: list[dict] = []  # hub requests
        self.cdn_requests: list[dict] = []
        self.bytes_served: dict[str, int] = {}
        self._lock = threading.Lock()
        self.hub = _start(self, cdn=False)
        self.cdn = _start(self, cdn=True)
        self.endpoint = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"

    def add_repo(self, repo: str, files: dict[str, bytes | Path], revision: str = "main") -> str:
        """Adds a commit holding `files` (bytes, or a path streamed from disk); returns its sha."""
        built = {}
        for name, v in files.items():
            built[name] = make_file(name, path=v) if isinstance(v, Path) else make_file(name, data=v)
        commit = hashlib.sha1(json.dumps(sorted((k, f.etag) for k, f in built.items())).encode()).hexdigest()
        entry = self.repos.setdefault(repo, {"refs": {}, "commits": {}})
        entry["commits"][commit] = built
        entry["refs"][revision] = commit
        return commit

    def reset(self):
        self.faults = Faults()
        with self._lock:
            self.requests.clear()
            self.cdn_requests.clear()
            self.bytes_served.clear()

    def close(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def resolve(self, repo: str, rev: str):
        entry = self.repos.get(repo)
        if entry is None:
            return None, None
        commit = entry["refs"].get(rev, rev)
        return commit, entry["commits"].get(commit)

    def blob(self, sha: str) -> tuple[str, MockFile] | None:
        for entry in self.repos.values():
            for files in entry["commits"].values():
                for name, f in files.items():
                    if f.etag == sha:
                        return name, f
        return None

    def served(self, name: str, n: int):
        with self._lock:
            self.bytes_served[name] = self.bytes_served.get(name, 0) + n


def _start(hub: MockHub, cdn: bool) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"hub": hub, "is_cdn": cdn})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: MockHub
    is_cdn: bool

    def log_message(self, *args):  # quiet
        pass

    # -- helpers -------------------------------------------------------------
    def _record(self):
        rec = {"method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
        with self.hub._lock:
            (self.hub.cdn_requests if self.is_cdn else self.hub.requests).append(rec)

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code: int, error_code: str, message: str):
        self._send(code, json.dumps({"error": message}).encode(),
                   {"X-Error-Code": error_code, "X-Error-Message": message, "Content-Type": "application/json"})

    def _authorized(self) -> bool:
        token = self.hub.faults.gated_token
        return token is None or self.headers.get("Authorization") == f"Bearer {token}"

    def _fire(self, table: dict, key: str):
        """A (code, headers, times) fault for key, decremented; None once spent."""
        spec = table.get(key)
        if not spec:
            return None
        code, headers, times = spec
        if times <= 0:
            return None
        table[key] = (code, headers, times - 1)
        return code, headers

    # -- routes --------------------------------------------------------------
    def do_HEAD(self):
        self._route()

    def do_GET(self):
        self._route()

    def _route(self):
        self._record()
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        if self.is_cdn:
            return self._cdn(path)
        if path.startswith("/api/models/"):
            return self._api(path[len("/api/models/") :])
        if "/resolve/" in path:
            repo, _, rest = path[1:].partition("/resolve/")
            rev, _, name = rest.partition("/")
            return self._resolve(repo, rev, name)
        self._error(404, "EntryNotFound", f"no route {path}")

    def _api(self, rest: str):
        f = self.hub.faults
        if f.api_status and f.api_status[2] > 0:
            code, headers, times = f.api_status
            f.api_status = (code, headers, times - 1)
            return self._send(code, b"{}", headers)
        if "/tree/" in rest:
            repo, _, rev = rest.partition("/tree/")
            kind = "tree"
        else:
            repo, _, rev = rest.partition("/revision/")
            kind = "info"
        if not self._authorized():
            return self._error(403 if f.gated_token else 401, "GatedRepo",
                               f"Access to model {repo} is restricted. You must have access to it.")
        entry = self.hub.repos.get(repo)
        if entry is None:
            return self._error(404 if self.headers.get("Authorization") else 401, "RepoNotFound",
                               "Repository not found")
        commit, files = self.hub.resolve(repo, rev)
        if files is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        if kind == "tree":
            body = [{"type": "file", "path": n, "size": fl.size, "oid": fl.etag if not fl.lfs else "0" * 40,
                     **({"lfs": {"oid": fl.etag, "size": fl.size, "pointerSize": 130}} if fl.lfs else {})}
                    for n, fl in files.items()]
        else:
            names = f.sibling_names if f.sibling_names is not None else list(files)
            body = {"id": repo, "modelId": repo, "sha": commit, "private": False,
                    "siblings": [{"rfilename": n} for n in names]}
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(self, repo: str, rev: str, name: str):
        f = self.hub.faults
        hit = self._fire(f.status, name)
        if hit:
            code, headers = hit
            return self._send(code, b"", headers)
        if not self._authorized():
            return self._error(403, "GatedRepo", f"Access to model {repo} is restricted.")
        commit, files = self.hub.resolve(repo, rev)
        if files is None:
            return self._error(404, "RepoNotFound" if repo not in self.hub.repos else "RevisionNotFound", "not found")
        mf = files.get(name)
        if mf is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist on {rev}")
        headers = {"X-Repo-Commit": commit, "ETag": f'"{mf.etag if not mf.lfs else "0" * 40}"'}
        if mf.lfs:
            headers.update({"X-Linked-Etag": f'"{mf.etag}"', "X-Linked-Size": mf.size,
                            "Location": f"{self.hub.cdn_url}/blobs/{mf.etag}?file={urllib.parse.quote(name)}"})
            return self._send(302, b"", headers)
        self._body(name, mf, headers)

    def _cdn(self, path: str):
        if not path.startswith("/blobs/"):
            return self._send(404)
        found = self.hub.blob(path[len("/blobs/") :])
        if found is None:
            return self._send(404)
        name, mf = found
        hit = self._fire(self.hub.faults.status, "cdn:" + name)
        if hit:
            return self._send(hit[0], b"", hit[1])
        self._body(name, mf, {"ETag": f'"{mf.etag}"'})

    def _body(self, name: str, mf: MockFile, headers: dict):
        """200 or 206 (Range: bytes=N-) with the file, faults applied."""
        f = self.hub.faults
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= mf.size:
                return self._send(416, b"", {"Content-Range": f"bytes */{mf.size}"})
        self.send_response(206 if start else 200)
        for k, v in headers.items():
            self.send_header(k, str(v))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{mf.size - 1}/{mf.size}")
        self.send_header("Content-Length", str(mf.size - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if self.command == "HEAD":
            return
        if name in f.slow:
            time.sleep(f.slow[name])
        drop = None
        if name in f.drop_after and f.drop_times.get(name, 1) > 0:
            f.drop_times[name] = f.drop_times.get(name, 1) - 1
            drop = f.drop_after[name]
        sent = 0
        pos = start
        for chunk in mf.read(start):
            if name in f.wrong_sha and pos == 0:
                chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
            if drop is not None and sent + len(chunk) > drop:
                chunk = chunk[: drop - sent]
            # Counted before the write: once the client has the bytes it may exit, and the
            # test read the count, before this thread runs again.
            self.hub.served(name, len(chunk))
            try:
                self.wfile.write(chunk)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.hub.served(name, -len(chunk))
                return
            sent += len(chunk)
            pos += len(chunk)
            if drop is not None and sent >= drop:
                self.close_connection = True
                self.connection.shutdown(2)  # SHUT_RDWR: the client sees the transfer cut short
                return
