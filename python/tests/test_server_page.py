"""The web chat page of `hubzoo serve` in headless Chromium (Debian's chromium and chromedriver).

Driven through chromedriver's W3C WebDriver HTTP API directly (no selenium): open the
page, give the API key, send a message, see the answer arrive in several updates
(streamed), send a second message and check the conversation was kept; a screenshot is
saved to build/test_artifacts/chat_page.png.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time

import httpx2 as httpx
import pytest

import _util
from test_server import KEY, MODEL_ID, Served

ENTER = "\ue007"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """A chromedriver session: the few WebDriver commands the test needs."""

    def __init__(self, driver_url: str):
        self.http = httpx.Client(base_url=driver_url, timeout=60)
        caps = {"browserName": "chrome", "goog:chromeOptions": {
            "binary": shutil.which("chromium"),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1100,800"]}}
        r = self.http.post("/session", json={"capabilities": {"alwaysMatch": caps}}).json()
        self.session = f"/session/{r['value']['sessionId']}"

    def cmd(self, method: str, path: str, body: dict | None = None):
        r = self.http.request(method, self.session + path, json=body)
        value = r.json()["value"]
        if r.status_code != 200:
            raise AssertionError(f"WebDriver {path}: {value}")
        return value

    def script(self, source: str, *args):
        return self.cmd("POST", "/execute/sync", {"script": source, "args": list(args)})

    def wait_for(self, source: str, timeout: float = 60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.script(source)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for: {source}")

    def type_into(self, css: str, text: str) -> None:
        el = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        el_id = next(iter(el.values()))
        self.cmd("POST", f"/element/{el_id}/value", {"text": text})

    def close(self) -> None:
        try:
            self.http.delete(self.session)
        finally:
            self.http.close()


@pytest.fixture()
def browser():
    missing = [b for b in ("chromium", "chromedriver") if not shutil.which(b)]
    assert not missing, f"{missing} not installed: scripts/setup.sh installs them"
    port = free_port()
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while True:
            try:
                if httpx.get(url + "/status", timeout=2).json()["value"]["ready"]:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if time.time() > deadline:
                raise RuntimeError("chromedriver did not start")
            time.sleep(0.1)
        b = Browser(url)
        yield b
        b.close()
    finally:
        driver.terminate()
        driver.wait(10)


def test_chat_page_streams_and_keeps_the_conversation(hubzoo_bin, smollm2_path, tmp_path, browser):
    server = Served(tmp_path, "--max-concurrency", "2", "--max-context", "1024", "--quiet")
    try:
        browser.cmd("POST", "/url", {"url": server.url + "/"})
        # The key lives in the page's localStorage; reload so the model list loads with it.
        browser.script("localStorage.setItem('hubzoo_api_key', arguments[0]);", KEY)
        browser.cmd("POST", "/refresh", {})
        browser.wait_for(f"return document.getElementById('model').textContent.includes('{MODEL_ID}');")
        browser.script("document.getElementById('temperature').value = '0';"
                       "document.getElementById('max_tokens').value = '40';")
        # Count how often the answer's text changes while it streams.
        browser.script("""
            window.updates = 0;
            new MutationObserver(() => { window.updates += 1; })
              .observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});
        """)
        browser.type_into("#input", "What is the capital of France?" + ENTER)
        answer = browser.wait_for(
            "const d = document.querySelector('.msg.assistant.done'); return d && d.textContent;")
        assert "Paris" in answer, answer
        assert browser.script("return window.updates;") > 3  # streamed: many updates, not one
        assert not browser.script("return document.querySelector('.msg.error');")

        browser.type_into("#input", "And what is the capital of Germany?" + ENTER)
        browser.wait_for("return document.querySelectorAll('.msg.assistant.done').length === 2;")
        # The page sent the whole conversation: two turns are kept.
        roles = browser.script("return messages.map(m => m.role);")
        assert roles == ["user", "assistant", "user", "assistant"], roles
        second = browser.script("return document.querySelectorAll('.msg.assistant.done')[1].textContent;")
        assert second.strip(), second

        png = base64.b64decode(browser.cmd("GET", "/screenshot"))
        out = _util.BUILD / "test_artifacts" / "chat_page.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(png)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        m = server.metrics()
        assert m['hubzoo_http_responses_total{path="/v1/chat/completions",status="200"}'] == 2
    finally:
        assert server.stop() == 0
