"""Whole tiny models stored in the Hub's quantized formats, run by hubzoo, against transformers
running the same model with every quantized linear's weight replaced by the format's own
dequantization (the reference of docs/architecture.md "The Hub's quantized safetensors"):
the fp32 ladder (per-layer rtol/atol 1e-4, logits atol 1e-3 and equal argmax, greedy
tokens, cached decode, batch invariance bit for bit).

Needs the decoder to load quantized linears through layers/hub_quant.h (WeightLoader
wiring). The checkpoints and references are those of test_hub_quant.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import _util
import test_hub_quant as hq

PROMPT_LEN = 24

CASES = {
    "ct_int4_g32_asym": ("ct", ("pack-quantized", 4, "group", 32, False)),
    "ct_int4_g128_sym": ("ct", ("pack-quantized", 4, "group", 128, True)),
    "ct_int8_channel": ("ct", ("int-quantized", 8, "channel", None, True)),
    "gptq_g32_sym": ("gptq", (32, False, True)),
    "gptq_g64_desc_act_asym": ("gptq", (64, True, False)),
    "gptq_per_channel_desc_act": ("gptq", (-1, True, False)),
    "awq_g64": ("awq", (64,)),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _util.tiny_models.build("llama_tied_llama3", tmp_path_factory.mktemp("hqm") / "base", **hq.TINY)


@pytest.fixture(scope="module")
def quantized(base, tmp_path_factory):
    """case -> (checkpoint dir, {linear prefix: reference fp32 weight [n, k]})."""
    cache = {}

    def get(case):
        if case in cache:
            return cache[case]
        kind, args = CASES[case]
        path = tmp_path_factory.mktemp("hqm") / case
        if kind == "ct":
            hq.ct_checkpoint(base, path, *args)
            refs = {p: hq.ct_reference(path, p) for p in hq.LINEARS}
        elif kind == "gptq":
            group_size, desc_act, sym = args
            qc = {"quant_method": "gptq", "bits": 4, "group_size": group_size, "desc_act": desc_act, "sym": sym}
            packed = hq.write_quantized(
                base, path, qc, lambda w, i: hq.gptq_pack_linear(w, group_size, desc_act, sym, v1=True, seed=hq.INPUT_OF[i]))
            refs = {p: hq.gptq_reference(t, v1=True) for p, t in packed.items()}
        else:
            (group_size,) = args
            qc = {"quant_method": "awq", "bits": 4, "group_size": group_size, "version": "gemm", "zero_point": True}
            packed = hq.write_quantized(base, path, qc, lambda w, i: hq.awq_pack_linear(w, group_size))
            refs = {p: hq.awq_reference(t, group_size) for p, t in packed.items()}
        cache[case] = (path, refs)
        return cache[case]

    return get


def reference_model(base, refs):
    """transformers' fp32 model of `base` with each quantized linear's weight dequantized."""
    model = _util.tiny_models.load_hf(base)
    with torch.no_grad():
        for prefix, weight in refs.items():
            model.get_submodule(prefix).weight.copy_(weight.float())
    return model


@pytest.mark.parametrize("case", list(CASES))
def test_quantized_model_climbs_the_fp32_ladder(hz, base, quantized, case):
    path, refs = quantized(case)
    hf = reference_model(base, refs)
    ours = hz.CausalLM.from_pretrained(str(path), dtype="float32")
    vocab = hf.config.vocab_size
    ids = _util.random_prompt(vocab, PROMPT_LEN, seed=3)[None]

    _, ref = _util.hf_forward(hf, ids)
    names = _util.capture_names(hf.config.num_hidden_layers)
    logits, got = ours.forward(ids, capture=names)
    failures = []
    for name in names:
        _util.record_error(f"hub_quant/{case}", name, got[name], ref[name])
        if name != "logits":
            failure = _util.allclose_failure(name, got[name], ref[name], rtol=1e-4, atol=1e-4)
            if failure:
                failures.append(failure)
    assert not failures, "\n".join(failures)
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=1e-3)
    _util.assert_argmax_equal(logits, ref["logits"])

    # Greedy tokens equal transformers'.
    assert ours.generate(ids, max_new_tokens=16).tolist() == _util.hf_generate(hf, ids, max_new_tokens=16).tolist()

    check_cached_decode_and_batch_invariance(ours, ids, vocab)


def check_cached_decode_and_batch_invariance(model, ids, vocab):
    """Cached decode equals the full forward; a row's logits do not depend on what it is
    batched with, bit for bit."""
    full = model.forward(ids)
    inc = model.forward_incremental(ids, 9)
    assert float(np.max(np.abs(inc - full))) <= 1e-4
    _util.assert_argmax_equal(inc, full)
    other = _util.random_prompt(vocab, PROMPT_LEN, seed=4)[None]
    batched = model.forward(np.concatenate([ids, other]))
    np.testing.assert_array_equal(batched[0], model.forward(ids)[0])


@pytest.mark.parametrize("case", ["ct_int4_g32_asym", "gptq_g64_desc_act_asym", "awq_g64"])
def test_dequantize_on_load(hz, base, quantized, case):
    """quantize="dequantize": each quantized linear dense in fp32 (GPTQ's act-order
    permutation undone), on the same per-layer 1e-4 ladder against the format's own
    dequantization; nothing stays quantized."""
    path, refs = quantized(case)
    hf = reference_model(base, refs)
    ours = hz.CausalLM.from_pretrained(str(path), quantize="dequantize")
    assert ours.info["quantized_matrices"] == 0
    ids = _util.random_prompt(hf.config.vocab_size, PROMPT_LEN, seed=3)[None]
    _, ref = _util.hf_forward(hf, ids)
    names = _util.capture_names(hf.config.num_hidden_layers)
    logits, got = ours.forward(ids, capture=names)
    failures = [f for name in names if name != "logits"
                for f in [_util.allclose_failure(name, got[name], ref[name], rtol=1e-4, atol=1e-4)] if f]
    assert not failures, "\n".join(failures)
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=1e-3)
    _util.assert_argmax_equal(logits, ref["logits"])


@pytest.mark.parametrize("case", ["ct_int4_g32_asym", "ct_int8_channel", "gptq_g64_desc_act_asym",
                                  "awq_g64"])
def test_int8_mode(hz, base, quantized, case):
    """mode="int8" (int8 activations) on the Hub's formats: every quantized linear kept as
    panels where the CPU's int8 kernels read Q4_G / Q8_G panels (AVX2 and every AVX-512
    target), else none;
    cached decode equals the full forward; a prompt's logits are bit-identical alone and
    batched; and the error against the format's own dequantization is bounded as the GGUF
    types' is (test_gguf_models.py: logits within 5% of their scale, the same top-1 token
    at 90% of 96 positions or more)."""
    path, refs = quantized(case)
    hf = reference_model(base, refs)
    model = hz.CausalLM.from_pretrained(str(path), mode="int8")
    qtype = "Q8_G" if case == "ct_int8_channel" else "Q4_G"
    # q/k/v and gate/up each one matrix of parts: four matrices, seven parts.
    assert model.info["quantized_matrices"] == 4, model.info
    target = hz._hubzoo.quant.target()
    panels = target == "AVX2" or target.startswith("AVX3")
    assert hz._hubzoo.quant.reads_panels(qtype) == panels
    assert model.info["panel_matrices"] == (len(hq.LINEARS) if panels else 0), model.info
    assert hz.CausalLM.from_pretrained(str(path)).info["panel_matrices"] == 0

    vocab = hf.config.vocab_size
    prompt = _util.random_prompt(vocab, 96, seed=3)
    ours = model.forward(prompt[None])
    ref, _ = _util.hf_forward(hf, prompt[None], capture=False)
    _util.record_error(f"hub_quant/{case}-int8", "logits", ours, ref)
    scale = float(np.abs(ref).max())
    err = float(np.abs(ours - ref).max())
    assert err <= 0.05 * scale, f"int8 logits off by {err} (scale {scale})"
    agree = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    assert agree >= 0.9, f"top-1 agreement {agree}"

    check_cached_decode_and_batch_invariance(model, prompt[None, :PROMPT_LEN], vocab)
