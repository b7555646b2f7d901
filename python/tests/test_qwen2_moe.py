"""Qwen2-MoE beyond the shared ladder (its tiny variants also run through every test that
iterates tiny_models.VARIANTS):

- routing: our router logits, selected experts (in rank order) and weights equal
  transformers' (hooks on each Qwen2MoeTopKRouter) at every token of a long input, per
  sparse layer, in fp32; the sparse/dense choice per layer (decoder_sparse_step,
  mlp_only_layers) is transformers';
- the comparison has teeth: a copy whose config flips norm_topk_prob or raises
  num_experts_per_tok makes it fail;
- the shared expert: each sparse layer's output equals transformers' block (routed experts
  plus sigmoid(shared_expert_gate) * shared_expert) at every token of the long input, and a
  copy with the shared expert's gate negated differs from it far beyond that bar;
- both expert layouts (the Hub's experts.{e}.*_proj, transformers 5's fused
  experts.gate_up_proj / down_proj) load and give bit-identical logits;
- bad configs and missing shared-expert tensors are typed errors naming the field/tensor;
  `num_local_experts` is no alias here (Qwen2MoeConfig has no attribute_map);
- `python -m hubzoo.verify` passes on a tiny Qwen2-MoE (routing rung included).
"""

from __future__ import annotations


import numpy as np
import pytest

import _moe
import _util
from _moe import LONG, copy_checkpoint, long_prompt, our_routing, routing_mismatches

MOE_VARIANTS = [v for v, (arch, _) in _util.tiny_models.VARIANTS.items() if arch == "Qwen2MoeForCausalLM"]
FIRST = "qwen2_moe_shared_mlp_only"


@pytest.fixture(params=MOE_VARIANTS, scope="module")
def variant(request):
    return request.param


def sparse_layers(hf) -> list[int]:
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    return [i for i, layer in enumerate(hf.model.layers) if isinstance(layer.mlp, Qwen2MoeSparseMoeBlock)]


def test_sparse_layers_match_transformers(variant, hf_tiny, our_tiny):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    layers = sparse_layers(hf)
    assert 0 < len(layers) < hf.config.num_hidden_layers, "the variant should mix dense and sparse layers"
    ours_sparse = sorted({int(n.split(".")[1]) for n in ours.capture_names if n.endswith(".router_logits")})
    assert ours_sparse == layers


def test_routing_matches_transformers_long_input(variant, hf_tiny, our_tiny):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    ids = long_prompt(hf.config.vocab_size)
    ref = _moe.hf_routing(hf, ids, sparse_layers(hf))
    got = our_routing(ours, ids, sorted(ref))
    assert routing_mismatches(got, ref) == []
    k, n_experts = hf.config.num_experts_per_tok, hf.config.num_experts
    for i, (_, weights, experts) in got.items():
        assert experts.shape == (LONG, k) and weights.shape == (LONG, k)
        assert all(len(set(row)) == k for row in experts.tolist()), f"layer {i}: an expert chosen twice"
        assert len(np.unique(experts)) > k, f"layer {i}: routing is trivial"
        sums = weights.sum(-1)
        if hf.config.norm_topk_prob:
            np.testing.assert_allclose(sums, 1.0, rtol=0, atol=1e-6)
        else:  # the top-k softmax probabilities alone: below 1
            assert np.all(sums < 1 - 1e-3)
    assert any(len(np.unique(e)) == n_experts for _, _, e in got.values())


@pytest.mark.parametrize("plant", ["flip_norm_topk_prob", "top_k_plus_one"])
def test_planted_routing_change_is_caught(variant, plant, hf_tiny, tiny_paths, hz, tmp_path):
    hf = hf_tiny(variant)
    fields = ({"norm_topk_prob": not hf.config.norm_topk_prob} if plant == "flip_norm_topk_prob"
              else {"num_experts_per_tok": hf.config.num_experts_per_tok + 1})
    planted = hz.CausalLM.from_pretrained(str(copy_checkpoint(tiny_paths[variant], tmp_path / "p", fields)))
    ids = long_prompt(hf.config.vocab_size)
    ref = _moe.hf_routing(hf, ids, sparse_layers(hf))
    problems = routing_mismatches(our_routing(planted, ids, sorted(ref)), ref)
    assert problems, f"{plant}: the routing comparison did not notice"
    print(f"\n{variant} {plant}: caught: {problems[0]}")


