"""Qwen3-MoE beyond the shared ladder (the tiny MoE variants also run through every test
that iterates tiny_models.VARIANTS):

- routing: our router logits, selected experts (in rank order) and their weights equal
  transformers' (hooks on each Qwen3MoeTopKRouter) at every token of a long input, per
  sparse layer, in fp32; the sparse/dense choice per layer is transformers';
- the comparison has teeth: a checkpoint copy whose config flips norm_topk_prob or
  changes num_experts_per_tok makes it fail;
- ties: experts sharing a router row tie at every token; the order of equal
  probabilities is torch.topk's;
- both expert layouts load (the Hub's experts.{e}.*_proj and transformers 5's fused
  experts.gate_up_proj / down_proj) and give bit-identical logits;
- bad configs and missing expert tensors are typed errors naming the field/tensor;
- `hubzoo generate` and `python -m hubzoo.verify` work on a tiny MoE;
- verify's routing rung (hubzoo.verify.routing): confident (token, sparse layer) pairs
  and tokens excluded for near-tie routing are counted, transformers' bf16 and ours keep
  every confident pair, and a planted routing change (top-k + 1, two router rows
  swapped) fails "routing kept where confident", full forward and cached decode.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import _moe
import _util
from _moe import LONG, copy_checkpoint, long_prompt, our_routing, routing_mismatches

MOE_VARIANTS = [v for v, (arch, _) in _util.tiny_models.VARIANTS.items() if arch == "Qwen3MoeForCausalLM"]


@pytest.fixture(params=MOE_VARIANTS, scope="module")
def variant(request):
    return request.param


def sparse_layers(hf) -> list[int]:
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    return [i for i, layer in enumerate(hf.model.layers) if isinstance(layer.mlp, Qwen3MoeSparseMoeBlock)]


def hf_routing(hf, ids) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """layer -> (router logits [T, E], weights [T, k], experts [T, k]) from the router's output."""
    return _moe.hf_routing(hf, ids, sparse_layers(hf))






def test_sparse_layers_match_transformers(variant, hf_tiny, our_tiny):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    layers = sparse_layers(hf)
    assert 0 < len(layers) < hf.config.num_hidden_layers, "the variant should mix dense and sparse layers"
    ours_sparse = sorted({int(n.split(".")[1]) for n in ours.capture_names if n.endswith(".router_logits")})
    assert ours_sparse == layers


def test_routing_matches_transformers_long_input(variant, hf_tiny, our_tiny):
    hf, ours = hf_tiny(variant), our_tiny(variant)
    ids = long_prompt(hf.config.vocab_size)
    ref = hf_routing(hf, ids)
    got = our_routing(ours, ids, sorted(ref))
    assert routing_mismatches(got, ref) == []
    k, n_experts = hf.config.num_experts_per_tok, hf.config.num_experts
    for i, (_, weights, experts) in got.items():
        assert experts.shape == (LONG, k) and weights.shape == (LONG, k)
        assert all(len(set(row)) == k for row in experts.tolist()), f"layer {i}: an expert chosen twice"
        # Random tiny models route unevenly in later layers (a shared direction in the
        # residual stream); each layer still routes among more than k experts.
        assert len(np.unique(experts)) > k, f"layer {i}: routing is trivial"
        if hf.config.norm_topk_prob:
            np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=0, atol=1e-6)
    # Some sparse layer uses every expert, so every expert index's weights are exercised.
    assert any(len(np.unique(e)) == n_experts for _, _, e in got.values())


@pytest.mark.parametrize("plant", ["flip_norm_topk_prob", "top_k_plus_one"])
def test_planted_routing_change_is_caught(variant, plant, hf_tiny, tiny_paths, hz, tmp_path):
    hf = hf_tiny(variant)
    fields = ({"norm_topk_prob": not hf.config.norm_topk_prob} if plant == "flip_norm_topk_prob"
              else {"num_experts_per_tok": hf.config.num_experts_per_tok + 1})
    planted = hz.CausalLM.from_pretrained(str(copy_checkpoint(tiny_paths[variant], tmp_path / "p", fields)))
    ids = long_prompt(hf.config.vocab_size)
    ref = hf_routing(hf, ids)
    problems = routing_mismatches(our_routing(planted, ids, sorted(ref)), ref)
    assert problems, f"{plant}: the routing comparison did not notice"
    print(f"\n{variant} {plant}: caught: {problems[0]}")


