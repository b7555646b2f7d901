"""Mistral, Phi-3 and SmolLM3 beyond the shared ladder (test_decoder_parity.py and test_bf16.py
run their tiny variants on every rung): inputs many sliding windows long on the ring-buffer
cache, Phi-3's longrope switching to its long factors as transformers does, SmolLM3's layers
without RoPE, and bad configs.

Phi-3's longrope, as transformers 5.23 computes it: a forward over positions whose largest
is past original_max_position_embeddings (seq_len = max(position_ids) + 1 > original) uses
the long factors at every position, otherwise the short ones; and generate() drops the
cache the first time a sequence grows past it, so every position is recomputed long
(Phi3ForCausalLM.prepare_inputs_for_generation). hubzoo replays such a slot from its token
ids in the step that crosses (models/decoder_steps.h).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import _util
from _util import hf_forward, hf_generate, random_prompt

WINDOWED = ["mistral_window", "phi3_longrope", "smollm3_norope"]
PHI3 = "phi3_longrope"
FLOAT = 4  # bytes: the cache stores float32
PAGE = 16  # positions per KV-cache page (layers/kv_cache.h)


def pages_held(length: int, win: int) -> int:
    """Pages a layer holds at `length` positions: those of its last `win` (0: all)."""
    first = max(0, length - win) // PAGE if win else 0
    return -(-length // PAGE) - first


def window(hf) -> int:
    return hf.config.sliding_window


def original(hf) -> int:
    return hf.config.rope_parameters["original_max_position_embeddings"]


# --- sliding windows: the ring buffer ---------------------------------------------------------


@pytest.mark.parametrize("variant", WINDOWED)
def test_long_input_past_the_window(variant, hf_tiny, our_tiny):
    """10+ windows: full forward and token-by-token cached decoding against transformers,
    cached bit-identical to full."""
    hf, ours = hf_tiny(variant), our_tiny(variant)
    w = window(hf)
    assert w < 64  # the ladder's long inputs and greedy runs cross it
    ids = random_prompt(hf.config.vocab_size, 10 * w + 3, seed=5)[None]
    ref, _ = hf_forward(hf, ids, capture=False)
    full = ours.forward(ids)
    err = _util.record_error(f"tiny/{variant}", f"long({ids.shape[1]})/logits", full, ref)
    assert err <= 1e-3, f"max abs logit error {err}"
    _util.assert_argmax_equal(full, ref)
    # Past the window on both sides (Phi-3: the prefill already crosses original 64).
    for prefill in (w - 1, 3 * w + 2) if variant != PHI3 else (original(hf) + 1, 3 * w + 2):
        inc = ours.forward_incremental(ids, prefill)
        np.testing.assert_array_equal(inc, full, err_msg=f"prefill {prefill}: cached != full")


@pytest.mark.parametrize("variant", ["mistral_window", "smollm3_norope"])
def test_int8_mode_past_the_window(variant, hf_tiny, hz, tiny_paths):
    """The int8 mode's half KV cache on the ring buffer: a chunk past the window attends to
    its fresh keys and values and to cached ones, so both must be the same half values
    (Numerics::round_kv) for cached decoding to stay bit-identical to the full forward."""
    w = window(hf_tiny(variant))
    ours = hz.CausalLM.from_pretrained(str(tiny_paths[variant]), quantize="q8_0", mode="int8")
    ids = random_prompt(ours.info["vocab_size"], 6 * w + 3, seed=9)[None]
    full = ours.forward(ids)
    for prefill in (w - 1, 3 * w + 2):
        inc = ours.forward_incremental(ids, prefill)
        np.testing.assert_array_equal(inc, full, err_msg=f"prefill {prefill}: cached != full")


@pytest.mark.parametrize("variant", WINDOWED)
def test_sliding_cache_stops_at_the_window(variant, hf_tiny, our_tiny):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    w = window(hf)
    types = getattr(hf.config, "layer_types", None) or ["sliding_attention"] * hf.config.num_hidden_layers
    attn = hf.model.layers[0].self_attn
    row = hf.config.num_key_value_heads * attn.head_dim
    for length in (w - 3, w + 1, 6 * w + 3):
        ids = random_prompt(hf.config.vocab_size, length, seed=length)[None]
        ours.forward_incremental(ids, 1)
        stats = ours.kv_cache_stats()
        assert stats["windows"] == [w if t == "sliding_attention" else 0 for t in types]
        for i, t in enumerate(types):
            held = stats["layer_slot_bytes"][i][0]
            win = w if t == "sliding_attention" else 0  # whole pages, a window's at most
            assert held == pages_held(length, win) * 2 * PAGE * row * FLOAT, (i, length, held)


def test_mistral_generation_past_the_window(hf_tiny, our_tiny):
    hf, ours = hf_tiny("mistral_window"), our_tiny("mistral_window")
    ids = random_prompt(hf.config.vocab_size, 5, seed=7)[None]
    ref = hf_generate(hf, ids, max_new_tokens=6 * window(hf))
    assert ref.shape[1] > 2 * window(hf), "EOS came too early for this test to cross the window"
    assert ours.generate(ids, max_new_tokens=6 * window(hf)).tolist() == ref.tolist()


# --- Phi-3 longrope ---------------------------------------------------------------------------


def test_phi3_long_factors_start_past_original(hf_tiny, our_tiny):
    """original positions take the short factors, original + 1 the long ones everywhere."""
    hf, ours = hf_tiny(PHI3), our_tiny(PHI3)
    n = original(hf)
    ids = random_prompt(hf.config.vocab_size, n + 1, seed=11)[None]
    short_ref, _ = hf_forward(hf, ids[:, :n], capture=False)
    long_ref, _ = hf_forward(hf, ids, capture=False)
    short, long = ours.forward(ids[:, :n]), ours.forward(ids)
    # The factors differ: the first n rows move when one more token is added.
    assert np.max(np.abs(long_ref[:, :n] - short_ref)) > 1e-2
    for got, ref in ((short, short_ref), (long, long_ref)):
        assert np.max(np.abs(got - ref)) <= 1e-3
        _util.assert_argmax_equal(got, ref)


def test_phi3_cached_decode_switches_as_transformers_generates(hf_tiny, our_tiny):
    """Decoding from a short prefill: rows before the switch are the short model's, and from
    the first row past original on every row equals the full (long) forward: the crossing
    step recomputed the cache with the long factors."""
    hf, ours = hf_tiny(PHI3), our_tiny(PHI3)
    n = original(hf)
    ids = random_prompt(hf.config.vocab_size, n + 40, seed=12)[None]
    full = ours.forward(ids)
    short = ours.forward(ids[:, :n])
    for prefill in (1, 20, n):
        inc = ours.forward_incremental(ids, prefill)
        np.testing.assert_allclose(inc[:, :n], short, rtol=0, atol=1e-4, err_msg=f"prefill {prefill}")
        np.testing.assert_allclose(inc[:, n:], full[:, n:], rtol=0, atol=1e-4, err_msg=f"prefill {prefill}")
        _util.assert_argmax_equal(inc[:, n:], full[:, n:])
    # A prefill that itself crosses needs no replay: every row is the full forward's.
    np.testing.assert_array_equal(ours.forward_incremental(ids, n + 5), full)
    # Without the replay (transformers' forward continuing a short cache, no generate())
    # the rows past the switch read keys rotated by the short factors: far from the above.
    import torch

    with torch.no_grad():
        t = torch.as_tensor(ids)
        past = hf(t[:, :n], use_cache=True).past_key_values
        stale = hf(t[:, n:], past_key_values=past, use_cache=True).logits.numpy()
    assert np.max(np.abs(stale - full[:, n:])) > 1e-2


def test_phi3_generation_across_original(hf_tiny, our_tiny):
    """transformers' generate() recomputes its cache when the sequence first passes original."""
    hf, ours = hf_tiny(PHI3), our_tiny(PHI3)
    n = original(hf)
    for length in (n - 30, n - 1, n):
        ids = random_prompt(hf.config.vocab_size, length, seed=length)[None]
        ref = hf_generate(hf, ids, max_new_tokens=40)
        assert length + ref.shape[1] > n + 1, "EOS came before the switch"
        got = ours.generate(ids, max_new_tokens=40)
        assert got.tolist() == ref.tolist(), f"prompt of {length}"


