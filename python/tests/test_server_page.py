"""The web chat page of `hubzoo serve` in headless Chromium (Debian's chromium and chromedriver).

Driven through chromedriver's W3C WebDriver HTTP API directly (no selenium), one browser
and one server for the module, against the real server and model (SmolLM2-135M):
- every embedded file is served at its path with the bytes of its source file, its
  content type, an ETag (304 on revalidation), and the page with its Content-Security-Policy;
- the API key is asked on the first 401 (a wrong key is asked again) and kept in the tab;
- an answer streams in (many updates) with token counts and tokens/s;
- regenerate and edit-and-resend send the right history (the page's requests, and the
  prompt token count the server reported for them);
- the conversation survives a reload (localStorage);
- Stop cancels the generation on the server (/metrics: finished reason="cancelled");
- an imported conversation renders markdown (table, highlighted code with a copy button,
  math), folds <think> reasoning, shows tool calls and tool results, and runs none of the
  script a model could write; screenshots at desktop and phone widths;
- with the server stopped the page says so, and recovers once it is back.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx
import pytest

import _util
from test_server import KEY, MODEL_ID, Served

ENTER = "\ue007"
ARTIFACTS = _util.BUILD / "test_artifacts"
JS = Path("/usr/share/javascript")
WEB = _util.REPO / "server" / "web"
# URL -> source file, as cmake/hubzoo_web.cmake embeds them.
ASSETS = {
    "/": WEB / "index.html",
    "/assets/app.js": WEB / "app.js",
    "/assets/render.js": WEB / "render.js",
    "/assets/style.css": WEB / "style.css",
    "/assets/marked.min.js": JS / "marked/marked.min.js",
    "/assets/purify.min.js": Path("/usr/share/nodejs/dompurify/dist/purify.min.js"),
    "/assets/highlight.min.js": JS / "highlight.js/highlight.min.js",
    "/assets/hljs-light.css": JS / "highlight.js/styles/a11y-light.css",
    "/assets/hljs-dark.css": JS / "highlight.js/styles/a11y-dark.css",
    "/assets/katex/katex.min.js": JS / "katex/katex.min.js",
    "/assets/katex/katex.min.css": JS / "katex/katex.min.css",
    **{f"/assets/katex/fonts/{f.name}": f for f in sorted((JS / "katex/fonts").glob("*.woff2"))},
}
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".woff2": "font/woff2"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """A chromedriver session: the few WebDriver commands the tests need."""

    def __init__(self, driver_url: str):
        self.http = httpx.Client(base_url=driver_url, timeout=60)
        caps = {"browserName": "chrome", "goog:chromeOptions": {
            "binary": shutil.which("chromium"),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,860"]}}
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

    def wait_for(self, source: str, *args, timeout: float = 60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.script(source, *args)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for: {source}")

    def element(self, css: str) -> str:
        el = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(el.values()))

    def type_into(self, css: str, text: str) -> None:
        self.cmd("POST", f"/element/{self.element(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        self.cmd("POST", f"/element/{self.element(css)}/click", {})

    def screenshot(self, name: str, width: int, height: int) -> bytes:
        self.cmd("POST", "/window/rect", {"width": width, "height": height})
        time.sleep(0.3)
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / name).write_bytes(png)
        return png

    def close(self) -> None:
        try:
            self.http.delete(self.session)
        finally:
            self.http.close()


@pytest.fixture(scope="module")
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


@pytest.fixture(scope="module")
def served(hubzoo_bin, smollm2_path, tmp_path_factory):
    """{"server": the running server}: the last test restarts it on the same port."""
    port = free_port()
    args = ("--max-concurrency", "2", "--max-context", "1024", "--quiet")
    holder = {"server": Served(tmp_path_factory.mktemp("page"), *args, port=port),
              "restart": lambda: Served(tmp_path_factory.mktemp("page2"), *args, port=port)}
    yield holder
    assert holder["server"].stop() == 0


def last_answer(browser) -> str:
    return browser.wait_for(
        "const d = [...document.querySelectorAll('.msg.assistant.done')].pop();"
        "return d && !document.body.classList.contains('busy') && d.querySelector('.md').textContent;")


def send(browser, text: str) -> str:
    before = browser.script("return document.querySelectorAll('.msg').length;")
    browser.type_into("#input", text + ENTER)
    browser.wait_for("return document.querySelectorAll('.msg').length > arguments[0];", before)
    return last_answer(browser)


def stored(browser) -> list[dict]:
    """The shown conversation's messages as localStorage has them."""
    return browser.script("""
        const id = localStorage.getItem('hubzoo.current');
        return JSON.parse(localStorage.getItem('hubzoo.conversations')).find(c => c.id === id).messages;""")


