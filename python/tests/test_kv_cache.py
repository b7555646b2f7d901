"""The paged KV cache seen from the engine API: a byte budget that makes requests wait
but never changes what they generate, and refuses a request it can never hold."""

from __future__ import annotations

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


def test_prompt_beyond_the_budget_is_refused(tiny):
    ours = tiny("llama_tied_llama3")
    prompt = random_prompt(ours.vocab_size, 40, seed=1)[None]
    with pytest.raises(ValueError, match="KV budget"):
        ours.generate(prompt, max_new_tokens=4, kv_cache_bytes=ours.kv_slot_bytes_at(40))


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
