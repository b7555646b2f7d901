"""`hubzoo serve` on loopback, driven by the official `openai` client and raw HTTP.

- chat (plain, streamed), text completions, model list, tokenize/detokenize, embeddings
  (all-MiniLM-L6-v2, float and base64, against sentence-transformers), the chat page;
- errors as OpenAI error objects: 401, 400 (malformed JSON, wrong types, bad sampling
  values), 404 (unknown model), 400 context_length_exceeded, 413, 429 when the queue is full;
- batch invariance through the server: 16 concurrent greedy requests of different lengths
  return exactly the tokens each returns alone (and what hubzoo.CausalLM.generate gives);
  seeded sampling is reproducible under concurrency;
- a client dropping mid-stream: the generation is cancelled, the slot and its KV memory
  return (/metrics), the server keeps serving;
- a bounded load from a second process (500 requests, 32 at once, mixed, some dropped):
  every request answered or refused with 429/503, memory back afterwards; SIGTERM exits 0.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx  # the openai client's own HTTP library
import numpy as np
import openai
import pytest

import _util

KEY = "test-key-123"
MINILM = _util.REPO / "models" / "all-MiniLM-L6-v2"
MODEL_ID = "SmolLM2-135M-Instruct"


class Served:
    """A `hubzoo serve` process on a free loopback port."""

    def __init__(self, tmp_path, *args: str, model=None, port: int = 0):
        self.log_path = tmp_path / "serve.log"
        self.log = open(self.log_path, "w")
        model = str(model or _util.SMOLLM2)
        cmd = [str(_util.HUBZOO_BIN), "serve", "-m", model, "--port", str(port), "--api-key", KEY, *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        self.url = None
        while time.time() < deadline and self.url is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log_path.read_text()}")
            m = re.search(r"listening on (http://\S+)", self.log_path.read_text())
            if m:
                self.url = m.group(1)
            else:
                time.sleep(0.1)
        if self.url is None:
            self.proc.kill()
            raise RuntimeError("server did not start: " + self.log_path.read_text())
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)

    def client(self, **kw) -> openai.OpenAI:
        kw.setdefault("api_key", KEY)
        return openai.OpenAI(base_url=self.url + "/v1", max_retries=0, timeout=120, **kw)

    def metrics(self) -> dict[str, float]:
        out = {}
        for line in self.http.get("/metrics").text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[re.sub(r'\{model="[^"]*"', "{", name).replace("{}", "").replace("{,", "{")] = float(value)
        return out

    def wait_idle(self, timeout: float = 30) -> dict[str, float]:
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if m["hubzoo_requests_running"] == 0 and m["hubzoo_requests_waiting"] == 0:
                return m
            if time.time() > deadline:
                raise AssertionError(f"server not idle: {m}")
            time.sleep(0.05)

    def stop(self, timeout: float = 30) -> int:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()


@pytest.fixture(scope="module")
def server(hubzoo_bin, smollm2_path, tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("serve"), "--max-concurrency", "16", "--max-queue", "32",
               "--max-context", "1024", "--embedding-model", str(MINILM))
    yield s
    code = s.stop()
    assert code == 0, s.log_path.read_text()[-3000:]


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def ours(hz, smollm2_path):
    return hz.CausalLM.from_pretrained(str(smollm2_path), dtype="float32")


@pytest.fixture(scope="module")
def tok(hz, smollm2_path):
    return hz.Tokenizer.from_pretrained(str(smollm2_path))


def chat_ids(tok, content: str) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    return list(tok.encode(text, add_special_tokens=False).ids)


def test_models_and_page(server, client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL_ID, "all-MiniLM-L6-v2"]
    assert client.models.retrieve(MODEL_ID).id == MODEL_ID
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")
    page = httpx.get(server.url + "/")  # the page needs no key
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '"/assets/app.js"' in page.text and "temperature" in page.text
    assert "/v1/chat/completions" in httpx.get(server.url + "/assets/app.js").text  # test_server_page.py: the rest
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_chat_plain_matches_generate(client, ours, tok):
    content = "What is the capital of France?"
    r = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": content}], temperature=0, max_tokens=24,
        extra_body={"return_token_ids": True},
    )
    choice = r.choices[0]
    ids = chat_ids(tok, content)
    expected = ours.generate(np.array([ids]), max_new_tokens=24)[0].tolist()
    got = choice.model_extra["token_ids"]
    assert got == expected[: len(got)]
    assert choice.message.role == "assistant"
    assert choice.message.content == tok.decode([t for t in got if t != 2], skip_special_tokens=True)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == len(got)
    assert r.usage.total_tokens == len(ids) + len(got)


def test_chat_streamed_equals_plain(client):
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Write a haiku about rain."}],
              temperature=0, max_tokens=40)
    plain = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    # Without include_usage, the finishing chunk carries the usage.
    last = list(client.chat.completions.create(stream=True, **kw))[-1]
    assert last.choices[0].finish_reason and last.usage.total_tokens == plain.usage.total_tokens


def test_completions_logprobs_and_stop(client, ours, tok):
    prompt = "The capital of France is"
    r = client.completions.create(model=MODEL_ID, prompt=prompt, temperature=0, max_tokens=12, logprobs=3,
                                  extra_body={"return_token_ids": True})
    ids = list(tok.encode(prompt).ids)
    expected = ours.generate(np.array([ids]), max_new_tokens=12)[0].tolist()
    c = r.choices[0]
    assert c.model_extra["token_ids"] == expected[: len(c.model_extra["token_ids"])]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    # Greedy: the chosen token is the most likely one, and its logprob is log_softmax of the logits.
    logits = ours.forward(np.array([ids]))[0, -1].astype(np.float64)
    ref = logits[expected[0]] - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
    assert abs(lp.token_logprobs[0] - ref) < 1e-4
    assert max(lp.top_logprobs[0].values()) == lp.token_logprobs[0]
    # A stop string ends the text before it (it may span tokens).
    full = c.text
    stop = full[3:7]
    s = client.completions.create(model=MODEL_ID, prompt=prompt, temperature=0, max_tokens=12, stop=[stop])
    assert s.choices[0].finish_reason == "stop" and s.choices[0].text == full[: full.index(stop)]
    # Several prompts: one choice each.
    many = client.completions.create(model=MODEL_ID, prompt=[prompt, "Hello"], temperature=0, max_tokens=4)
    assert [ch.index for ch in many.choices] == [0, 1] and many.choices[0].text == full[: len(many.choices[0].text)]


def test_auth(server):
    with pytest.raises(openai.AuthenticationError) as e:
        server.client(api_key="wrong").models.list()
    assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": []})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_bad_requests(server, client):
    h = server.http
    r = h.post("/v1/chat/completions", content=b'{"messages": [', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert h.post("/v1/completions", content=b"[1, 2]").status_code == 400
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3.0}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "12"}, "max_tokens"),
        ({"presence_penalty": 5}, "presence_penalty"),
        ({"logit_bias": {"999999": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 500}}, "logit_bias"),
        ({"stop": 7}, "stop"),
        ({"n": 2}, "n"),
        ({"stream": "yes"}, "stream"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL_ID, messages=msgs, extra_body=extra)
        assert e.value.status_code == 400 and e.value.body["param"] == param, (extra, e.value.body)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_ID, messages=[{"content": "no role"}])
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4", messages=msgs)
    assert e.value.body["code"] == "model_not_found"
    r = h.post("/v1/chat/completions", content=b"x" * (9 << 20))
    assert r.status_code == 413 and "error" in r.json()
    assert h.get("/v1/nothing").status_code == 404


def test_tools_on_a_template_that_ignores_them(server):
    """SmolLM2-135M-Instruct's template never reads `tools`: a request with tools is a 400
    naming them, not a prompt with the tools silently dropped (llama.cpp #27129)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    r = server.http.post("/v1/chat/completions", json={**body, "tools": [tool]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text
    assert "does not render 'tools'" in r.json()["error"]["message"]
    assert server.http.post("/v1/chat/completions", json={**body, "tools": []}).status_code == 200


def test_context_overflow(client):
    long_prompt = "word " * 1100  # > --max-context 1024 tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": long_prompt}])
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=1024)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "max_tokens"


