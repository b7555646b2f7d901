"""--quantize / quantize=: an fp32 checkpoint quantized at load (issue 16).

The reference is transformers' own model with every matrix hubzoo quantizes (each linear
weight and the embedding table) replaced by its quantize -> dequantize round trip computed
by gguf-py (its quantizer for Q8_0/Q4_0, whose bytes hubzoo's must equal; for the K types,
whose bytes test_quant_llama_ref.py holds against llama.cpp's, gguf-py dequantizes hubzoo's
blocks). hubzoo must then match that model at the fp32 tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest

import _gguf_models as gm
import _util
from _util import allclose_failure, assert_argmax_equal, capture_names, hf_forward

PROMPT = np.array([1, 17, 254, 33, 90, 5, 299, 128, 64, 3, 200, 41], dtype=np.int64)


def _round_trip(w: np.ndarray, qtype: str) -> np.ndarray:
    import gguf

    from hubzoo import _hubzoo

    t = gguf.GGMLQuantizationType[qtype]
    ours = np.stack([np.asarray(_hubzoo.quant.quantize(qtype, r), dtype=np.uint8) for r in w])
    try:
        theirs = gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), t)
        assert np.array_equal(ours, theirs), f"{qtype} blocks differ from gguf-py's quantizer"
    except NotImplementedError:
        pass
    return gguf.quants.dequantize(ours, t).reshape(w.shape)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = gm.build_hf("llama", tied=False, seed=3)
    path = tmp_path_factory.mktemp("quantize") / "llama"
    model.save_pretrained(path)
    return path, model


def _check_against_round_trip(hz, checkpoint, quantize, type_of):
    """hubzoo with quantize= against transformers with each matrix's round trip in type_of(name)."""
    import torch

    path, hf = checkpoint
    ref = gm.build_hf("llama", tied=False, seed=3)
    ref.load_state_dict(hf.state_dict())
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if p.ndim == 2:  # every linear weight, the embedding table and lm_head
                p.copy_(torch.from_numpy(_round_trip(p.numpy(), type_of(name))))
    model = hz.CausalLM.from_pretrained(path, quantize=quantize)
    # embed, lm_head; per layer q/k/v (fused), o, gate/up (fused), down
    assert model.info["quantized_matrices"] == 2 + 4 * gm.LAYERS
    names = capture_names(gm.LAYERS)
    logits, got = model.forward(PROMPT[None], capture=names)
    ref_logits, ref_captured = hf_forward(ref, PROMPT[None])
    failures = [f for n in names
                if (f := allclose_failure(n, got[n][0], ref_captured[n][0], 1e-4, 1e-4))]
    assert not failures, "\n".join(failures)
    assert_argmax_equal(logits, ref_logits)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k", "q5_k", "q6_k"])
def test_quantize_on_load_matches_round_trip(hz, checkpoint, qtype):
    _check_against_round_trip(hz, checkpoint, qtype, lambda name: qtype.upper())


def _llama_quantize_mix(base: str, name: str) -> str:
    """llama-quantize's Q4_K_M / Q5_K_M type for this tiny untied model (every row whole
    256-blocks): lm_head Q6_K; v_proj and down_proj of use_more_bits layers Q6_K (of 2
    layers: layer 1); everything else, the embedding included, the base type."""
    n = gm.LAYERS
    more = lambda i: i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2  # noqa: E731
    if name == "lm_head.weight":
        return "Q6_K"
    if (".v_proj." in name or ".down_proj." in name) and more(int(name.split(".")[2])):
        return "Q6_K"
    return base


@pytest.mark.parametrize("mix", ["q4_k_m", "q5_k_m"])
def test_quantize_mix_on_load_matches_round_trip(hz, checkpoint, mix):
    base = mix[:4].upper()
    assert _llama_quantize_mix(base, "model.layers.1.mlp.down_proj.weight") == "Q6_K"
    _check_against_round_trip(hz, checkpoint, mix, lambda name: _llama_quantize_mix(base, name))


def test_quantize_rejects_unknown_type(hz, checkpoint):
    path, _ = checkpoint
    with pytest.raises(Exception, match="q9_9"):
        hz.CausalLM.from_pretrained(path, quantize="q9_9")
    with pytest.raises(Exception, match="no quantizer for Q3_K"):
        hz.CausalLM.from_pretrained(path, quantize="q3_k")


