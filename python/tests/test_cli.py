"""build/hubzoo generate / inspect on a tiny model and SmolLM2, against transformers greedy."""

from __future__ import annotations

import json
import subprocess

import numpy as np

import _util


def test_generate_json_ids(hubzoo_bin, tiny_paths, hf_tiny):
    hf = hf_tiny("qwen2_untied_bias")
    prompt = _util.random_prompt(hf.config.vocab_size, 12, seed=21)
    ref = _util.hf_generate(hf, prompt[None], max_new_tokens=10)[0].tolist()
    proc = _util.run_cli(
        "generate", "-m", str(tiny_paths["qwen2_untied_bias"]),
        "--ids", ",".join(map(str, prompt)), "--max-new-tokens", "10", "--format", "json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ids"] == ref  # "text" is checked once the C++ tokenizer lands


def test_generate_smollm2(hubzoo_bin, smollm2_path):
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(smollm2_path)
    model = _util.tiny_models.load_hf(smollm2_path)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name a primary colour."}], add_generation_prompt=True, tokenize=True
    )
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ref = _util.hf_generate(model, np.asarray(ids)[None], max_new_tokens=16)[0].tolist()
    proc = _util.run_cli(
        "generate", "-m", str(smollm2_path), "--ids", ",".join(map(str, ids)),
        "--max-new-tokens", "16", "--format", "json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ids"] == ref


def test_inspect(hubzoo_bin, tiny_paths):
    proc = _util.run_cli("inspect", "-m", str(tiny_paths["qwen3_headdim_mqa"]))
    assert proc.returncode == 0, proc.stderr
    assert "Qwen3ForCausalLM" in proc.stdout or "qwen3" in proc.stdout.lower()


def _hf_chat_turn(model, tokenizer, messages, max_new_tokens):
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    new = _util.hf_generate(model, np.asarray(ids)[None], max_new_tokens=max_new_tokens)[0]
    return tokenizer.decode(new, skip_special_tokens=True)


def test_chat_matches_transformers(hubzoo_bin, smollm2_path):
    """`hubzoo chat`, one shot and interactive over two turns (with a /reset between
    conversations), prints exactly what transformers' greedy chat turns decode to."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(smollm2_path)
    model = _util.tiny_models.load_hf(smollm2_path)
    n = 24
    system = "You are terse."
    one = _hf_chat_turn(model, tokenizer, [{"role": "user", "content": "Name a fruit."}], n)
    proc = _util.run_cli("chat", "-m", str(smollm2_path), "--message", "Name a fruit.",
                         "--max-new-tokens", str(n))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == one + "\n"

    history = [{"role": "system", "content": system}]
    expected = []
    for question in ("What is 2+2?", "And times 3?"):
        history.append({"role": "user", "content": question})
        answer = _hf_chat_turn(model, tokenizer, history, n)
        history.append({"role": "assistant", "content": answer})
        expected.append(answer)
    fresh = _hf_chat_turn(model, tokenizer, [{"role": "system", "content": system},
                                             {"role": "user", "content": "Hi"}], n)
    proc = subprocess.run(
        [str(hubzoo_bin), "chat", "-m", str(smollm2_path), "--system", system,
         "--max-new-tokens", str(n)],
        input="What is 2+2?\nAnd times 3?\n/reset\nHi\n", capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "".join(a + "\n" for a in expected + [fresh])


def test_chat_errors(hubzoo_bin, tiny_paths, smollm2_path):
    # A checkpoint without a chat template is refused with a message naming what is missing.
    proc = _util.run_cli("chat", "-m", str(tiny_paths["llama_tied_llama3"]), "--message", "hi")
    _util.assert_cli_error(proc, "tokenizer.json")
    # Invalid UTF-8 in an interactive turn is reported; the session goes on.
    proc = subprocess.run(
        [str(hubzoo_bin), "chat", "-m", str(smollm2_path), "--max-new-tokens", "4"],
        input=b"\xff\xfe bad\nName a fruit.\n", capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert b"utf-8" in proc.stderr.lower()
    assert proc.stdout.strip()


def test_number_option_errors():
    # A bad number is refused before anything loads, with what the option wants
    # (CLI11's own check printed a 300-digit range and called 0 "not in range 0 to ...").
    proc = _util.run_cli("bench", "-m", "unused", "--repeats", "0")
    _util.assert_cli_error(proc, "--repeats", "must be positive, got 0")
    proc = _util.run_cli("generate", "-m", "unused", "--prompt", "x", "--temperature", "-1")
    _util.assert_cli_error(proc, "--temperature", "must be zero or more, got -1")
    proc = _util.run_cli("embed", "-m", "unused", "--batch-size", "abc")
    _util.assert_cli_error(proc, "--batch-size", "'abc' is not a number")
    for args in (("serve", "-m", "unused", "--max-concurrency", "0"),
                 ("rerank", "-m", "unused", "-q", "x", "doc", "--top-n", "-2")):
        line = _util.assert_cli_error(_util.run_cli(*args), args[-2], "got " + args[-1])
        assert "range" not in line