def _hf_block_outputs(hf, ids, layers) -> dict[int, np.ndarray]:
    """Each sparse layer's Qwen2MoeSparseMoeBlock output [T, H] (routed + gated shared expert)."""
    import torch

    got, handles = {}, []
    for i in layers:
        handles.append(hf.model.layers[i].mlp.register_forward_hook(
            lambda _m, _in, out, i=i: got.__setitem__(i, out.detach()[0].float().numpy().copy())))
    try:
        with torch.no_grad():
            hf(torch.as_tensor(ids[None]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return got


def _block_errors(model, ids, ref) -> dict[int, float]:
    _, cap = model.forward(ids[None], capture=[f"layers.{i}.mlp" for i in ref])
    return {i: float(np.max(np.abs(cap[f"layers.{i}.mlp"][0] - ref[i]))) for i in ref}


def test_shared_expert_block_matches_and_a_negated_gate_is_caught(variant, hf_tiny, our_tiny, tiny_paths, hz,
                                                                  tmp_path):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    ids = long_prompt(hf.config.vocab_size)
    layers = sparse_layers(hf)
    ref = _hf_block_outputs(hf, ids, layers)
    errors = _block_errors(ours, ids, ref)
    assert max(errors.values()) <= 1e-4, errors

    def negate(tensors):
        for name, value in tensors.items():
            if name.endswith("mlp.shared_expert_gate.weight"):
                value *= -1.0

    planted = hz.CausalLM.from_pretrained(str(copy_checkpoint(tiny_paths[variant], tmp_path / "g",
                                                              edit_tensors=negate)))
    # The first sparse layer's input is unchanged, so its output moves by the gate alone.
    moved = _block_errors(planted, ids, {layers[0]: ref[layers[0]]})[layers[0]]
    assert moved > 100 * 1e-4, f"negating shared_expert_gate moved the block by only {moved}"


def test_fused_expert_layout_loads_identically(variant, hf_tiny, our_tiny, tiny_paths, hz, tmp_path):
    """transformers 5's in-memory names (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I])."""
    _moe.fused_layout_loads_identically(hz, hf_tiny(variant), our_tiny(variant),
                                        tiny_paths[variant], tmp_path / "fused")


@pytest.mark.parametrize("fields, words", [
    ({"num_experts_per_tok": 9}, ["num_experts_per_tok", "9", "8"]),
    ({"decoder_sparse_step": 0}, ["decoder_sparse_step"]),
    ({"moe_intermediate_size": 0}, ["moe_intermediate_size"]),
    ({"shared_expert_intermediate_size": 0}, ["shared_expert_intermediate_size"]),
    ({"qkv_bias": "yes"}, ["qkv_bias"]),
])
def test_bad_config_is_a_config_error(hz, tiny_paths, tmp_path, fields, words):
    path = copy_checkpoint(tiny_paths[FIRST], tmp_path / "bad", fields)
    with pytest.raises(hz.ConfigError) as e:
        hz.CausalLM.from_pretrained(str(path))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("gone", ["model.layers.2.mlp.shared_expert_gate.weight",
                                  "model.layers.0.mlp.shared_expert.up_proj.weight",
                                  "model.layers.2.mlp.experts.5.down_proj.weight"])
def test_missing_expert_tensor_is_named(hz, tiny_paths, tmp_path, gone):
    path = copy_checkpoint(tiny_paths[FIRST], tmp_path / "missing", edit_tensors=lambda t: t.pop(gone))
    with pytest.raises(hz.TensorMappingError, match=gone.replace(".", r"\.")):
        hz.CausalLM.from_pretrained(str(path))


def test_num_local_experts_is_no_alias(hz, our_tiny, hf_tiny, tiny_paths, tmp_path):
    """Qwen2MoeConfig keeps num_local_experts as an unused extra field: the model is unchanged."""
    path = copy_checkpoint(tiny_paths[FIRST], tmp_path / "local", {"num_local_experts": 7})
    hf = hf_tiny(FIRST)
    ids = _util.random_prompt(hf.config.vocab_size, 23, seed=6)[None]
    assert np.array_equal(hz.CausalLM.from_pretrained(str(path)).forward(ids), our_tiny(FIRST).forward(ids))
    assert _util.tiny_models.load_hf(path).config.num_experts == hf.config.num_experts


def test_verify_passes(hz, tiny_paths):
    """The full report (fp32 and bf16, eager and fused, short and 512-token inputs) passes,
    the routing rung counting confident pairs of both sparse layers."""
    from hubzoo import verify

    report = verify.run(str(tiny_paths[FIRST]), long_tokens=512, progress=False)
    assert report["architecture"] == "Qwen2MoeForCausalLM"
    assert report["summary"]["passed"], report["summary"]["failed"]