def test_quantize_cli(hubzoo_bin, checkpoint):
    """The CLI flag reaches the loader: inspect reports the quantized matrices."""
    import json

    path, _ = checkpoint
    proc = _util.run_cli("inspect", "-m", str(path), "--quantize", "q8_0")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["quantize"] == "Q8_0" and info["quantized_matrices"] > 0
    proc = _util.run_cli("inspect", "-m", str(path), "--quantize", "q4_k_m")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["quantize"] == "Q4_K_M"
    proc = _util.run_cli("inspect", "-m", str(path), "--mode", "int8")
    assert proc.returncode != 0 and "int8" in proc.stderr


def test_quantize_on_load_cache(hz, checkpoint, tmp_path, monkeypatch):
    """quantize= stores each matrix's blocks in the quantize-on-load cache
    ($HUBZOO_QUANT_CACHE, io/quant_cache.h); the next load of the same weights reads
    them back and quantizes nothing; both give the logits a load without a cache
    gives, bit for bit, in the exact and the int8 mode."""
    path, _ = checkpoint
    cache = tmp_path / "quantized"
    prompt = PROMPT[None]
    monkeypatch.setenv("HUBZOO_QUANT_CACHE", "off")
    plain = {
        m: hz.CausalLM.from_pretrained(path, quantize="q4_k_m", mode=m) for m in ("fused", "int8")
    }
    assert plain["int8"].info["quant_cache_hits"] == plain["int8"].info["quant_cache_stores"] == 0
    monkeypatch.setenv("HUBZOO_QUANT_CACHE", str(cache))
    first = hz.CausalLM.from_pretrained(path, quantize="q4_k_m", mode="fused")
    stored = first.info["quant_cache_stores"]
    assert stored >= first.info["quantized_matrices"] > 0 and first.info["quant_cache_hits"] == 0
    assert sorted(p.suffix for p in cache.iterdir()) == [".hzq"] * stored
    for mode in ("fused", "int8"):
        again = hz.CausalLM.from_pretrained(path, quantize="q4_k_m", mode=mode)
        assert (again.info["quant_cache_hits"], again.info["quant_cache_stores"]) == (stored, 0)
        assert np.array_equal(again.forward(prompt), plain[mode].forward(prompt)), mode
    assert np.array_equal(first.forward(prompt), plain["fused"].forward(prompt))


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k"])
def test_quantize_on_load_int8_mode_keeps_panels(hz, checkpoint, qtype):
    """mode="int8" on blocks quantized at load keeps them as panels where the CPU's int8
    kernels read them, as a GGUF's blocks are (without, every decode step re-decoded
    every block: SmolLM2 --quantize q4_0 decoded 28 tok/s, with panels 222-243),
    and its logits stay within the int8 mode's error of the exact mode's on the same
    blocks."""
    path, _ = checkpoint
    exact = hz.CausalLM.from_pretrained(path, quantize=qtype)
    int8 = hz.CausalLM.from_pretrained(path, quantize=qtype, mode="int8")
    assert exact.info["panel_matrices"] == 0
    # q, k, v, o and the MLP's three per layer, and lm_head; the untied embedding is only
    # looked up.
    panels = hz._hubzoo.quant.reads_panels(qtype.upper())
    assert int8.info["panel_matrices"] == (7 * gm.LAYERS + 1 if panels else 0)
    prompt = np.tile(PROMPT, 8)
    ref = exact.forward(prompt[None])
    ours = int8.forward(prompt[None])
    scale = float(np.abs(ref).max())
    assert float(np.abs(ours - ref).max()) <= 0.05 * scale
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


def test_quantize_counts_a_fused_matrix_once(hz):
    """SmolLM2's 576 columns are no whole number of Q4_K's 256-blocks: a single type leaves
    those matrices as floats, and only the 30 down_proj (1536 columns) are quantized; a
    fused q/k/v or gate/up whose parts stay floats counts as none (the count once went
    negative there). The q4_k_m mix falls back to Q5_0/Q8_0 and quantizes every one: per
    layer q/k/v, o, gate/up, down, and the tied embedding."""
    single = hz.CausalLM.from_pretrained(_util.SMOLLM2, quantize="q4_k").info
    assert single["quantized_matrices"] == 30, single["quantized_matrices"]
    mix = hz.CausalLM.from_pretrained(_util.SMOLLM2, quantize="q4_k_m").info
    assert mix["quantized_matrices"] == 4 * 30 + 1, mix["quantized_matrices"]