def test_phi3_batch_rows_switch_alone(hf_tiny, our_tiny):
    """In a batch, each sequence switches when it crosses, bit for bit as alone."""
    hf, ours = hf_tiny(PHI3), our_tiny(PHI3)
    n = original(hf)
    prompts = [random_prompt(hf.config.vocab_size, k, seed=k) for k in (n + 20, n - 10, 30)]
    ids, mask = _util.left_pad(prompts, _util.tiny_models.SPECIAL_TOKENS["pad_token_id"])
    batched = ours.forward_incremental(ids, 25, attention_mask=mask)
    for row, p in enumerate(prompts):
        pad = ids.shape[1] - len(p)
        alone = ours.forward_incremental(p[None], max(1, 25 - pad))
        np.testing.assert_array_equal(batched[row, pad:], alone[0], err_msg=f"prompt {row}")


# --- SmolLM3 ----------------------------------------------------------------------------------


def test_smollm3_layer_without_rope(hf_tiny, our_tiny, tmp_path):
    """Layer 1 applies no RoPE: ours equals transformers layer by layer, and the same
    weights with RoPE on every layer (what ignoring no_rope_layers would compute) differ
    from layer 1 on."""
    hf, ours = hf_tiny("smollm3_norope"), our_tiny("smollm3_norope")
    assert list(hf.config.no_rope_layers) == [1, 0, 1]
    ids = random_prompt(hf.config.vocab_size, 41, seed=3)[None]
    names = _util.capture_names(hf.config.num_hidden_layers)
    _, ref = hf_forward(hf, ids)
    _, got = ours.forward(ids, capture=names)
    for name in names[:-1]:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-4, err_msg=name)
    all_rope = _util.tiny_models.build("smollm3_norope", tmp_path / "all_rope", no_rope_layers=[1, 1, 1])
    _, rotated = hf_forward(_util.tiny_models.load_hf(all_rope), ids)
    np.testing.assert_allclose(rotated["layers.0"], ref["layers.0"], rtol=1e-5, atol=1e-5)
    assert np.max(np.abs(rotated["layers.1.self_attn"] - got["layers.1.self_attn"])) > 1e-2