def test_tokenize_detokenize(server, tok):
    r = server.http.post("/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
    assert r["tokens"] == list(tok.encode("Hello world").ids) and r["count"] == len(r["tokens"])
    assert server.http.post("/detokenize", json={"tokens": r["tokens"]}).json() == {"prompt": "Hello world"}
    msgs = [{"role": "user", "content": "Hi"}]
    r = server.http.post("/tokenize", json={"messages": msgs}).json()
    assert r["tokens"] == chat_ids(tok, "Hi")
    assert server.http.post("/detokenize", json={"tokens": [10 ** 9]}).status_code == 400


def test_embeddings(client):
    from sentence_transformers import SentenceTransformer

    texts = ["A man is eating food.", "hubzoo serves embeddings over HTTP", "x"]
    r = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts)
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    ref = SentenceTransformer(str(MINILM), device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert r.usage.prompt_tokens > len(texts)
    b = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts[0], encoding_format="base64")
    # The openai client decodes base64 itself when it asked for floats; here we asked for base64.
    raw = b.data[0].embedding
    vec = np.frombuffer(base64.b64decode(raw), dtype=np.float32) if isinstance(raw, str) else np.array(raw)
    np.testing.assert_array_equal(vec, got[0])
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model=MODEL_ID, input="x")


