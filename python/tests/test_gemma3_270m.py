"""The real Gemma-3-270M on the full fp32/bf16 ladder: models/gemma-3-270m is
models/gguf/gemma-3-270m-Q4_K_M.gguf converted by transformers (from_pretrained(gguf_file=...),
saved as fp32 safetensors by scripts/prepare_models.py into a folder keyed by the GGUF's
sha256 and the transformers version), run as a text model (Gemma3ForCausalLM).

hubzoo.verify runs every rung (docs/design.md) in float32 and both bf16 modes on a short
sentence and on a 700-token input past the model's 512-token sliding window: fp32 logits
(atol 1e-3, equal argmax), 64 greedy tokens equal to transformers', cached decode (the last 64
tokens one step each, through the ring buffer), bf16 error ratios (<= 1.15 eager, <= 1.0
fused), top-5, 8-sigma decisions and KL. Beside it: every named intermediate in fp32 against
transformers in float64 (no further off than transformers' fp32), and a prompt alone and inside
a padded batch giving the same bits.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import _util
from _util import capture_names, hf_forward

GEMMA = _util.REPO / "models" / "gemma-3-270m"
LONG_TOKENS = 700
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def path():
    if not (GEMMA / "config.json").is_file():
        pytest.fail(f"{GEMMA} missing: run scripts/prepare_models.py", pytrace=False)
    return GEMMA


@pytest.fixture(scope="module")
def report(hz, path):
    from hubzoo import verify

    return verify.run(str(path), dtypes=["float32", "bfloat16"], modes=["eager", "fused"],
                      threads=2, long_tokens=LONG_TOKENS, new_tokens=NEW_TOKENS, progress=False)


def test_prepared_checkpoint(path):
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Gemma3ForCausalLM"]
    assert config["sliding_window"] == 512 < LONG_TOKENS
    assert {"sliding_attention", "full_attention"} == set(config["layer_types"])
    source = json.loads((path / "hubzoo_source.json").read_text())
    assert source["gguf"] == "gemma-3-270m-Q4_K_M.gguf"


def test_every_rung_in_every_dtype_and_mode(report):
    assert report["inputs"]["long"]["tokens"] == LONG_TOKENS
    names = {c["name"] for c in report["columns"]}
    for dtype, mode in [("float32", "eager"), ("float32", "fused"), ("bfloat16", "eager"), ("bfloat16", "fused")]:
        for inp in ("short", "long"):
            assert f"{dtype}/{mode}/{inp}" in names
    for column in report["columns"]:
        _util.PARITY_ERRORS.setdefault("gemma-3-270m", {})[column["name"]] = {
            "logits_max_abs": column["metrics"]["logits_max_abs"], "bf16_ratio": column["metrics"]["bf16_ratio"]}
    long = report["references"]["long"]
    assert long["decided_positions"] > LONG_TOKENS // 4, "too few 8-sigma decisions to mean anything"
    assert not report["summary"]["failed"], report["summary"]["failed"]


@pytest.fixture(scope="module")
def texts(path):
    """hubzoo.verify's short sentence and long prose, tokenized by transformers."""
    import transformers

    from hubzoo.verify import texts as verify_texts

    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    short = np.asarray(tok(verify_texts.SHORT_TEXT)["input_ids"], dtype=np.int64)
    long = np.asarray(tok(verify_texts.LONG_TEXT)["input_ids"], dtype=np.int64)
    return short, long


def _outside(values, ref, rtol=1e-4, atol=1e-4) -> int:
    return int((np.abs(values.astype(np.float64) - ref) > atol + rtol * np.abs(ref)).sum())


def test_named_intermediates_fp32(hz, path, texts):
    """embed, every layer's attention and MLP branches and output, the final norm, judged
    against the exact value: transformers run in float64. Gemma 3's residual stream reaches
    ~6e4 in a few channels (an fp32 ulp there is 0.008), so transformers' own fp32 misses the
    ladder's rtol/atol 1e-4 on some elements, as SmolLM2's does (test_smollm2.py): hubzoo's fp32
    has no more elements outside 1e-4 of float64 than transformers' fp32 has, and its logits
    are within atol 1e-3 of transformers' fp32 with the same argmax."""
    hf = _util.tiny_models.load_hf(path)
    ids = texts[0][None]
    ours = hz.CausalLM.from_pretrained(str(path))
    names = capture_names(ours.num_layers)
    logits, got = ours.forward(ids, capture=names)
    ref_logits, ref32 = hf_forward(hf, ids)
    _, ref64 = hf_forward(hf.double(), ids)
    ours_outside = hf_outside = total = 0
    for n in names[:-1]:
        assert got[n].shape == ref32[n].shape, n
        _util.record_error("gemma-3-270m/short", n, got[n], ref32[n])
        ours_outside += _outside(got[n], ref64[n])
        hf_outside += _outside(ref32[n], ref64[n])
        total += got[n].size
    print(f"\ngemma-3-270m: elements outside 1e-4 of float64: hubzoo fp32 {ours_outside}, "
          f"transformers fp32 {hf_outside}, of {total}")
    assert ours_outside <= hf_outside, (ours_outside, hf_outside)
    np.testing.assert_allclose(logits, ref_logits, rtol=0, atol=1e-3)
    _util.assert_argmax_equal(logits, ref_logits)


def test_alone_and_in_a_padded_batch(hz, path, texts):
    ours = hz.CausalLM.from_pretrained(str(path), dtype="bfloat16", mode="fused")
    short, long = texts[0], texts[1][:200]  # logits are 1 MB a row
    batch, mask = _util.left_pad([long, short], 0)
    got = ours.forward(batch, attention_mask=mask)
    np.testing.assert_array_equal(got[1, len(long) - len(short):], ours.forward(short[None])[0])
    np.testing.assert_array_equal(got[0], ours.forward(long[None])[0])
