"""EmbeddingGemma-style encoders: a Gemma3TextModel with use_bidirectional_attention in the
sentence-transformers pipeline (mean pooling, two Dense layers without bias, Normalize,
query/document prompts), tiny and random (hubzoo.testing.tiny_encoders "gemma_embedding").

test_embeddings.py runs this pipeline with every other one (parity with sentence-transformers
at rtol 1e-4 / atol 1e-5 in padded batches with each prompt case, bf16 error ratios in both
modes); here: the encoder's every layer against transformers on sequences several windows
long, the window as Gemma3TextConfig converts it (sliding_window // 2 + 1), encode_query /
encode_document, bit-identical vectors alone or batched in fp32 and both bf16 modes, and the
model refused as a causal LM.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import _util
from test_embeddings import TEXTS, assert_close, tiny_encoders

PIPELINE = "gemma_embedding"


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return tiny_encoders.build(PIPELINE, tmp_path_factory.mktemp("embedding_gemma") / PIPELINE)


@pytest.fixture(scope="module")
def st(path):
    return tiny_encoders.load_st(path)


def _window(path) -> int:
    """The bidirectional window: |q - k| < sliding_window // 2 + 1."""
    return json.loads((path / "config.json").read_text())["sliding_window"] // 2 + 1


def _hf_layers(hf, ids, mask):
    """transformers' base model: {"layers.{i}": output, "norm": last_hidden_state}."""
    import torch

    captured = {}
    hooks = [layer.register_forward_hook(
        lambda _m, _i, out, i=i: captured.__setitem__(f"layers.{i}", out[0] if isinstance(out, tuple) else out))
        for i, layer in enumerate(hf.layers)]
    try:
        with torch.no_grad():
            out = hf(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask))
    finally:
        for h in hooks:
            h.remove()
    captured["norm"] = out.last_hidden_state
    return {k: v.numpy() for k, v in captured.items()}


def test_every_layer_matches_transformers(hz, path):
    """Right-padded batch (as sentence-transformers pads), rows several windows long: each
    layer's output and the last hidden state at rtol/atol 1e-4 on the real tokens."""
    hf = tiny_encoders.load_hf(path)
    assert hf.config.use_bidirectional_attention
    w = _window(path)
    lengths = [9 * w, 2, 4 * w + 1]
    rng = np.random.default_rng(3)
    ids = np.zeros((3, max(lengths)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(3, hf.config.vocab_size, n)
        mask[row, :n] = 1
    enc = hz.Encoder.from_pretrained(path)
    assert not enc.info["causal"]
    names = [f"layers.{i}" for i in range(hf.config.num_hidden_layers)] + ["norm"]
    hidden, got = enc.forward(ids, mask, capture=names)
    ref = _hf_layers(hf, ids, mask)
    real = mask.astype(bool)
    for n in names:
        ours = hidden[real] if n == "norm" else got[n].reshape(hidden.shape)[real]
        failure = _util.allclose_failure(n, ours, ref[n][real], 1e-4, 1e-4)
        assert failure is None, failure


@pytest.mark.parametrize("sliding_window,same", [(9, True), (12, False), (4096, False)])
def test_window_as_transformers_converts_it(path, st, hz, tmp_path, sliding_window, same):
    """sliding_window 8 and 9 both give |q - k| < 5 (bit-identical vectors); 12 (< 7) and a
    window past every text (no sliding at all) change them: ours follows sentence-transformers."""
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    config = json.loads((copy / "config.json").read_text())
    config["sliding_window"] = sliding_window
    (copy / "config.json").write_text(json.dumps(config))
    texts = TEXTS[:3] + TEXTS[-4:-2]
    base = hz.Embedder.from_pretrained(path).encode(texts)
    got = hz.Embedder.from_pretrained(copy).encode(texts)
    assert np.array_equal(got, base) == same
    assert_close(f"{PIPELINE} sliding_window={sliding_window}", got,
                 tiny_encoders.load_st(copy).encode(texts, batch_size=5))


def test_query_and_document_prompts(path, st, hz):
    emb = hz.Embedder.from_pretrained(path)
    assert emb.prompts == st.prompts
    assert emb.info["modules"] == ["Transformer", "Pooling", "Dense", "Dense", "Normalize"]
    assert_close(f"{PIPELINE} encode_query", emb.encode_query(TEXTS), st.encode_query(TEXTS, batch_size=5))
    assert_close(f"{PIPELINE} encode_document", emb.encode_document(TEXTS),
                 st.encode_document(TEXTS, batch_size=5))
    assert not np.array_equal(emb.encode_query(TEXTS), emb.encode_document(TEXTS))


@pytest.mark.parametrize("dtype,mode", [("float32", "fused"), ("bfloat16", "eager"), ("bfloat16", "fused")])
def test_bit_identical_alone_or_batched(path, hz, dtype, mode):
    emb = hz.Embedder.from_pretrained(path, dtype=dtype, mode=mode)
    batch = emb.encode_query(TEXTS)
    for batch_size in (1, 3):
        np.testing.assert_array_equal(emb.encode_query(TEXTS, batch_size=batch_size), batch)
    order = np.random.default_rng(1).permutation(len(TEXTS))
    np.testing.assert_array_equal(emb.encode_query([TEXTS[i] for i in order]), batch[order])
    for i, text in enumerate(TEXTS):
        np.testing.assert_array_equal(emb.encode_query([text]), batch[i:i + 1], err_msg=repr(text[:30]))


def test_not_a_causal_lm(path, hz, tmp_path):
    """The base model has no lm_head and attends both ways: refused for generation, as a
    Gemma3TextModel and under the causal-LM architecture name."""
    with pytest.raises(hz.ConfigError, match="encoder"):
        hz.CausalLM.from_pretrained(str(path))
    copy = tmp_path / "causal"
    shutil.copytree(path, copy)
    config = json.loads((copy / "config.json").read_text())
    config["architectures"] = ["Gemma3ForCausalLM"]
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(hz.ConfigError, match="use_bidirectional_attention"):
        hz.CausalLM.from_pretrained(str(copy))