# --- bad configs ------------------------------------------------------------------------------

BAD_CONFIGS = [
    ("mistral_window", {"sliding_window": 0}, "sliding_window"),
    ("mistral_window", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "longrope"),
    ("mistral_window", {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    (PHI3, {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}}, "dynamic"),
    (PHI3, {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 5,
                                "long_factor": [1.0] * 6}}, "short_factor"),
    (PHI3, {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 6,
                                "long_factor": [1.0, 2.0, 0.0, 1.0, 1.0, 1.0]}}, "long_factor"),
    (PHI3, {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 6}},
     "long_factor"),
    (PHI3, {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.7}},
     "partial_rotary_factor"),
    (PHI3, {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "beta_fast": 3}}, "beta_fast"),
    (PHI3, {"sliding_window": -1}, "sliding_window"),
    ("smollm3_norope", {"no_rope_layers": [1, 0]}, "no_rope_layers"),
    ("smollm3_norope", {"no_rope_layers": [1, 2, 1]}, "no_rope_layers"),
    ("smollm3_norope", {"layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
    ("smollm3_norope", {"layer_types": ["full_attention", "chunked_attention", "full_attention"]},
     "chunked_attention"),
    ("smollm3_norope", {"sliding_window": None}, "sliding_window"),
]


def _rewrite(src, dst, edit):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


@pytest.mark.parametrize("variant,fields,named", BAD_CONFIGS)
def test_bad_config_is_a_config_error(variant, fields, named, hz, tiny_paths, tmp_path):
    def edit(c):
        for key, value in fields.items():
            if value is None:
                c.pop(key, None)
            else:
                c[key] = value

    path = _rewrite(tiny_paths[variant], tmp_path / "bad", edit)
    with pytest.raises(hz.ConfigError, match=named):
        hz.CausalLM.from_pretrained(str(path))


@pytest.mark.parametrize("tensor", ["self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"])
def test_phi3_missing_fused_tensor_is_named(tensor, hz, tiny_paths, tmp_path):
    from safetensors.numpy import load_file, save_file

    path = tmp_path / "phi3"
    shutil.copytree(tiny_paths[PHI3], path)
    tensors = load_file(path / "model.safetensors")
    name = f"model.layers.1.{tensor}"
    del tensors[name]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(hz.TensorMappingError, match=name.replace(".", r"\.")):
        hz.CausalLM.from_pretrained(str(path))
