"""The paged KV cache seen from the engine API: a byte budget that makes requests wait
but never changes what they generate, and refuses a request it can never hold; and the
prefix cache through the server: every response identical with it and without it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx
import numpy as np
import pytest

import _util
from _util import random_prompt

VARIANTS = ["llama_tied_llama3", "gemma3_text"]  # full attention; sliding windows and softcap


@pytest.fixture(scope="module")
def tiny(hz, tmp_path_factory):
    """variant -> hubzoo.CausalLM (fp32) of a tiny random checkpoint, built for this module."""
    root = tmp_path_factory.mktemp("tiny_kv")
    cache = {}

    def get(variant):
        if variant not in cache:
            path = _util.tiny_models.build(variant, root / variant)
            cache[variant] = hz.CausalLM.from_pretrained(str(path), dtype="float32")
        return cache[variant]

    return get


@pytest.mark.parametrize("variant", VARIANTS)
def test_budget_queues_requests_and_keeps_their_tokens(variant, tiny):
    """A budget that holds one request at a time gives every row the tokens it gets with
    room for all of them (each request waits for pages, none is cut short)."""
    ours = tiny(variant)
    vocab = ours.vocab_size
    prompts = [random_prompt(vocab, n, seed=n) for n in (37, 5, 20)]
    batch, mask = _util.left_pad(prompts, 0)
    new = 12
    free = ours.generate(batch, mask, max_new_tokens=new, ignore_eos=True)
    one = max(ours.kv_slot_bytes_at(len(p) + new) for p in prompts)
    tight = ours.generate(batch, mask, max_new_tokens=new, ignore_eos=True, kv_cache_bytes=one)
    np.testing.assert_array_equal(tight, free)
    assert free.shape == (3, new)


def test_prompt_beyond_the_budget_is_refused(hz, tiny):
    ours = tiny("llama_tied_llama3")
    prompt = random_prompt(ours.vocab_size, 40, seed=1)[None]
    with pytest.raises(hz.InvalidArgument, match="KV budget"):
        ours.generate(prompt, max_new_tokens=4, kv_cache_bytes=ours.kv_slot_bytes_at(32))  # 2 pages


def test_budget_caps_new_tokens(tiny):
    """A budget with room for the prompt and a few new tokens ends the request there
    (finish reason length), as max_context does."""
    ours = tiny("llama_tied_llama3")
    prompt = random_prompt(ours.vocab_size, 30, seed=2)[None]
    budget = ours.kv_slot_bytes_at(48)  # 3 pages: positions up to 48
    out = ours.generate(prompt, max_new_tokens=40, ignore_eos=True, kv_cache_bytes=budget)
    assert out.shape == (1, 48 - 30)
    full = ours.generate(prompt, max_new_tokens=40, ignore_eos=True)
    np.testing.assert_array_equal(out[0], full[0, : 48 - 30])


def test_python_engine_reuses_prefixes_across_calls(hz, tmp_path_factory):
    """generate_rows() and generate() run on one engine kept between calls: a later call
    whose prompts start with an earlier call's prompt and answer adopts those pages (the
    hit counters say so) and gets the bits a fresh engine gives."""
    path = _util.tiny_models.build("llama_tied_llama3", tmp_path_factory.mktemp("engine_reuse") / "m")
    model = hz.CausalLM.from_pretrained(str(path), dtype="float32")
    vocab = model.vocab_size
    system = random_prompt(vocab, 70, seed=12).tolist()
    (answer, _), = model.generate_rows([system], max_tokens=20, ignore_eos=True)
    first = model.engine_stats()
    assert first["prefix_cache"] and first["prefix_hit_tokens"] == 0
    assert first["prefix_cached_pages"] > 0 and first["max_slots"] >= 16
    turns = [system + answer + random_prompt(vocab, n, seed=n).tolist() for n in (3, 9)]
    later = model.generate_rows(turns, max_tokens=12, temperature=0.9, seed=[4, 5], ignore_eos=True)
    hits = model.engine_stats()["prefix_hit_tokens"]
    assert hits >= 2 * 80, hits  # both adopt the 5 whole pages of prompt + answer (89 computed)
    batch, mask = _util.left_pad([np.array(t) for t in turns], 0)
    again = model.generate(batch, mask, max_new_tokens=12, ignore_eos=True)
    assert model.engine_stats()["prefix_hit_tokens"] > hits

    model.release_engine()
    assert model.engine_stats()["prefix_cached_pages"] == 0
    fresh = hz.CausalLM.from_pretrained(str(path), dtype="float32")
    assert fresh.generate_rows(turns, max_tokens=12, temperature=0.9, seed=[4, 5], ignore_eos=True) == later
    np.testing.assert_array_equal(fresh.generate(batch, mask, max_new_tokens=12, ignore_eos=True), again)
    assert fresh.engine_stats()["prefix_hit_tokens"] > 0


# --- the prefix cache through the server ---------------------------------------------------

def _metrics(url) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out


@pytest.fixture(scope="module")
def servers(hubzoo_bin, tmp_path_factory):
    """The same tiny model served with the prefix cache and without it (--no-prefix-cache),
    with a word-level tokenizer (token i is "t{i}") and a chat template that joins contents,
    "t1" opening the assistant's turn (as its generation prompt)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    root = tmp_path_factory.mktemp("served_kv")
    path = _util.tiny_models.build("llama_tied_llama3", root / "model")
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{% for m in messages %}{% if m['role'] == 'assistant' %}t1 {% endif %}"
                         "{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t1 {% endif %}"}))
    procs, urls = [], []
    try:
        for name, extra in (("on", []), ("off", ["--no-prefix-cache"])):
            proc, url = _util.serve(path, root / f"{name}.log", "--quiet", "--max-concurrency", "4", "--max-batch-tokens", "24",
                               *extra)
            procs.append(proc)
            urls.append(url)
        yield {"on": urls[0], "off": urls[1], "vocab": vocab, "path": path, "root": root}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def _words(ids) -> str:
    return " ".join(f"t{int(i)}" for i in ids)


