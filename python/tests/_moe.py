"""Helpers shared by the sparse-MoE tests (test_qwen3_moe.py, test_qwen2_moe.py,
test_gemma4_moe.py): our routing through the capture interface, transformers' (Qwen-style
routers), their comparison, a long prompt, and planted checkpoint copies."""

from __future__ import annotations

import json
import shutil
from typing import Callable

import numpy as np

import _util

LONG = 600  # tokens of the routing comparison (60 sliding windows of the tiny Gemma 4)


def long_prompt(vocab: int) -> np.ndarray:
    return _util.random_prompt(vocab, LONG, seed=99)


def our_routing(ours, ids, layers) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """layer -> (router logits [T, E], routing weights [T, k], selected experts [T, k])."""
    names = [f"layers.{i}.mlp.{n}" for i in layers for n in ("router_logits", "routing_weights", "selected_experts")]
    _, cap = ours.forward(ids[None], capture=names)
    return {i: (cap[f"layers.{i}.mlp.router_logits"][0], cap[f"layers.{i}.mlp.routing_weights"][0],
                cap[f"layers.{i}.mlp.selected_experts"][0].astype(np.int64)) for i in layers}


def hf_routing(hf, ids, layers) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """layer -> (router logits [T, E], weights [T, k], experts [T, k]) from the output of each
    listed layer's `mlp.gate` router (transformers 5's Qwen3-MoE and Qwen2-MoE routers)."""
    import torch

    got, handles = {}, []
    for i in layers:
        def hook(_m, _inp, out, i=i):
            logits, weights, experts = out
            got[i] = (logits.float().numpy().copy(), weights.float().numpy().copy(), experts.numpy().copy())

        handles.append(hf.model.layers[i].mlp.gate.register_forward_hook(hook))
    try:
        with torch.no_grad():
            hf(torch.as_tensor(ids[None]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return got


def routing_mismatches(ours: dict, ref: dict) -> list[str]:
    """Every way our routing differs from transformers' (empty: equal)."""
    if sorted(ours) != sorted(ref):
        return [f"sparse layers {sorted(ours)} vs transformers' {sorted(ref)}"]
    problems = []
    for i in sorted(ref):
        (lo, wo, eo), (lr, wr, er) = ours[i], ref[i]
        if eo.shape != er.shape:
            problems.append(f"layer {i}: experts shape {eo.shape} vs {er.shape}")
            continue
        bad = np.nonzero((eo != er).any(-1))[0]
        if bad.size:
            problems.append(f"layer {i}: selected experts differ at {bad.size} tokens, first {bad[:5].tolist()}: "
                            f"{eo[bad[0]].tolist()} vs {er[bad[0]].tolist()}")
        err = float(np.max(np.abs(wo - wr)))
        if err > 1e-5:
            problems.append(f"layer {i}: routing weights differ by up to {err:.3g}")
        err = float(np.max(np.abs(lo - lr)))
        if err > 1e-4:
            problems.append(f"layer {i}: router logits differ by up to {err:.3g}")
    return problems


def copy_checkpoint(src, dst, config_fields: dict | None = None,
                    edit_tensors: Callable[[dict], object] | None = None):
    """A copy of the tiny checkpoint at src in dst, its config.json updated with
    config_fields and its tensors (a name -> numpy array dict) edited in place."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    if config_fields:
        config = json.loads((dst / "config.json").read_text())
        config.update(config_fields)
        (dst / "config.json").write_text(json.dumps(config, indent=2))
    if edit_tensors:
        tensors = load_file(dst / "model.safetensors")
        edit_tensors(tensors)
        save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def fused_layout_loads_identically(hz, hf, our_model, src, dst) -> None:
    """transformers 5's in-memory names (experts.gate_up_proj [E, 2I, H], experts.down_proj
    [E, H, I]) saved as a checkpoint load into the same model as the Hub's per-expert names."""
    from safetensors.torch import save_file

    dst.mkdir()
    for f in ("config.json", "generation_config.json"):
        shutil.copy(src / f, dst / f)
    state = {k: v.contiguous().clone() for k, v in hf.state_dict().items()}
    if hf.config.tie_word_embeddings:
        state.pop("lm_head.weight")
    assert any(k.endswith("experts.gate_up_proj") for k in state)
    save_file(state, dst / "model.safetensors", metadata={"format": "pt"})
    fused = hz.CausalLM.from_pretrained(str(dst))
    ids = _util.random_prompt(hf.config.vocab_size, 41, seed=5)[None]
    assert np.array_equal(fused.forward(ids), our_model.forward(ids))
