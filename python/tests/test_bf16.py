"""The bf16 rungs of the ladder (docs/design.md) on every tiny model and SmolLM2, in
every bf16 mode, against transformers' eager fp32 and bf16 on the same inputs:

- error ratio RMS(ours_bf16 - HF_fp32) / RMS(HF_bf16 - HF_fp32) <= 1.15 eager, <= 1.0 fused
  and bf16dot (fused with matmul inputs rounded to bf16 for the CPU's bf16 dot products),
  on the short and the long (512-token) input;
- HF fp32's top-1 inside our bf16 top-5 at every position (sparse MoE models: at every
  position whose routing is confident in every sparse layer, see below; the excluded
  positions are counted and printed with -s);
- mean KL(HF_fp32 || ours) no worse than HF bf16's own in fused mode; in eager mode, which
  reproduces transformers' bf16 roundings and so sits at HF bf16's own error give or take
  accumulation-order noise (measured: eager vs HF bf16 differ by <0.1% of HF's error on
  the tiny Llama, e.g. KL 2.09e-5 vs 2.08e-5), within the eager RMS bound carried over to
  KL, which grows with the square of the logit error: KL <= 1.15^2 x HF bf16's;
- on the long input, our argmax equals HF fp32's wherever fp32's top-1/top-2 margin
  exceeds 8 sigma (sigma = RMS of HF bf16 vs fp32 logits; for sparse MoE, over the tokens
  whose routing is confident in every sparse layer), for the full forward and for cached
  decoding;
- sparse MoE models (hubzoo.verify.routing): wherever HF fp32's routing is confident (the
  gap between its k-th and (k+1)-th router logits > 8 sigma_r, sigma_r = RMS of HF bf16 vs
  fp32 router logits, the token confident in every earlier sparse layer), our selected
  experts equal HF fp32's, full forward and cached decode; the margin rule above applies
  at tokens confident in every sparse layer, and the excluded tokens are counted (printed
  with -s; dense models exclude none);
- batch invariance in bf16: a prompt alone and inside a padded batch, bit-identical.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import _util
from hubzoo.verify import inputs as verify_inputs
from hubzoo.verify import metrics, reference, routing

MODES = ("eager", "fused", "bf16dot")
RATIO_BOUND = {"eager": 1.15, "fused": 1.0, "bf16dot": 1.0}
KL_BOUND = {mode: bound**2 for mode, bound in RATIO_BOUND.items()}  # KL ~ (logit error)^2
MARGIN_SIGMAS = 8.0
MINILM = _util.REPO / "models" / "all-MiniLM-L6-v2"
MODELS = list(_util.tiny_models.VARIANTS) + ["smollm2"]


def _snapshot(model, tiny_paths):
    return _util.SMOLLM2 if model == "smollm2" else tiny_paths[model]


@pytest.fixture(scope="module")
def references(tiny_paths):
    """model -> {input name: (ids, HF fp32 logits, HF bf16 logits, routing confidence)}, computed once."""
    cache = {}

    def get(model):
        if model not in cache:
            path = _snapshot(model, tiny_paths)
            config = json.loads((path / "config.json").read_text())
            built, _ = verify_inputs.build(str(path), config, long_tokens=512)
            hf32 = _util.tiny_models.load_hf(path)
            hf16 = _util.tiny_models.load_hf(path, dtype="bfloat16")
            out = {}
            for name, inp in built.items():
                r32, cap32 = reference.forward(hf32, inp.ids)
                r16, cap16 = reference.forward(hf16, inp.ids)
                out[name] = (inp.ids, r32, r16, routing.confidence(cap32, cap16, MARGIN_SIGMAS))
            cache[model] = out
        return cache[model]

    return get


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
def test_bf16_ladder(hz, tiny_paths, references, model, mode):
    ours = hz.CausalLM.from_pretrained(str(_snapshot(model, tiny_paths)), dtype="bfloat16",
                                       mode=mode)
    for name, (ids, r32, r16, conf) in references(model).items():
        where = f"{model} {mode} {name} ({len(ids)} tokens)"
        route_names = routing.router_names(conf["layers"])
        o, captured = ours.forward(ids[None], capture=route_names)
        o = o[0]
        captured = {k: v[0] for k, v in captured.items()}
        sigma = metrics.rms(r16 - r32)
        ratio = metrics.rms(o - r32) / sigma
        assert ratio <= RATIO_BOUND[mode], f"{where}: bf16 error ratio {ratio:.3f}"
        top = metrics.top1(r32)
        in_top5 = metrics.top_k_contains(o, top, k=5)
        if conf["layers"]:
            excluded = ~conf["tokens"]
            print(f"\n{where}: top-5 rung at {int(conf['tokens'].sum())}/{len(ids)} positions; "
                  f"{int(excluded.sum())} excluded for near-tie routing, "
                  f"{int((excluded & ~in_top5).sum())} of them outside our top-5")
        missing = np.nonzero(~in_top5 & conf["tokens"])[0]  # every position for a dense model
        assert missing.size == 0, f"{where}: HF fp32 top-1 outside our top-5 at {missing[:10]}"
        kl_ours, kl_hf = metrics.kl_per_token(r32, o).mean(), metrics.kl_per_token(r32, r16).mean()
        assert kl_ours <= KL_BOUND[mode] * kl_hf, \
            f"{where}: mean KL {kl_ours:.3g} > {KL_BOUND[mode]:.3g} x HF bf16's {kl_hf:.3g}"
        if name != "long":
            continue
        # Routing flips are not rounding noise: the margin's sigma leaves out the tokens
        # excluded for near-tie routing (routing.margin_sigma; = sigma for a dense model).
        by_margin = metrics.top2_margin(r32) > MARGIN_SIGMAS * routing.margin_sigma(r32, r16, conf, sigma)
        assert by_margin.sum() > len(ids) // 4, f"{where}: too few decided positions to test"
        decided = by_margin & conf["tokens"]  # all of by_margin for a dense model
        half = len(ids) // 2
        cached, cached_captured = ours.forward_incremental(ids[None], prefill_len=half, capture=route_names)
        cached = cached[0]
        cached_captured = {k: v[0] for k, v in cached_captured.items()}
        excluded = int((~conf["tokens"]).sum())
        print(f"\n{where}: routing confident at {sum(int(c['confident'].sum()) for c in conf['layers'].values())}"
              f"/{len(ids) * len(conf['layers'])} (token, sparse layer) pairs; {excluded} tokens "
              f"({excluded / len(ids):.0%}) excluded for near-tie routing, {int((by_margin & ~decided).sum())} "
              f"of {int(by_margin.sum())} with margin > {MARGIN_SIGMAS:g} sigma")
        if conf["layers"]:
            assert decided.sum() > len(ids) // 8, f"{where}: too few decided positions left after routing"
        for what, logits, cap, positions in (("full forward", o, captured, None),
                                             ("cached decode", cached, cached_captured, None)):
            kept = routing.kept(cap, conf, positions)
            assert kept["kept"] == kept["pairs"], \
                f"{where} {what}: confident routing lost at (token, layer) {kept['lost']} of {kept['pairs']}"
            wrong = np.nonzero(decided & (logits.argmax(-1) != top))[0]
            assert wrong.size == 0, f"{where} {what}: 8-sigma decisions lost at {wrong[:10]}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", ["qwen3_headdim_mqa", "qwen2_untied_bias"])
def test_bf16_batch_invariance(hz, tiny_paths, model, mode):
    ours = hz.CausalLM.from_pretrained(str(tiny_paths[model]), dtype="bfloat16", mode=mode)
    prompts = [_util.random_prompt(ours.vocab_size, n, seed=n) for n in (9, 23, 4)]
    ids, mask = _util.left_pad(prompts, pad_id=0)
    batched = ours.forward(ids, attention_mask=mask)
    for row, prompt in enumerate(prompts):
        alone = ours.forward(prompt[None])[0]
        assert np.array_equal(batched[row, ids.shape[1] - len(prompt):], alone), \
            f"{model} {mode}: prompt {row} differs alone vs padded batch"
    alone_gen = ours.generate(prompts[1][None], max_new_tokens=8)
    batched_gen = ours.generate(ids, attention_mask=mask, max_new_tokens=8)
    assert np.array_equal(batched_gen[1], alone_gen[0])


def test_bf16dot_rounds_matmul_inputs_and_needs_bf16(hz, tiny_paths):
    """bf16dot is fused with bf16 matmul inputs: its logits differ from fused's (the loader
    marks the matrices; were it not to, the ladder above would pass on fused's values), it
    reports its mode, and float32 weights are refused by name."""
    path = str(tiny_paths["qwen2_untied_bias"])
    ids = _util.random_prompt(100, 40, seed=5)[None]
    fused = hz.CausalLM.from_pretrained(path, dtype="bfloat16", mode="fused")
    dot = hz.CausalLM.from_pretrained(path, dtype="bfloat16", mode="bf16dot")
    assert dot.info["mode"] == "bf16dot" and fused.info["mode"] == "fused"
    # The dot product kernel runs wherever the CPU has AVX512-BF16 (else the FMA kernel).
    cpu_flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    assert dot.info["bf16_dot_products"] == ("avx512_bf16" in cpu_flags)
    # AMX-BF16 (with the tile state) lays its matrices out for the tile chain (ops/matmul.h).
    assert dot.info["bf16_tiles"] == ("amx_bf16" in cpu_flags and "amx_tile" in cpu_flags)
    a, b = fused.forward(ids)[0], dot.forward(ids)[0]
    assert not np.array_equal(a, b)
    assert np.abs(a - b).max() < 0.05 * np.abs(a).max()
    with pytest.raises(hz.Error, match="bf16dot"):
        hz.CausalLM.from_pretrained(path, dtype="float32", mode="bf16dot")


def test_bf16dot_embeddings_match_float32(hz):
    """Encoders take the mode too: MiniLM's bf16dot embeddings stay within bf16 rounding of
    the float32 ones and are not fused's."""
    texts = ["A man is eating food.", "The quick brown fox jumps over the lazy dog. " * 6]
    ref = hz.Embedder.from_pretrained(str(MINILM)).encode(texts)
    fused = hz.Embedder.from_pretrained(str(MINILM), dtype="bfloat16", mode="fused").encode(texts)
    dot = hz.Embedder.from_pretrained(str(MINILM), dtype="bfloat16", mode="bf16dot").encode(texts)
    assert not np.array_equal(fused, dot)
    cos = (dot * ref).sum(1) / np.linalg.norm(dot, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.999, cos
