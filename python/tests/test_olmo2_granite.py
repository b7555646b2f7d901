"""OLMo 2 and Granite beyond the shared ladder (their tiny variants also run through every
test that iterates tiny_models.VARIANTS):

- eager bf16 tracks transformers' bf16 op for op, measured in bf16's own noise (RMS(HF
  bf16 - HF fp32) of each intermediate) on a 64-token input: layers.0 within 0.02 of HF
  bf16's (the same ops in the same order: measured 0 for both), every later intermediate
  and the logits within 0.25 (one-ulp differences, e.g. OLMo 2's fp32 cos/sin from another
  libm than torch's, compound over layers: measured <= 0.07 for OLMo 2, 0 for Granite).
  The error-ratio rung cannot see a wrong rounding point (it lands at HF bf16's error too,
  elsewhere); this can. Planted and measured: OLMo 2's RoPE with cos/sin rounded to bf16
  as Llama's (Olmo2RotaryEmbedding leaves them fp32) puts layers.0 at 0.77; Granite's
  multipliers rounded to bf16 before multiplying (transformers multiplies by the fp32
  value of the Python float) put layers.0 at 0.14 and the logits at 0.32;
- bad configs: a Granite multiplier that is not a finite number > 0 is a ConfigError
  naming it; an OLMo 2 checkpoint with per-head q/k norms ([head_dim], Qwen3's) is a
  TensorMappingError naming the tensor.
"""

from __future__ import annotations

import numpy as np
import pytest

import _util
from _moe import copy_checkpoint
from hubzoo.verify import reference

OLMO2 = "olmo2_post_norms"
GRANITE = "granite_multipliers"
# Of RMS(HF bf16 - HF fp32), per named intermediate: the first layer, and everything after it.
FIRST_LAYER_BOUND, LATER_BOUND = 0.02, 0.25


def _rms(x) -> float:
    return float(np.sqrt(np.mean(np.square(np.asarray(x, dtype=np.float64)))))


@pytest.mark.parametrize("variant", [OLMO2, GRANITE])
def test_eager_bf16_tracks_transformers_bf16(hz, tiny_paths, variant):
    path = tiny_paths[variant]
    hf32 = _util.tiny_models.load_hf(path)
    hf16 = _util.tiny_models.load_hf(path, dtype="bfloat16")
    ids = _util.random_prompt(hf32.config.vocab_size, 64, seed=21)
    _, ref32 = reference.forward(hf32, ids)
    _, ref16 = reference.forward(hf16, ids)
    names = reference.layer_names(hf32.config.num_hidden_layers)
    ours = hz.CausalLM.from_pretrained(str(path), dtype="bfloat16", mode="eager")
    logits, got = ours.forward(ids[None], capture=[n for n in names if n != "logits"])
    got["logits"] = logits
    distances = {}
    for name in names:
        noise = _rms(ref16[name] - ref32[name])
        distances[name] = _rms(got[name][0] - ref16[name]) / noise if noise else _rms(got[name][0] - ref16[name])
    print(f"\n{variant} eager bf16 vs HF bf16 / HF bf16 noise: "
          + ", ".join(f"{k}={v:.3f}" for k, v in distances.items()))
    assert distances["layers.0"] <= FIRST_LAYER_BOUND, distances
    assert all(d <= LATER_BOUND for d in distances.values()), distances


@pytest.mark.parametrize("field", ["embedding_multiplier", "residual_multiplier", "attention_multiplier",
                                   "logits_scaling"])
@pytest.mark.parametrize("value", [0, -2.0, 1e39, "12"])
def test_granite_bad_multiplier_is_a_config_error(hz, tiny_paths, tmp_path, field, value):
    path = copy_checkpoint(tiny_paths[GRANITE], tmp_path / "bad", {field: value})
    with pytest.raises(hz.ConfigError, match=field):
        hz.CausalLM.from_pretrained(str(path))


def test_olmo2_per_head_qk_norm_is_a_mapping_error(hz, tiny_paths, tmp_path):
    """q_norm over head_dim values (Qwen3's shape) where OLMo 2 normalises the whole projection."""
    def per_head(tensors):
        for name in list(tensors):
            if name.endswith("self_attn.q_norm.weight"):
                tensors[name] = np.ascontiguousarray(tensors[name][:24])

    path = copy_checkpoint(tiny_paths[OLMO2], tmp_path / "per_head", edit_tensors=per_head)
    with pytest.raises(hz.TensorMappingError, match=r"model\.layers\.0\.self_attn\.q_norm\.weight"):
        hz.CausalLM.from_pretrained(str(path))