def set_setting(browser, name: str, value: str) -> None:
    browser.script("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                   "e.dispatchEvent(new Event('change'));", name, value)


def test_assets_are_the_source_files(served):
    url = served["server"].url
    for path, source in ASSETS.items():
        r = httpx.get(url + path)  # no key: the page asks for it itself
        assert r.status_code == 200, path
        assert r.content == source.read_bytes(), f"{path} differs from {source}"
        assert r.headers["content-type"] == TYPES[source.suffix], path
        assert r.headers["cache-control"] == "no-cache" and r.headers["x-content-type-options"] == "nosniff"
        again = httpx.get(url + path, headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b"", path
    page = httpx.get(url + "/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("style-src")[0]
    # Everything the page loads is served here (no CDN): each src/href is an embedded asset.
    for ref in ("/assets/app.js", "/assets/katex/katex.min.css", "/assets/hljs-dark.css"):
        assert f'"{ref}"' in page.text
    assert "http://" not in page.text and "https://" not in page.text
    m = served["server"].metrics()
    assert m['hubzoo_http_responses_total{path="/assets/app.js",status="304"}'] == 1


def test_key_asked_once_then_an_answer_streams(served, browser):
    browser.cmd("POST", "/url", {"url": served["server"].url + "/"})
    browser.wait_for("return document.getElementById('key-dialog').open;")
    browser.type_into("#key-input", "wrong-key" + ENTER)
    browser.wait_for("return document.getElementById('key-dialog').open &&"
                     " document.getElementById('key-why').textContent.includes('refused');")
    browser.type_into("#key-input", KEY + ENTER)
    browser.wait_for(f"return document.getElementById('model').textContent.includes('{MODEL_ID}');")
    assert browser.script("return sessionStorage.getItem('hubzoo.apiKey');") == KEY
    # Every control has a name a screen reader can say.
    assert browser.script("return [...document.querySelectorAll('button, input, textarea')].every("
                          "e => e.textContent.trim() || e.labels?.length || e.getAttribute('aria-label') || e.hidden);")
    browser.click("#settings-toggle")
    set_setting(browser, "temperature", "0")
    set_setting(browser, "max_tokens", "40")
    browser.script("""
        window.updates = 0;
        new MutationObserver(() => { window.updates += 1; })
          .observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});""")
    answer = send(browser, "What is the capital of France?")
    assert "Paris" in answer, answer
    assert browser.script("return window.updates;") > 3  # streamed: many updates, not one
    stats = browser.script("return [...document.querySelectorAll('.msg.assistant .stats')].pop().textContent;")
    assert "tokens/s" in stats and "prompt" in stats, stats
    assert browser.script("return document.getElementById('banner').hidden;")


def prompt_tokens(browser) -> int:
    stats = browser.script("return [...document.querySelectorAll('.msg.assistant .stats')].pop().textContent;")
    return int(stats.split("prompt ")[1].split(" ")[0])


def test_regenerate_and_edit_send_the_right_history(served, browser):
    server = served["server"]
    browser.script("""
        window.sent = [];
        const real = window.fetch;
        window.fetch = (url, init) => {
          if (String(url).includes('/chat/completions')) window.sent.push(JSON.parse(init.body));
          return real(url, init);
        };""")
    q1 = "What is the capital of France?"
    browser.click(".msg.assistant .actions button[title='Regenerate this answer']")
    last_answer(browser)
    browser.wait_for("return window.sent.length === 1;")
    sent = browser.script("return window.sent[0];")
    assert sent["messages"] == [{"role": "user", "content": q1}]
    assert sent["temperature"] == 0 and sent["max_tokens"] == 40 and sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    # The server saw that history: its prompt token count is that of the conversation.
    count = server.http.post("/tokenize", json={"messages": sent["messages"]}).json()["count"]
    assert prompt_tokens(browser) == count
    assert [m["role"] for m in stored(browser)] == ["user", "assistant"]

    # Edit the question and resend: the history restarts from the edited turn.
    browser.click(".msg.user .actions button[title='Edit and resend from here']")
    browser.script("document.querySelector('textarea.edit').value = '';")
    browser.type_into("textarea.edit", "What is the capital of Germany?" + ENTER)
    browser.wait_for("return window.sent.length === 2;")
    answer = last_answer(browser)
    assert "Berlin" in answer, answer
    sent = browser.script("return window.sent[1];")
    assert sent["messages"] == [{"role": "user", "content": "What is the capital of Germany?"}]
    # A follow-up carries the whole conversation.
    send(browser, "And of Italy?")
    sent = browser.script("return window.sent[2];")
    kept = stored(browser)[1]["content"]
    assert kept.strip() == answer.strip()
    assert sent["messages"] == [{"role": "user", "content": "What is the capital of Germany?"},
                                {"role": "assistant", "content": kept},
                                {"role": "user", "content": "And of Italy?"}]
    count = server.http.post("/tokenize", json={"messages": sent["messages"]}).json()["count"]
    assert prompt_tokens(browser) == count


def test_conversation_survives_reload(browser):
    before = browser.script("return [...document.querySelectorAll('.msg')].map(m => m.textContent);")
    browser.cmd("POST", "/refresh", {})
    browser.wait_for("return document.querySelectorAll('.msg').length === arguments[0];", len(before))
    after = browser.script("return [...document.querySelectorAll('.msg')].map(m => m.textContent);")
    assert after == before
    assert browser.script("return document.querySelector('#conversations li.current').textContent;").startswith(
        "What is the capital of France?")  # named by its first question
    # Settings are the conversation's own.
    assert browser.script("return document.getElementById('max_tokens').value;") == "40"
    # Keyboard: Tab reaches the skip link first, with a visible focus ring; Enter on it
    # lands in the message box.
    tab = {"type": "key", "id": "kb", "actions": [{"type": "keyDown", "value": "\ue004"},
                                                   {"type": "keyUp", "value": "\ue004"}]}
    browser.cmd("POST", "/actions", {"actions": [tab]})
    focused = browser.script("const e = document.activeElement; const s = getComputedStyle(e);"
                             "return [e.className, s.outlineStyle, s.outlineWidth];")
    assert focused[0] == "skip" and focused[1] == "solid" and focused[2] == "3px", focused
    browser.cmd("POST", f"/element/{browser.element('.skip')}/value", {"text": ENTER})
    browser.wait_for("return document.activeElement.id === 'input';")


def finished(server, reason: str) -> float:
    return server.metrics().get(f'hubzoo_requests_finished_total{{reason="{reason}"}}', 0)


def test_stop_cancels_the_generation_on_the_server(served, browser):
    server = served["server"]
    set_setting(browser, "max_tokens", "800")
    set_setting(browser, "temperature", "1")
    try:
        # Sampled at temperature 1, an answer can end on its own (end of text) between the
        # page showing 20 characters and the click on Stop landing: that proves nothing
        # about cancelling, so then the story is asked for again (at most 3 times).
        for attempt in range(3):
            before = {r: finished(server, r) for r in ("cancelled", "stop", "length")}
            browser.type_into("#input", "Write a very long story about a dragon who learns to bake bread." + ENTER)
            browser.wait_for("const s = document.querySelector('.msg.assistant.streaming .md');"
                             "return s && s.textContent.length > 20;")
            browser.click(".msg.assistant.streaming button[title='Stop this answer']")
            browser.wait_for("return !document.body.classList.contains('busy');")
            deadline = time.time() + 10
            while time.time() < deadline and all(finished(server, r) == n for r, n in before.items()):
                time.sleep(0.1)
            ended = finished(server, "stop") + finished(server, "length") - before["stop"] - before["length"]
            if finished(server, "cancelled") != before["cancelled"] or ended == 0:
                break
        assert finished(server, "cancelled") == before["cancelled"] + 1
        m = server.wait_idle()
        assert m["hubzoo_client_disconnects_total"] >= 1
        stats = browser.script("return [...document.querySelectorAll('.msg.assistant .stats')].pop().textContent;")
        assert "stopped" in stats
        assert stored(browser)[-1]["content"]  # the text so far is kept
    finally:  # the later tests expect short greedy answers
        set_setting(browser, "max_tokens", "40")
        set_setting(browser, "temperature", "0")


def test_streamed_markdown_renders_as_elements(served, browser):
    # The model's greedy answers to these carry a fenced code block and a table.
    browser.click("#new")
    send(browser, "Write a Python function that adds two numbers.")
    code = browser.script("return [...document.querySelectorAll('.msg.assistant .md pre code.hljs')]"
                          ".map(c => c.textContent);")
    assert code and code[0].startswith("def "), code
    assert browser.script("return !!document.querySelector('.msg.assistant .code-bar button.copy-code');")
    browser.click("#new")
    send(browser, "Make a markdown table of three fruits and their colors.")
    heads = browser.script("return [...document.querySelectorAll('.msg.assistant .md table th')].map(t => t.textContent);")
    assert heads == ["Fruit", "Color"], heads
    assert browser.script("return document.querySelectorAll('.msg.assistant .md table tbody tr').length;") >= 2


def test_token_probabilities(served, browser):
    browser.click("#new")
    browser.script("const e = document.getElementById('logprobs'); e.checked = true; e.dispatchEvent(new Event('change'));")
    set_setting(browser, "max_tokens", "8")
    send(browser, "Say hello.")
    stats = browser.script("return [...document.querySelectorAll('.msg.assistant .stats')].pop().textContent;")
    generated = int(stats.split(" tokens")[0])
    tokens = browser.script("return [...document.querySelectorAll('.msg.assistant .logprobs .tok')]"
                            ".map(t => [t.textContent, t.title]);")
    # One entry per generated token (an end-of-sequence token has none).
    assert generated - 1 <= len(tokens) <= generated, (stats, tokens)
    text = stored(browser)[-1]["content"]
    assert "".join(t for t, _ in tokens) == text[: len("".join(t for t, _ in tokens))]
    assert all("%" in title and "top: " in title for _, title in tokens), tokens
    assert not browser.script("return document.querySelector('.msg.assistant details.logprobs').open;")
    browser.script("const e = document.getElementById('logprobs'); e.checked = false; e.dispatchEvent(new Event('change'));")
    set_setting(browser, "max_tokens", "40")


def test_context_exceeded_is_explained(served, browser):
    browser.click("#new")
    set_setting(browser, "max_tokens", "5000")  # over the server's --max-context 1024
    browser.type_into("#input", "Hello" + ENTER)
    browser.wait_for("return !document.getElementById('banner').hidden;")
    text = browser.script("return document.getElementById('banner-text').textContent;")
    assert "too long for the model's context" in text and "1024" in text, text
    assert browser.script("return document.querySelectorAll('.msg.assistant').length;") == 0
    set_setting(browser, "max_tokens", "40")
    browser.click("#retry")  # the retry uses the settings as they are now
    assert last_answer(browser).strip()
    assert browser.script("return document.getElementById('banner').hidden;")


def test_busy_server_is_explained(browser):
    # A 429 as the server sends it when its queue is full (test_server.py makes a real one):
    # the next request the page makes gets it.
    browser.script("""
        const real = window.fetch;
        window.fetch = (url, init) => {
          window.fetch = real;
          return Promise.resolve(new Response(JSON.stringify({error: {message: "The server is at capacity: queue full.",
            type: "rate_limit_error", code: "queue_full"}}), {status: 429, headers: {"Retry-After": "1"}}));
        };""")
    browser.type_into("#input", "Hello again" + ENTER)
    browser.wait_for("return !document.getElementById('banner').hidden;")
    text = browser.script("return document.getElementById('banner-text').textContent;")
    assert "busy (429)" in text and "queue full" in text and "in 1 s" in text, text
    browser.click("#retry")
    assert last_answer(browser).strip()
    assert browser.script("return document.getElementById('banner').hidden;")


def test_rename_delete_and_export(browser):
    count = browser.script("return document.querySelectorAll('#conversations li').length;")
    browser.click("#conversations li.current button[title^='Rename']")
    browser.cmd("POST", "/alert/text", {"text": "Renamed chat"})
    browser.cmd("POST", "/alert/accept", {})
    assert browser.script("return document.querySelector('#conversations li.current .open').textContent;") == "Renamed chat"
    # Export: the file's conversations are the stored ones.
    exported = browser.cmd("POST", "/execute/async", {"script": """
        const done = arguments[arguments.length - 1];
        const real = URL.createObjectURL, click = HTMLAnchorElement.prototype.click;
        HTMLAnchorElement.prototype.click = function () {};  // no download in the test
        URL.createObjectURL = (blob) => { URL.createObjectURL = real; blob.text().then(done); return real(blob); };
        document.getElementById('export').click();
        HTMLAnchorElement.prototype.click = click;""", "args": []})
    data = json.loads(exported)
    assert data["format"] == "hubzoo-chat" and len(data["conversations"]) == count
    assert data["conversations"][0]["title"] == "Renamed chat"
    browser.click("#conversations li.current button[title^='Delete']")
    browser.cmd("POST", "/alert/accept", {})
    assert browser.script("return document.querySelectorAll('#conversations li').length;") == count - 1
    assert "Renamed chat" not in browser.script("return localStorage.getItem('hubzoo.conversations');")


IMPORTED = {"format": "hubzoo-chat", "version": 1, "conversations": [{
    "title": "Rendering check",
    "messages": [
        {"role": "user", "content": "Show me markdown <b>please</b>"},
        {"role": "assistant", "content": (
            "<think>The user wants *markdown*.</think>\n"
            "## A heading\n\n- one\n- two\n\n| name | value |\n|---|---|\n| pi | 3.14 |\n\n"
            "```python\ndef square(x):\n    return x * x\n```\n\n"
            "See [the docs](https://example.org).\n\n"
            "Inline math $e^{i\\pi} + 1 = 0$ and a block:\n\n$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$\n\n"
            "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">"
            "<a href=\"javascript:window.pwned = 3\">click</a>\n")},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp_c\": 21}"},
        {"role": "assistant", "content": "It is 21 \u00b0C in Paris."},
    ]}]}


def test_imported_conversation_renders_and_runs_no_script(browser, tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(IMPORTED))
    browser.type_into("#import-file", str(path))
    browser.wait_for("return document.querySelector('#conversations li.current').textContent.startsWith('Rendering');")
    md = ".msg.assistant:nth-child(2) .md"
    assert browser.script(f"return document.querySelector('{md} h2').textContent;") == "A heading"
    assert browser.script(f"return document.querySelectorAll('{md} ul li').length;") == 2
    assert browser.script(f"return [...document.querySelectorAll('{md} table td')].map(t => t.textContent);") == [
        "pi", "3.14"]
    assert browser.script(f"return document.querySelector('{md} pre code.hljs').textContent;") == (
        "def square(x):\n    return x * x\n")
    assert browser.script(f"return document.querySelectorAll('{md} pre code .hljs-keyword').length;") >= 1
    assert browser.script(f"return !!document.querySelector('{md} .code-bar button.copy-code');")
    assert browser.script(f"return document.querySelectorAll('{md} .katex').length;") == 2
    assert browser.script(f"return !!document.querySelector('{md} .math-block .katex-display');")
    # Reasoning folded; the user's HTML shown as text.
    assert browser.script("const d = document.querySelector('details.reasoning');"
                          "return d && !d.open && d.textContent.includes('The user wants');")
    assert "<b>please</b>" in browser.script("return document.querySelector('.msg.user .body').textContent;")
    # No script ran, none is in the page, no handler or javascript: link survived.
    time.sleep(0.3)
    assert browser.script("return window.pwned === undefined;")
    assert browser.script("return document.querySelectorAll('#log script, #log [onerror]').length;") == 0
    assert browser.script("return [...document.querySelectorAll('#log a')].every(a => !a.href.startsWith('javascript'));")
    assert browser.script(f"return document.querySelector('{md} a[href^=\"https\"]').rel;") == "noopener noreferrer"
    # Tool call and result shown as such.
    call = browser.script("return document.querySelector('.tool-call').textContent;")
    assert "get_weather" in call and "call_1" in call and '"city": "Paris"' in call
    result = browser.script("return document.querySelector('.msg.tool').textContent;")
    assert "Tool result: get_weather" in result and '"temp_c": 21' in result

    browser.script("if (!document.getElementById('settings').hidden) document.getElementById('settings-toggle').click();"
                   "document.activeElement.blur(); document.querySelector('.msg.user').scrollIntoView();")
    desktop = browser.screenshot("chat-desktop.png", 1280, 860)
    phone = browser.screenshot("chat-phone.png", 390, 844)
    assert browser.script("return getComputedStyle(document.getElementById('sidebar')).visibility;") == "hidden"
    # The page itself never scrolls, the conversation does (nothing sticks out of the layout).
    assert browser.script("const d = document.documentElement;"
                          "return d.scrollWidth <= innerWidth && d.scrollHeight <= innerHeight;")
    # 200% zoom of a 1280x860 window: a 640x430 viewport; everything still fits, the box is in view.
    browser.cmd("POST", "/window/rect", {"width": 640, "height": 430 + 143})  # + the window's frame
    assert browser.script("const d = document.documentElement;"
                          "return d.scrollWidth <= innerWidth && d.scrollHeight <= innerHeight &&"
                          " document.getElementById('input').getBoundingClientRect().bottom <= innerHeight;")
    browser.click("#theme")  # auto -> light -> dark
    browser.click("#theme")
    assert browser.script("return document.documentElement.dataset.theme;") == "dark"
    assert browser.script("return document.getElementById('hljs-light').disabled;")
    dark = browser.screenshot("chat-dark-phone.png", 390, 844)
    browser.click("#theme")
    browser.cmd("POST", "/window/rect", {"width": 1280, "height": 860})
    for png in (desktop, phone, dark):
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_server_down_is_shown_and_recovery(served, browser):
    browser.click("#new")  # its settings are the imported conversation's (none): set them
    set_setting(browser, "max_tokens", "40")
    set_setting(browser, "temperature", "0")
    served["server"].stop()
    browser.type_into("#input", "Hello?" + ENTER)
    browser.wait_for("return !document.getElementById('banner').hidden &&"
                     " document.getElementById('banner-text').textContent.includes('cannot be reached');")
    assert browser.script("return document.querySelectorAll('.msg.assistant').length;") == 0
    served["server"] = served["restart"]()
    # "is back", not "back": the first banner says "Waiting for it to come back".
    browser.wait_for("return document.getElementById('banner-text').textContent.includes('is back');",
                     timeout=30)
    browser.click("#retry")
    assert last_answer(browser).strip()
    assert browser.script("return document.getElementById('banner').hidden;")
    time.sleep(1.5)  # a health poll (every second) must not bring the banner back after the answer
    assert browser.script("return document.getElementById('banner').hidden;")
