"""build/hubzoo generate / inspect on a tiny model and SmolLM2, against transformers greedy."""

from __future__ import annotations

import json

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