PROMPTS = [
    "Hi",
    "What is 2 + 2?",
    "Name three colours.",
    "Tell me a short story about a dragon who learns to fly over the mountains.",
    "Translate 'good morning' into French.",
    "List the planets of the solar system in order from the sun, with one fact about each.",
    "Why is the sky blue?",
    "Write a limerick about a cat.",
    "What is the boiling point of water at sea level in Celsius and Fahrenheit?",
    "Explain recursion to a five year old, using an example with Russian dolls and stairs.",
    "Say yes.",
    "Give me a recipe for pancakes.",
    "What does a CPU do?",
    "Describe the colour of the ocean at dawn, at noon and at dusk, in three sentences.",
    "Spell 'banana' backwards.",
    "Who wrote Hamlet?",
]


def _request(client, i: int, **extra):
    r = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": PROMPTS[i]}], max_tokens=8 + 3 * i,
        extra_body={"return_token_ids": True, **extra.pop("extra_body", {})}, **extra)
    return r.choices[0].model_extra["token_ids"]


def test_16_concurrent_greedy_requests_match_alone(server, client, ours, tok):
    alone = [_request(client, i, temperature=0) for i in range(len(PROMPTS))]
    before = server.metrics()
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda i: _request(client, i, temperature=0), range(len(PROMPTS))))
    for i, (a, b) in enumerate(zip(alone, together)):
        assert a == b, f"request {i}: alone {a} vs concurrent {b}"
    after = server.metrics()
    # They really shared forward passes: far fewer steps than tokens.
    steps = after["hubzoo_engine_steps_total"] - before["hubzoo_engine_steps_total"]
    tokens = sum(len(t) for t in together)
    assert steps < tokens / 3, (steps, tokens)
    # And what the server returns alone is what the library generates.
    for i in (0, 3, 9):
        ids = chat_ids(tok, PROMPTS[i])
        expected = ours.generate(np.array([ids]), max_new_tokens=8 + 3 * i)[0].tolist()
        assert alone[i] == expected[: len(alone[i])]


def test_seeded_sampling_is_reproducible(client):
    def sampled(seed):
        return _request(client, 3, temperature=1.0, top_p=0.9, seed=seed, extra_body={"top_k": 50, "min_p": 0.02})

    first = sampled(1234)
    with ThreadPoolExecutor(8) as pool:
        # The same seeded request four times, beside other sampled traffic.
        runs = [pool.submit(sampled, 1234) for _ in range(4)]
        others = [pool.submit(_request, client, i, temperature=1.0) for i in range(4)]
        runs = [f.result() for f in runs]
        [f.result() for f in others]
    assert all(r == first for r in runs)
    assert sampled(99) != first


def test_client_drop_mid_stream_frees_the_slot(server, client):
    before = server.metrics()
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Tell me a very long story."}],
            "max_tokens": 900, "stream": True, "ignore_eos": True}
    with server.http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen += 1
            if seen >= 3:
                break
        assert server.metrics()["hubzoo_requests_running"] == 1
    # The response is closed unread: the server cancels the generation and frees the slot.
    m = server.wait_idle()
    assert m["hubzoo_kv_cache_bytes"] == 0
    assert m["hubzoo_client_disconnects_total"] == before["hubzoo_client_disconnects_total"] + 1
    cancelled = 'hubzoo_requests_finished_total{reason="cancelled"}'
    assert m[cancelled] == before[cancelled] + 1
    r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert r.choices[0].message.content


def test_generation_config_gives_sampling_defaults(server, client, smollm2_path, tmp_path):
    """Omitted sampling fields come from generation_config.json (here temperature 0: greedy);
    a value no request could hold stops the server with the file and field named."""
    snap = tmp_path / "smol-greedy"
    snap.mkdir()
    for f in smollm2_path.iterdir():
        if f.name != "generation_config.json":
            (snap / f.name).symlink_to(f.resolve())
    gen = json.loads((smollm2_path / "generation_config.json").read_text())
    (snap / "generation_config.json").write_text(json.dumps({**gen, "temperature": 0.0, "top_k": 7}))
    messages = [{"role": "user", "content": "Name three colours."}]
    greedy = client.chat.completions.create(model=MODEL_ID, messages=messages, temperature=0, max_tokens=16)
    s = Served(tmp_path, "--quiet", model=snap)
    try:
        assert "sampling defaults: temperature 0, top_p 1, top_k 7" in s.log_path.read_text()
        c = s.client()
        for _ in range(2):  # no temperature and no seed: still greedy
            r = c.chat.completions.create(model="smol-greedy", messages=messages, max_tokens=16)
            assert r.choices[0].message.content == greedy.choices[0].message.content
    finally:
        assert s.stop() == 0

    (snap / "generation_config.json").write_text(json.dumps({**gen, "temperature": 7}))
    with pytest.raises(RuntimeError, match=r"generation_config.json: field 'temperature'"):
        Served(tmp_path, "--quiet", model=snap)


