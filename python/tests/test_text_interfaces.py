"""Text in, text out through the public API: hubzoo.Tokenizer, `hubzoo tokenize`, `generate --prompt`."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import tokenizers

TEXTS = ["Hello wörld 👍🏽", "<|im_start|>user\nWhat is 2+2?<|im_end|>", "  leading spaces\tand tabs", ""]


@pytest.fixture(scope="module")
def hf_tok(smollm2_path):
    return tokenizers.Tokenizer.from_file(str(smollm2_path / "tokenizer.json"))


@pytest.mark.parametrize("text", TEXTS)
def test_python_tokenizer_matches_hf(hz, smollm2_path, hf_tok, text):
    ours = hz.Tokenizer.from_pretrained(smollm2_path)
    ref = hf_tok.encode(text)
    got = ours.encode(text)
    assert got.ids == ref.ids
    assert got.tokens == ref.tokens
    assert got.offsets == [tuple(o) for o in ref.offsets]
    assert ours.decode(got.ids) == hf_tok.decode(ref.ids, skip_special_tokens=False)
    assert ours.decode(got.ids, skip_special_tokens=True) == hf_tok.decode(ref.ids, skip_special_tokens=True)


def test_tokenizer_from_tokenizer_json_file(hz, smollm2_path, hf_tok):
    ours = hz.Tokenizer.from_pretrained(smollm2_path / "tokenizer.json")
    assert ours.vocab_size == hf_tok.get_vocab_size()
    assert ours.token_to_id("<|im_start|>") == hf_tok.token_to_id("<|im_start|>")


def test_cli_tokenize_json(hubzoo_bin, smollm2_path, hf_tok):
    text = "Hello wörld 👍🏽"
    out = subprocess.run([str(hubzoo_bin), "tokenize", "-m", str(smollm2_path), "--format", "json", text],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    ref = hf_tok.encode(text)
    assert got["ids"] == ref.ids
    assert got["tokens"] == ref.tokens
    assert [tuple(o) for o in got["offsets"]] == [tuple(o) for o in ref.offsets]


def test_cli_generate_prompt_text(hubzoo_bin, hz, smollm2_path, hf_tok):
    prompt = "The capital of France is"
    out = subprocess.run([str(hubzoo_bin), "generate", "-m", str(smollm2_path), "--prompt", prompt,
                          "--max-new-tokens", "12", "--format", "json"],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    lm = hz.CausalLM.from_pretrained(str(smollm2_path))
    want = lm.generate(np.array([hf_tok.encode(prompt).ids]), max_new_tokens=12)[0].tolist()
    assert got["ids"] == want
    assert got["text"] == hf_tok.decode(want, skip_special_tokens=True)


def test_cli_generate_needs_a_prompt(hubzoo_bin, smollm2_path):
    out = subprocess.run([str(hubzoo_bin), "generate", "-m", str(smollm2_path)], capture_output=True, text=True)
    assert out.returncode != 0
    assert out.stderr.startswith("error:") and len(out.stderr.strip().splitlines()) == 1
