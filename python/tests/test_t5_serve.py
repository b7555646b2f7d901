"""`hubzoo serve` on a T5 checkpoint: /v1/completions runs the encoder once per request and
batches the decoder steps of concurrent requests (engine/seq2seq_causal.h). Checked against
transformers' generate (greedy) and hubzoo.Seq2SeqLM.generate (seeded sampling), alone and
concurrent (batch invariance), streamed, with stop strings and max_tokens; chat is a 400."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import hubzoo
from hubzoo.testing import tiny_t5

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Translate English to German: the house is wonderful.",
    "summarize: the weather was cold and the trains were late",
    "question: what is the capital of France? context: Paris is the capital.",
    "hello",
    "A much longer input " * 12,
]


@pytest.fixture(scope="module", params=sorted(tiny_t5.VARIANTS))
def served(request, tmp_path_factory):
    from test_server import Served

    tok = tiny_t5.unigram_tokenizer()
    path = tiny_t5.build(request.param, tmp_path_factory.mktemp(request.param),
                         vocab_size=tok.get_vocab_size())
    tiny_t5.save_tokenizer(tok, path)
    s = Served(tmp_path_factory.mktemp("serve_t5"), "--max-concurrency", "4", "--max-context", "512",
               model=path)
    yield request.param, path, s
    assert s.stop() == 0, s.log_path.read_text()[-3000:]


@pytest.fixture(scope="module")
def refs(served):
    _, path, _ = served
    import transformers
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    return (transformers.AutoTokenizer.from_pretrained(path), tiny_t5.load_hf(path),
            hubzoo.Seq2SeqLM.from_pretrained(path, num_threads=2), DynamicCache, EncoderDecoderCache)


def complete(s, prompt, **body):
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "return_token_ids": True, **body}
    r = s.http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def hf_greedy(refs, prompt, n):
    tok, hf, _, dyn, encdec = refs
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():  # a cache without a config: num_decoder_layers may differ
        out = hf.generate(input_ids=ids, do_sample=False, max_new_tokens=n,
                          past_key_values=encdec(dyn(), dyn()))
    return ids[0].tolist(), out[0, 1:].tolist()  # transformers' output starts with the start token


def test_greedy_completions_equal_transformers_generate(served, refs):
    name, _, s = served
    tok = refs[0]
    for prompt in PROMPTS:
        ids, expected = hf_greedy(refs, prompt, 24)
        body = complete(s, prompt)
        choice = body["choices"][0]
        assert choice["token_ids"] == expected, (name, prompt)
        assert choice["text"] == tok.decode(expected, skip_special_tokens=True)
        assert choice["finish_reason"] == ("stop" if expected[-1] == 1 else "length")
        assert body["usage"]["prompt_tokens"] == len(ids)
        assert body["usage"]["completion_tokens"] == len(expected)


def test_concurrent_requests_equal_alone_and_batch_steps(served, refs):
    name, _, s = served
    lib = refs[2]
    # Greedy and seeded sampling mixed; each request's tokens must not depend on the others.
    reqs = [(p, {"temperature": 0}) for p in PROMPTS] + \
           [(p, {"temperature": 1.0, "top_p": 0.9, "seed": 7 + i}) for i, p in enumerate(PROMPTS[:4])]
    alone = [complete(s, p, ignore_eos=True, **kw)["choices"][0]["token_ids"] for p, kw in reqs]
    before = s.metrics()
    with ThreadPoolExecutor(len(reqs)) as pool:
        together = list(pool.map(lambda r: complete(s, r[0], ignore_eos=True, **r[1])["choices"][0]["token_ids"],
                                 reqs))
    assert together == alone, name
    # How much HTTP arrivals overlap is up to timing (the tiny model steps in well under a
    # millisecond); one request's prompts are queued together, so their decoder steps must
    # share forward passes: fewer steps than tokens (engine/seq2seq_causal_test.cc checks
    # that decode() gets the rows in one call).
    before = s.metrics()
    batch = complete(s, PROMPTS, ignore_eos=True)["choices"]
    steps = s.metrics()["hubzoo_engine_steps_total"] - before["hubzoo_engine_steps_total"]
    assert [c["token_ids"] for c in batch] == alone[:len(PROMPTS)], name
    assert steps < sum(len(c["token_ids"]) for c in batch), (steps, "decoder steps were not batched")
    # Sampled tokens are the library's (same Sampler, same seed), run alone there.
    tok = refs[0]
    for (p, kw), got in zip(reqs[len(PROMPTS):], alone[len(PROMPTS):]):
        ids = np.array([tok(p).input_ids])
        want = lib.generate(ids, max_new_tokens=24, temperature=1.0, top_p=0.9, seed=kw["seed"],
                            ignore_eos=True)[0].tolist()
        assert got == want, (name, p)


def test_streaming_usage_and_stop(served, refs):
    name, _, s = served
    whole = complete(s, PROMPTS[1], ignore_eos=True)["choices"][0]
    text = ""
    usage = None
    with s.http.stream("POST", "/v1/completions", json={
            "prompt": PROMPTS[1], "max_tokens": 24, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        import json as _json
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = _json.loads(line[6:])
            if chunk["choices"]:
                text += chunk["choices"][0]["text"]
            if chunk.get("usage"):
                usage = chunk["usage"]
    assert text == whole["text"], name
    assert usage and usage["completion_tokens"] == 24
    # A stop string cuts the text before it and finishes with "stop".
    cut = whole["text"].strip()
    if len(cut) >= 4:
        stop = cut[len(cut) // 2: len(cut) // 2 + 2]
        got = complete(s, PROMPTS[1], ignore_eos=True, stop=[stop])["choices"][0]
        assert got["finish_reason"] == "stop" and stop not in got["text"]
        assert whole["text"].startswith(got["text"])
    got = complete(s, PROMPTS[1], ignore_eos=True, max_tokens=3)
    assert got["choices"][0]["finish_reason"] == "length" and got["usage"]["completion_tokens"] == 3


def test_chat_without_a_template_is_a_400(served):
    _, _, s = served
    r = s.http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400, r.text
    assert "chat template" in r.json()["error"]["message"]


def test_repeated_prompt_reuses_no_prefix(served, refs):
    """The encoder needs the whole prompt every time: the engine's prefix cache (whose pages
    an encoder-decoder never fills) must not skip a repeated prompt's first pages."""
    _, _, s = served
    prompt = PROMPTS[-1]  # > 2 pages of 16 tokens
    ids, expected = hf_greedy(refs, prompt, 24)
    assert len(ids) > 40
    for _ in range(2):
        body = complete(s, prompt)
        assert body["choices"][0]["token_ids"] == expected
        details = body["usage"].get("prompt_tokens_details") or {}
        assert details.get("cached_tokens", 0) == 0, body["usage"]
    # Off, not merely unused: pages an encoder-decoder never fills are nothing to index.
    enabled = [line for line in s.http.get("/metrics").text.splitlines()
               if line.startswith("hubzoo_prefix_cache_enabled")]
    assert enabled and all(line.endswith(" 0") for line in enabled), enabled