@pytest.fixture()
def small_server(hubzoo_bin, smollm2_path, tmp_path):
    s = Served(tmp_path, "--max-concurrency", "4", "--max-queue", "4", "--max-context", "512", "--quiet")
    yield s
    s.stop()


def test_full_queue_answers_429(small_server):
    s = small_server
    body = {"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "stream": True}
    streams = []
    try:
        for _ in range(8):  # 4 running + 4 queued
            cm = s.http.stream("POST", "/v1/completions", json=body)
            r = cm.__enter__()
            assert r.status_code == 200
            streams.append(cm)
        deadline = time.time() + 30
        while s.metrics()["hubzoo_requests_waiting"] < 4 and time.time() < deadline:
            time.sleep(0.05)
        with pytest.raises(openai.RateLimitError) as e:
            s.client().completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2)
        assert e.value.status_code == 429 and e.value.body["code"] == "queue_full"
    finally:
        for cm in streams:
            cm.__exit__(None, None, None)
    m = s.wait_idle()
    assert m["hubzoo_kv_cache_bytes"] == 0 and m["hubzoo_requests_rejected_total"] == 1


@pytest.fixture()
def load_server(hubzoo_bin, smollm2_path, tmp_path):
    # 32 clients against 8 slots and 16 queue places: most requests are served, some refused.
    s = Served(tmp_path, "--max-concurrency", "8", "--max-queue", "16", "--max-context", "512", "--quiet")
    yield s
    s.stop()


def test_load_from_second_process_then_sigterm(load_server, smollm2_path):
    s = load_server
    config = json.loads((smollm2_path / "config.json").read_text())
    # A page: 16 positions of one layer's keys and values, float32.
    page_bytes = 16 * 2 * config["num_key_value_heads"] * (
        config["hidden_size"] // config["num_attention_heads"]) * 4
    baseline = s.metrics()["process_resident_memory_bytes"]
    proc = subprocess.run(
        [sys.executable, str(_util.REPO / "python" / "tests" / "server_load.py"), s.url, KEY, "500", "32"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    counts = summary["counts"]
    assert not summary["unexpected"], summary
    # Every request answered: served, dropped by its client, or refused with an error
    # object after its client retried (Retry-After) ten times; most are served.
    assert set(counts) <= {"ok", "dropped", "refused_429", "refused_503"}, counts
    assert sum(counts.values()) == 500 and counts.get("dropped", 0) > 0, counts
    assert counts.get("ok", 0) >= 250, counts
    m = s.wait_idle()
    assert m["hubzoo_kv_cache_bytes"] == 0
    assert m["hubzoo_requests_rejected_total"] == summary["refusals"]
    # Memory back near its baseline, but for the KV pages the prefix cache keeps for reuse
    # (counted in hubzoo_kv_cache_total_bytes, within the KV budget) and allocator caches.
    kept = m["hubzoo_kv_cache_total_bytes"]
    assert kept == m["hubzoo_prefix_cache_pages"] * page_bytes
    assert kept <= m["hubzoo_kv_cache_budget_bytes"]
    rss = m["process_resident_memory_bytes"]
    assert rss < baseline + kept + 64 * 2**20, (baseline, kept, rss)
    assert s.client().models.list().data[0].id == MODEL_ID

    # SIGTERM with a stream open: the stream ends, the process exits 0.
    body = {"model": MODEL_ID, "prompt": "Once", "max_tokens": 400, "ignore_eos": True, "stream": True}
    lines = []

    def read_stream():
        with s.http.stream("POST", "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                lines.append(line)
                if len(lines) == 1:
                    s.proc.send_signal(signal.SIGTERM)

    t = threading.Thread(target=read_stream)
    t.start()
    assert s.proc.wait(30) == 0
    t.join(30)
    assert not t.is_alive()
    assert any("shutting down" in line for line in lines), lines[-3:]
    assert "stopped" in s.log_path.read_text()