def _requests(vocab):
    """(endpoint, body) pairs sharing prefixes: a history and its branches (same history,
    different next messages), one ending mid-page, a repeat, and chat turns."""
    history = random_prompt(vocab, 70, seed=3)
    tails = [random_prompt(vocab, n, seed=40 + n) for n in (3, 9, 20)]
    prompts = [history] + [np.concatenate([history, t]) for t in tails]
    prompts += [np.concatenate([history[:37], [5]]), history]  # mid-page, repeat
    out = []
    for i, p in enumerate(prompts):
        body = {"prompt": p.tolist(), "max_tokens": 12, "logprobs": 2, "temperature": 0.0 if i % 2 else 0.8,
                "seed": 7 + i, "ignore_eos": True}
        out.append(("/v1/completions", body))
    system = {"role": "system", "content": _words(random_prompt(vocab, 40, seed=5))}
    for i in range(3):  # branching chats on one system prompt
        user = {"role": "user", "content": _words(random_prompt(vocab, 6 + 5 * i, seed=60 + i))}
        out.append(("/v1/chat/completions", {"messages": [system, user], "max_tokens": 10, "logprobs": True,
                                              "top_logprobs": 2, "temperature": 0, "ignore_eos": True}))
    return out


def _ask(url, endpoint, body):
    r = httpx.post(url + endpoint, json=body, timeout=120)
    assert r.status_code == 200, r.text
    j = r.json()
    choice = j["choices"][0]
    return {"text": choice.get("text", (choice.get("message") or {}).get("content")),
            "logprobs": choice["logprobs"], "cached": j["usage"]["prompt_tokens_details"]["cached_tokens"],
            "prompt_tokens": j["usage"]["prompt_tokens"]}


def _ask_all(url, endpoint, body):
    """Every choice of a request with several prompts, in prompt order."""
    r = httpx.post(url + endpoint, json=body, timeout=120)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == list(range(len(body["prompt"])))
    return [{"text": c["text"], "logprobs": c["logprobs"]} for c in choices]


@pytest.mark.parametrize("concurrent", [False, True])
def test_prefix_cache_responses_identical(servers, concurrent):
    """Every response (text, tokens, logprobs) is the same with the prefix cache and
    without, alone and under concurrent load; the cache does serve cached tokens."""
    reqs = _requests(servers["vocab"])
    answers = {}
    for name in ("on", "off"):
        url = servers[name]
        if concurrent:
            with ThreadPoolExecutor(len(reqs)) as ex:
                answers[name] = list(ex.map(lambda r: _ask(url, *r), reqs))
        else:
            answers[name] = [_ask(url, *r) for r in reqs]
    for i, (on, off) in enumerate(zip(answers["on"], answers["off"])):
        assert on["text"] == off["text"], i
        assert on["logprobs"] == off["logprobs"], i
        assert off["cached"] == 0
        assert on["cached"] % 16 == 0 and on["cached"] < on["prompt_tokens"]
    if not concurrent:  # one after another: each finds the history its predecessors left
        cached = [a["cached"] for a in answers["on"]]
        assert cached[1:4] == [64, 64, 64] and cached[4] == 32 and cached[5] == 64, cached
        assert cached[7] == 32 and cached[8] == 32, cached  # the 40-token system prompt's pages
    m_on, m_off = _metrics(servers["on"]), _metrics(servers["off"])
    assert m_on["hubzoo_prefix_cache_enabled"] == 1 and m_off["hubzoo_prefix_cache_enabled"] == 0
    assert m_on["hubzoo_prefix_cache_hit_tokens_total"] > 0 and m_on["hubzoo_prefix_cache_pages"] > 0
    assert m_off["hubzoo_prefix_cache_hit_tokens_total"] == 0
    assert 0 < m_on["hubzoo_prefix_cache_hit_rate"] < 1