def test_tied_router_rows_order_as_torch_topk(variant, tiny_paths, hz, tmp_path):
    """Experts 1 and 2 share a router row in every sparse layer: equal probabilities at every token."""
    def tie(tensors):
        for name, value in tensors.items():
            if name.endswith("mlp.gate.weight"):
                value[2] = value[1]

    path = copy_checkpoint(tiny_paths[variant], tmp_path / "tied", edit_tensors=tie)
    hf = _util.tiny_models.load_hf(path)
    ids = long_prompt(hf.config.vocab_size)
    ref = hf_routing(hf, ids)
    not_lower_first = 0
    for i, (logits, _, experts) in ref.items():
        assert np.array_equal(logits[:, 1], logits[:, 2]), "precondition: transformers' logits tie"
        both = np.isin(experts, [1, 2]).sum(-1) == 2
        assert both.sum() > 10, f"layer {i}: too few tokens route to both tied experts"
        for row in experts.tolist():
            not_lower_first += (2 in row) and (1 not in row or row.index(2) < row.index(1))
    # torch does not simply put the lower index first (measured: expert 2 alone or ahead of
    # expert 1 at 20-110 tokens per variant), so "lower index first" would fail here.
    assert not_lower_first > 0
    ours = hz.CausalLM.from_pretrained(str(path))
    assert routing_mismatches(our_routing(ours, ids, sorted(ref)), ref) == []


def test_fused_expert_layout_loads_identically(variant, hf_tiny, our_tiny, tiny_paths, hz, tmp_path):
    """transformers 5's in-memory names (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I])."""
    _moe.fused_layout_loads_identically(hz, hf_tiny(variant), our_tiny(variant),
                                        tiny_paths[variant], tmp_path / "fused")


@pytest.mark.parametrize("fields, words", [
    ({"num_experts_per_tok": 9, "num_local_experts": 8}, ["num_experts_per_tok", "9", "8"]),
    ({"decoder_sparse_step": 0}, ["decoder_sparse_step"]),
    ({"moe_intermediate_size": 0}, ["moe_intermediate_size"]),
    ({"num_experts": 6, "num_local_experts": 8}, ["num_experts", "num_local_experts"]),
])
def test_bad_config_is_a_config_error(hz, tiny_paths, tmp_path, fields, words):
    path = copy_checkpoint(tiny_paths["qwen3_moe_norm_mlp_only"], tmp_path / "bad", fields)
    with pytest.raises(hz.ConfigError) as e:
        hz.CausalLM.from_pretrained(str(path))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_missing_expert_tensor_is_named(hz, tiny_paths, tmp_path):
    gone = "model.layers.2.mlp.experts.5.up_proj.weight"
    path = copy_checkpoint(tiny_paths["qwen3_moe_norm_mlp_only"], tmp_path / "missing",
                           edit_tensors=lambda t: t.pop(gone))
    with pytest.raises(hz.TensorMappingError, match=gone.replace(".", r"\.")):
        hz.CausalLM.from_pretrained(str(path))


def test_fewer_experts_in_config_than_checkpoint_is_a_mapping_error(hz, tiny_paths, tmp_path):
    path = copy_checkpoint(tiny_paths["qwen3_moe_norm_mlp_only"], tmp_path / "seven", {"num_local_experts": 7})
    with pytest.raises(hz.TensorMappingError, match=r"mlp\.gate\.weight"):
        hz.CausalLM.from_pretrained(str(path))


