"""Gemma 4's MoE block beyond the shared ladder (gemma4_moe also runs through every test that
iterates tiny_models.VARIANTS, test_gemma.py's long inputs past the window included):

- routing: our router logits, selected experts (in rank order) and routing weights (with
  per_expert_scale) equal transformers' (hooks on each Gemma4TextRouter and its proj) at
  every token of an input many windows long, in every layer, fp32;
- the comparison has teeth: top_k_experts + 1, two router rows swapped and a changed
  per_expert_scale each make it fail;
- both expert layouts load (transformers' fused experts.gate_up_proj / down_proj, as it
  saves them, and per-expert experts.{e}.{gate,up,down}_proj) with bit-identical logits;
- use_bidirectional_attention "vision" is causal for text (the variant sets it);
- bad MoE fields are ConfigErrors naming the field (test_gemma.py's BAD_CONFIGS);
- `python -m hubzoo.verify` passes, and its routing rung finds Gemma 4's routers.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

import _util
from _moe import LONG, copy_checkpoint, long_prompt, our_routing, routing_mismatches

VARIANT = "gemma4_moe"


def hf_routing(hf, ids) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """layer -> (router logits = router.proj output [T, E], weights [T, k], experts [T, k])."""
    got, handles = {}, []
    for i, layer in enumerate(hf.model.layers):
        def proj_hook(_m, _inp, out, i=i):
            got.setdefault(i, {})["logits"] = out.float().reshape(-1, out.shape[-1]).numpy().copy()

        def router_hook(_m, _inp, out, i=i):
            _, weights, experts = out
            got.setdefault(i, {}).update(weights=weights.float().numpy().copy(), experts=experts.numpy().copy())

        handles += [layer.router.proj.register_forward_hook(proj_hook),
                    layer.router.register_forward_hook(router_hook)]
    try:
        with torch.no_grad():
            hf(torch.as_tensor(ids[None]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {i: (g["logits"], g["weights"], g["experts"]) for i, g in got.items()}






def test_every_layer_is_sparse(hf_tiny, our_tiny):
    hf, ours = hf_tiny(VARIANT), our_tiny(VARIANT)
    assert hf.config.enable_moe_block and hf.config.use_bidirectional_attention == "vision"
    ours_sparse = sorted({int(n.split(".")[1]) for n in ours.capture_names if n.endswith(".router_logits")})
    assert ours_sparse == list(range(hf.config.num_hidden_layers))


def test_routing_matches_transformers_long_input(hf_tiny, our_tiny):
    hf, ours = hf_tiny(VARIANT), our_tiny(VARIANT)
    ids = long_prompt(hf.config.vocab_size)
    ref = hf_routing(hf, ids)
    got = our_routing(ours, ids, sorted(ref))
    assert routing_mismatches(got, ref) == []
    k, n_experts = hf.config.top_k_experts, hf.config.num_experts
    scales = [layer.router.per_expert_scale.detach().numpy() for layer in hf.model.layers]
    for i, (_, weights, experts) in got.items():
        assert experts.shape == (LONG, k) and weights.shape == (LONG, k)
        assert all(len(set(row)) == k for row in experts.tolist()), f"layer {i}: an expert chosen twice"
        assert len(np.unique(experts)) == n_experts, f"layer {i}: some expert is never chosen"
        # Renormalised top-k times per_expert_scale: dividing the scale out sums to 1.
        np.testing.assert_allclose((weights / scales[i][experts]).sum(-1), 1.0, rtol=0, atol=1e-6)
        assert not np.allclose(scales[i], 1.0), "precondition: per_expert_scale is randomised"


@pytest.mark.parametrize("plant", ["top_k_plus_one", "swap_router_rows", "per_expert_scale"])
def test_planted_routing_change_is_caught(plant, hf_tiny, tiny_paths, hz, tmp_path):
    hf = hf_tiny(VARIANT)
    fields, edit = None, None
    if plant == "top_k_plus_one":
        fields = {"top_k_experts": hf.config.top_k_experts + 1}
    elif plant == "swap_router_rows":
        def edit(t):
            w = t["model.layers.1.router.proj.weight"]
            w[[0, 1]] = w[[1, 0]]
    else:
        def edit(t):
            t["model.layers.0.router.per_expert_scale"][3] *= 1.5
    planted = hz.CausalLM.from_pretrained(str(copy_checkpoint(tiny_paths[VARIANT], tmp_path / "p", fields, edit)))
    ids = long_prompt(hf.config.vocab_size)
    ref = hf_routing(hf, ids)
    problems = routing_mismatches(our_routing(planted, ids, sorted(ref)), ref)
    assert problems, f"{plant}: the routing comparison did not notice"
    print(f"\n{plant}: caught: {problems[0]}")


def test_per_expert_layout_loads_identically(hf_tiny, our_tiny, tiny_paths, hz, tmp_path):
    """experts.{e}.{gate,up,down}_proj.weight instead of the fused tensors transformers saves."""

    def split(t):
        for name in [n for n in t if n.endswith("experts.gate_up_proj")]:
            prefix = name[: -len("gate_up_proj")]
            gate_up, down = t.pop(name), t.pop(prefix + "down_proj")
            inter = gate_up.shape[1] // 2
            for e in range(gate_up.shape[0]):
                t[f"{prefix}{e}.gate_proj.weight"] = np.ascontiguousarray(gate_up[e, :inter])
                t[f"{prefix}{e}.up_proj.weight"] = np.ascontiguousarray(gate_up[e, inter:])
                t[f"{prefix}{e}.down_proj.weight"] = np.ascontiguousarray(down[e])

    path = copy_checkpoint(tiny_paths[VARIANT], tmp_path / "split", edit_tensors=split)
    ids = _util.random_prompt(hf_tiny(VARIANT).config.vocab_size, 41, seed=5)[None]
    split_model = hz.CausalLM.from_pretrained(str(path))
    assert np.array_equal(split_model.forward(ids), our_tiny(VARIANT).forward(ids))


def test_missing_router_tensor_is_named(hz, tiny_paths, tmp_path):
    gone = "model.layers.1.router.per_expert_scale"
    path = copy_checkpoint(tiny_paths[VARIANT], tmp_path / "missing", edit_tensors=lambda t: t.pop(gone))
    with pytest.raises(hz.TensorMappingError, match=gone.replace(".", r"\.")):
        hz.CausalLM.from_pretrained(str(path))


def test_moe_tensors_without_enable_moe_block_are_a_mapping_error(hz, tiny_paths, tmp_path):
    path = copy_checkpoint(tiny_paths[VARIANT], tmp_path / "off", {"enable_moe_block": False})
    with pytest.raises(hz.TensorMappingError, match=r"router"):
        hz.CausalLM.from_pretrained(str(path))


def test_verify_passes(hz, tiny_paths):
    """The full report (fp32 and bf16 eager and fused, the 512-token routing rung) passes."""
    from hubzoo import verify

    report = verify.run(str(tiny_paths[VARIANT]), long_tokens=512, progress=False)
    assert report["architecture"] == "Gemma4ForCausalLM"
    assert report["summary"]["passed"], report["summary"]["failed"]


def test_verify_routing_rung_finds_the_routers(tiny_paths):
    """The harness's reference captures Gemma 4's router logits and experts in every layer."""
    from hubzoo.verify import reference, routing

    path = tiny_paths[VARIANT]
    hf32, hf16 = reference.load(str(path), "float32"), reference.load(str(path), "bfloat16")
    ids = _util.random_prompt(hf32.config.vocab_size, 512, seed=3)
    _, c32 = reference.forward(hf32, ids)
    _, c16 = reference.forward(hf16, ids)
    assert routing.sparse_layers(c32) == [0, 1]
    conf = routing.confidence(c32, c16, 8.0)
    confident = sum(int(layer["confident"].sum()) for layer in conf["layers"].values())
    assert 0 < confident < 2 * len(ids)
    assert routing.kept(c16, conf)["kept"] == confident  # transformers' own bf16 keeps them