def test_multi_turn_chat_reuses_the_answer(servers):
    """Turn 2 resends turn 1 and its answer: the pages of both are reused, the answer the same."""
    vocab = servers["vocab"]
    turn1 = [{"role": "user", "content": _words(random_prompt(vocab, 45, seed=90))}]
    out = {}
    for name in ("on", "off"):
        url = servers[name]
        first = _ask(url, "/v1/chat/completions", {"messages": turn1, "max_tokens": 30, "temperature": 0,
                                                    "ignore_eos": True, "logprobs": True})
        turn2 = turn1 + [{"role": "assistant", "content": first["text"]},
                         {"role": "user", "content": _words(random_prompt(vocab, 5, seed=91))}]
        out[name] = (first, _ask(url, "/v1/chat/completions", {"messages": turn2, "max_tokens": 8,
                                                               "temperature": 0, "ignore_eos": True,
                                                               "logprobs": True}))
    assert out["on"][0]["logprobs"] == out["off"][0]["logprobs"]
    assert out["on"][1]["logprobs"] == out["off"][1]["logprobs"]
    # Turn 1's prompt (46 tokens with "t1") and its 30-token answer (75 positions computed):
    # four whole pages of the 82-token turn 2 are cached, the last holding answer tokens.
    assert out["on"][1]["cached"] == 64, out["on"][1]
    for name in ("on", "off"):
        m = _metrics(servers[name])
        assert m["hubzoo_kv_cache_bytes"] == 0  # held by requests: none when idle
        assert m["hubzoo_kv_cache_total_bytes"] <= m["hubzoo_kv_cache_budget_bytes"]


def test_preemption_keeps_every_response_and_the_budget(hz, servers):
    """A KV budget far below what a request's prompts grow to: they are admitted by their
    prompts' pages, the newest are preempted as the older ones grow and resume by
    recompute. Every response (text, logprobs) equals the unconstrained server's, the
    cache stays within its budget and holds nothing for requests once idle."""
    path, vocab = servers["path"], servers["vocab"]
    model = hz.CausalLM.from_pretrained(str(path), dtype="float32")
    budget = model.kv_slot_bytes_at(192)  # 12 pages a layer; the 6 prompts grow to ~44
    # One request's prompts are queued together: the first three are admitted by their
    # prompts' pages (20, 30, 40 tokens: 2 + 2 + 3 pages and one of growth each), and they
    # grow to 5 + 6 + 7 pages, so preemption does not depend on when threads send requests.
    prompts = [random_prompt(vocab, 20 + 10 * i, seed=300 + i).tolist() for i in range(6)]
    reqs = [("/v1/completions", {"prompt": prompts, "max_tokens": 60, "logprobs": 1, "temperature": t,
                                 "seed": 30, "ignore_eos": True}) for t in (0.0, 0.7)]
    proc, url = _util.serve(path, servers["root"] / "tight.log", "--quiet", "--max-concurrency", "6",
                            "--max-batch-tokens", "24", "--kv-cache-bytes", str(budget))
    try:
        tight, preempted = [], []
        for r in reqs:  # greedy, then sampled: each must preempt on its own
            tight.append(_ask_all(url, *r))
            preempted.append(_metrics(url)["hubzoo_requests_preempted_total"])
        m = _metrics(url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    free = [_ask_all(servers["off"], *r) for r in reqs]
    for i, (a, b) in enumerate(zip(tight, free)):
        assert [c["text"] for c in a] == [c["text"] for c in b], i
        assert [c["logprobs"] for c in a] == [c["logprobs"] for c in b], i
    assert 0 < preempted[0] < preempted[1], f"the budget never ran out: preemptions {preempted}"
    assert m["hubzoo_kv_cache_budget_bytes"] == budget
    assert m["hubzoo_kv_cache_total_bytes"] <= budget
    assert m["hubzoo_kv_cache_bytes"] == 0