def test_cli_generate_matches_transformers(hubzoo_bin, hf_tiny, tiny_paths):
    variant = MOE_VARIANTS[0]
    hf = hf_tiny(variant)
    ids = _util.random_prompt(hf.config.vocab_size, 19, seed=8)
    ref = _util.hf_generate(hf, ids[None], max_new_tokens=16)[0].tolist()
    proc = subprocess.run([str(hubzoo_bin), "generate", "-m", str(tiny_paths[variant]), "--ids",
                           ",".join(map(str, ids)), "--max-new-tokens", "16", "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ids"] == ref


def test_verify_passes(hz, tiny_paths):
    """The full report (fp32 and bf16, eager and fused, short and 512-token inputs) passes."""
    from hubzoo import verify

    report = verify.run(str(tiny_paths[MOE_VARIANTS[0]]), long_tokens=512, progress=False)
    assert report["architecture"] == "Qwen3MoeForCausalLM"
    assert report["summary"]["passed"], report["summary"]["failed"]


@pytest.fixture(scope="module")
def verify_long_reference(tiny_paths):
    """The verify harness's reference for the long input of the first MoE variant (fp32 + bf16)."""
    from hubzoo.verify import harness, inputs, reference

    path = tiny_paths[MOE_VARIANTS[0]]
    config = json.loads((path / "config.json").read_text())
    inp = inputs.build(str(path), config, long_tokens=512)[0]["long"]
    hf32, hf16 = reference.load(str(path), "float32"), reference.load(str(path), "bfloat16")
    names = reference.layer_names(config["num_hidden_layers"])
    ref = harness._reference_for_input(hf32, hf16, inp, names, harness.Progress(False), new_tokens=2)
    return inp, names, ref


def _routing_checks(hz, path, inp, names, ref):
    from hubzoo.verify import harness

    ours = hz.CausalLM.from_pretrained(str(path), dtype="bfloat16", mode="fused")
    col = harness._column(ours, "bfloat16", "fused", inp, ref, names, harness.Progress(False), new_tokens=2)
    return {c["key"]: c for c in col["checks"]}, col["metrics"]["routing"]


def test_verify_routing_rows_count_and_pass(hz, tiny_paths, verify_long_reference):
    """The refined rung: confident pairs counted, all kept; excluded tokens counted, never silent."""
    inp, names, ref = verify_long_reference
    rt = ref["json"]["routing"]
    assert rt["sparse_layers"] == [0, 2]
    assert 0 < rt["confident_pairs"] < rt["pairs"] == 2 * len(inp.ids)
    assert rt["hf_bf16_kept"] == rt["confident_pairs"]  # transformers' own bf16 keeps them all
    assert 0 < rt["excluded_tokens"] < len(inp.ids)
    assert ref["json"]["decided_positions"] == ref["json"]["margin_positions"] - rt["excluded_margin_positions"]
    checks, got = _routing_checks(hz, tiny_paths[MOE_VARIANTS[0]], inp, names, ref)
    assert got["pairs"] == rt["confident_pairs"] and got["kept"] == got["pairs"]
    assert 0 < got["cached_pairs"] == got["cached_kept"]
    for key in ("routing_full", "routing_cached", "margin_full", "margin_cached"):
        assert checks[key]["pass"] is True, checks[key]


@pytest.mark.parametrize("plant", ["top_k_plus_one", "swap_router_rows"])
def test_verify_routing_check_has_teeth(hz, tiny_paths, tmp_path, verify_long_reference, plant):
    """Our model from a planted copy of the checkpoint, the reference from the original:
    "routing kept where confident" fails, full forward and cached decode."""
    inp, names, ref = verify_long_reference
    src = tiny_paths[MOE_VARIANTS[0]]
    if plant == "top_k_plus_one":
        config = json.loads((src / "config.json").read_text())
        path = copy_checkpoint(src, tmp_path / plant, {"num_experts_per_tok": config["num_experts_per_tok"] + 1})
    else:  # the last sparse layer's router routes expert 0's tokens to expert 1 and back
        def swap(tensors):
            gate = tensors["model.layers.2.mlp.gate.weight"]
            gate[[0, 1]] = gate[[1, 0]]

        path = copy_checkpoint(src, tmp_path / plant, edit_tensors=swap)
    checks, got = _routing_checks(hz, path, inp, names, ref)
    assert checks["routing_full"]["pass"] is False and checks["routing_cached"]["pass"] is False, got
    assert got["kept"] < got["pairs"] and got["lost"]
    print(f"\n{plant}: routing kept at {got['kept']}/{got['pairs']} confident pairs, "
          f"cached {got['cached_kept']}/{got['cached_pairs']}; first lost {got['lost'][:3]}")
