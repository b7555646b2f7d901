"""--quantize / quantize=: an fp32 checkpoint quantized at load (issue 16).

The reference is transformers' own model with every matrix hubzoo quantizes (each linear
weight and the embedding table) replaced by its quantize -> dequantize round trip computed
by gguf-py (its quantizer for Q8_0/Q4_0, whose bytes hubzoo's must equal; for Q4_K, gguf-py
dequantizes hubzoo's blocks). hubzoo must then match that model at the fp32 tolerances.
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


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k"])
def test_quantize_on_load_matches_round_trip(hz, checkpoint, qtype):
    import torch

    path, hf = checkpoint
    ref = gm.build_hf("llama", tied=False, seed=3)
    ref.load_state_dict(hf.state_dict())
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if p.ndim == 2:  # every linear weight, the embedding table and lm_head
                p.copy_(torch.from_numpy(_round_trip(p.numpy(), qtype.upper())))
    model = hz.CausalLM.from_pretrained(path, quantize=qtype)
    # embed, lm_head; per layer q/k/v (fused), o, gate/up (fused), down
    assert model.info["quantized_matrices"] == 2 + 4 * gm.LAYERS
    names = capture_names(gm.LAYERS)
    logits, got = model.forward(PROMPT[None], capture=names)
    ref_logits, ref_captured = hf_forward(ref, PROMPT[None])
    failures = [f for n in names
                if (f := allclose_failure(n, got[n][0], ref_captured[n][0], 1e-4, 1e-4))]
    assert not failures, "\n".join(failures)
    assert_argmax_equal(logits, ref_logits)


def test_quantize_rejects_unknown_type(hz, checkpoint):
    path, _ = checkpoint
    with pytest.raises(Exception, match="q9_9"):
        hz.CausalLM.from_pretrained(path, quantize="q9_9")


def test_quantize_cli(hubzoo_bin, checkpoint):
    """The CLI flag reaches the loader: inspect reports the quantized matrices."""
    import json

    path, _ = checkpoint
    proc = _util.run_cli("inspect", "-m", str(path), "--quantize", "q8_0")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["quantize"] == "Q8_0" and info["quantized_matrices"] > 0
    proc = _util.run_cli("inspect", "-m", str(path), "--mode", "int8")
    assert proc.returncode != 0 and "int8" in proc.stderr
