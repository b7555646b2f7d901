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


CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 👋"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}],
]


@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("gen", [False, True])
def test_apply_chat_template_matches_transformers(hz, smollm2_path, conv, gen):
    import transformers

    ref_tok = transformers.AutoTokenizer.from_pretrained(smollm2_path)
    messages = CONVERSATIONS[conv]
    want = ref_tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
    ours = hz.Tokenizer.from_pretrained(smollm2_path)
    text = ours.apply_chat_template(messages, add_generation_prompt=gen)
    assert text == want
    # and the ids of the rendered prompt, as apply_chat_template(tokenize=True) gives them
    want_ids = ref_tok(want, add_special_tokens=False)["input_ids"]
    assert ours.encode(text, add_special_tokens=False).ids == want_ids
