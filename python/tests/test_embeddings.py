"""Encoders and sentence embeddings against transformers and sentence-transformers.

- all-MiniLM-L6-v2 (real): equal to sentence-transformers on a padded batch of very
  different lengths, texts past max_seq_length included (rtol 1e-4, atol 1e-5, fp32);
  bf16 error ratio RMS(ours - ST fp32) / RMS(ST bf16 - ST fp32) <= 1.15 eager, <= 1.0
  fused, ST bf16 loaded as users load it (model_kwargs={"dtype": torch.bfloat16}).
- Tiny random BERT / RoBERTa / XLM-R encoders: per-layer parity with transformers
  (hooks), with token type ids and pad ids inside the text; the same for the decoders'
  last hidden state.
- Tiny sentence-transformers pipelines (several pooling modes, Dense, Normalize, prompts,
  include_prompt=false, truncation, do_lower_case, decoder embedders with lasttoken):
  parity with sentence-transformers, and bf16 ratios.
- Batch invariance: a text alone and in any batch gives bit-identical vectors.
- Bad input and the `hubzoo embed` CLI.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import _util

MINILM = _util.REPO / "models" / "all-MiniLM-L6-v2"


tiny_encoders = _util.load_testing("tiny_encoders")
PIPELINES = list(tiny_encoders.PIPELINES)
BERT_FAMILY = ["bert", "roberta", "xlm_roberta"]
DECODERS = ["qwen3_lasttoken", "llama_causal_mean", "llama_base_lasttoken"]

LONG = " ".join(tiny_encoders.CORPUS)
# Very different lengths: empty, one word, sentences, far past every max_seq_length, a
# literal special token (a pad id inside RoBERTa's text changes its positions), upper case.
TEXTS = tiny_encoders.CORPUS + ["", "x", LONG, LONG * 3, "a <pad> b [PAD] c", "LOUD TEXT Here"]


def rms(x) -> float:
    return float(np.sqrt(np.mean(np.square(np.asarray(x, dtype=np.float64)))))


def assert_close(name, ours, ref, rtol=1e-4, atol=1e-5):
    assert ours.shape == ref.shape, (name, ours.shape, ref.shape)
    _util.record_error("embeddings", name, ours, ref)
    failure = _util.allclose_failure(name, ours, ref, rtol, atol)
    assert failure is None, failure


@pytest.fixture(scope="session")
def minilm():
    if not (MINILM / "modules.json").is_file():
        pytest.fail(f"{MINILM} missing: run scripts/prepare_models.py", pytrace=False)
    return MINILM


@pytest.fixture(scope="session")
def st_paths(tmp_path_factory):
    """Every tiny sentence-transformers pipeline, built once: {name: snapshot dir}."""
    root = tmp_path_factory.mktemp("tiny_st")
    return {p: tiny_encoders.build(p, root / p) for p in PIPELINES}


@pytest.fixture(scope="session")
def st_model():
    cache = {}

    def get(path, dtype="float32"):
        key = (str(path), dtype)
        if key not in cache:
            cache[key] = tiny_encoders.load_st(path, dtype)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def ours():
    cache = {}

    def get(path, dtype="float32", mode="fused"):
        import hubzoo

        key = (str(path), dtype, mode)
        if key not in cache:
            cache[key] = hubzoo.Embedder.from_pretrained(path, dtype=dtype, mode=mode, num_threads=2)
        return cache[key]

    return get


# --- all-MiniLM-L6-v2 -----------------------------------------------------------------


def minilm_texts():
    words = "the engine reads hub files and embeds sentences exactly like the reference".split()
    long_text = " ".join(words[i % len(words)] for i in range(700))  # > 256 and > 512 tokens
    return ["", "Hi", "A quick test.", long_text, TEXTS[1], long_text[:900], TEXTS[6], LONG]


def test_minilm_tokens_and_truncation(minilm, ours, st_model):
    st = st_model(minilm)
    emb = ours(minilm)
    assert emb.max_seq_length == st.max_seq_length == 256
    for text in minilm_texts():
        ref = st.preprocess([text])["input_ids"][0].tolist()
        assert emb.tokenize(text) == ref, text[:40]


def test_minilm_matches_sentence_transformers(minilm, ours, st_model):
    texts = minilm_texts()
    ref = st_model(minilm).encode(texts, batch_size=len(texts))  # one padded batch
    got = ours(minilm).encode(texts)
    assert got.dtype == np.float32
    assert_close("all-MiniLM-L6-v2 fp32", got, ref)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("mode,bound", [("eager", 1.15), ("fused", 1.0)])
def test_minilm_bf16_error_ratio(minilm, ours, st_model, mode, bound):
    texts = minilm_texts()
    ref = st_model(minilm).encode(texts)
    st_bf16 = st_model(minilm, "bfloat16").encode(texts)
    got = ours(minilm, "bfloat16", mode).encode(texts)
    ratio = rms(got - ref) / rms(st_bf16 - ref)
    _util.PARITY_ERRORS.setdefault("embeddings", {})[f"all-MiniLM-L6-v2 bf16 {mode} ratio"] = ratio
    assert ratio <= bound, f"bf16 {mode}: ratio {ratio:.3f} > {bound}"


# --- tiny encoders: per-layer parity with transformers ------------------------------------


def hf_capture(model, ids, mask, type_ids=None):
    """transformers eager fp32 forward -> {name: [B, S, H]} under hubzoo's capture names."""
    import torch

    captured, handles = {}, []

    def hook(name):
        def fn(_module, _inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            captured[name] = out.detach().float().numpy().copy()

        return fn

    handles.append(model.embeddings.register_forward_hook(hook("embed")))
    for i, layer in enumerate(model.encoder.layer):
        handles.append(layer.attention.register_forward_hook(hook(f"layers.{i}.attention")))
        handles.append(layer.register_forward_hook(hook(f"layers.{i}")))
    kwargs = {"input_ids": torch.as_tensor(ids), "attention_mask": torch.as_tensor(mask)}
    if type_ids is not None:
        kwargs["token_type_ids"] = torch.as_tensor(type_ids)
    try:
        with torch.no_grad():
            captured["last"] = model(**kwargs).last_hidden_state.float().numpy()
    finally:
        for h in handles:
            h.remove()
    return captured


def padded_batch(vocab: int, pad_id: int, lengths, seed: int, pad_inside: bool):
    rng = np.random.default_rng(seed)
    ids = np.full((len(lengths), max(lengths)), pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(0, vocab, size=n)
        if pad_inside and n > 4:
            ids[row, n // 2] = pad_id  # a real token equal to the pad id
        mask[row, :n] = 1
    return ids, mask


@pytest.mark.parametrize("name", BERT_FAMILY)
def test_encoder_per_layer_parity(hz, tmp_path, name):
    path = tiny_encoders.build_encoder(name, tmp_path / name)
    hf = tiny_encoders.load_hf(path)
    enc = hz.Encoder.from_pretrained(path)
    cfg = hf.config
    limit = enc.info["max_tokens"]
    assert limit == (cfg.max_position_embeddings - cfg.pad_token_id - 1 if name != "bert"
                     else cfg.max_position_embeddings)
    ids, mask = padded_batch(cfg.vocab_size, cfg.pad_token_id, [limit, 5, 17, 1], 3, name != "bert")
    types = None
    if name == "bert":
        types = (np.random.default_rng(4).random(ids.shape) < 0.4).astype(np.int64) * mask
    ref = hf_capture(hf, ids, mask, types)
    hidden, got = enc.forward(ids, mask, types, capture=enc.capture_names)
    assert sorted(got) == sorted(n for n in ref if n != "last")
    real = mask.astype(bool)
    for cap in ["embed"] + [n for n in enc.capture_names if n != "embed"]:
        _util.record_error(f"tiny_{name}", cap, got[cap][real], ref[cap][real])
        failure = _util.allclose_failure(cap, got[cap][real], ref[cap][real], 1e-4, 1e-4)
        assert failure is None, failure
    np.testing.assert_array_equal(hidden, got[f"layers.{cfg.num_hidden_layers - 1}"])
    assert not hidden[~real].any()  # padded positions never enter the model


def test_masked_lm_checkpoint_ignores_its_head(hz, tmp_path):
    """BertForMaskedLM: the encoder under 'bert.', the MLM head ignored with a reason."""
    import torch
    import transformers

    path = tiny_encoders.build_encoder("bert", tmp_path / "mlm", architecture="BertForMaskedLM")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(path, attn_implementation="eager")
    enc = hz.Encoder.from_pretrained(path)
    ignored = enc.info["ignored_tensors"]
    assert any(k.startswith("cls.predictions") for k in ignored), ignored
    assert all(reason for reason in ignored.values())
    ids, mask = padded_batch(hf.config.vocab_size, 0, [9, 4], 7, False)
    with torch.no_grad():
        ref = hf.bert(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask))
    got = enc.forward(ids, mask)
    real = mask.astype(bool)
    assert _util.allclose_failure("mlm", got[real], ref.last_hidden_state.numpy()[real], 1e-4, 1e-4) is None


@pytest.mark.parametrize("pipeline", DECODERS)
def test_decoder_last_hidden_state(hz, st_paths, pipeline):
    """A decoder as an encoder: the final norm output equals transformers' base model's
    last_hidden_state (Qwen3 and the untied Llama base: bare tensor names, no lm_head, as
    sentence-transformers saves them)."""
    import torch

    path = st_paths[pipeline]
    hf = tiny_encoders.load_hf(path)
    enc = hz.Encoder.from_pretrained(path)
    assert enc.info["causal"]
    ids, mask = padded_batch(hf.config.vocab_size, 0, [21, 6, 13], 5, False)
    with torch.no_grad():
        ref = hf(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask)).last_hidden_state
    got = enc.forward(ids, mask)
    real = mask.astype(bool)
    failure = _util.allclose_failure(pipeline, got[real], ref.numpy()[real], 1e-4, 1e-4)
    assert failure is None, failure


# --- tiny pipelines: parity with sentence-transformers ------------------------------------


PROMPT_CASES = {
    "none": {},
    "prompt_name": {"prompt_name": "query"},
    "prompt": {"prompt": "Custom prompt: "},
    "empty_prompt": {"prompt": ""},  # overrides a default_prompt_name
}


@pytest.mark.parametrize("case", list(PROMPT_CASES))
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_pipeline_matches_sentence_transformers(st_paths, st_model, ours, pipeline, case):
    path = st_paths[pipeline]
    kwargs = PROMPT_CASES[case]
    ref = st_model(path).encode(TEXTS, batch_size=5, **kwargs)  # padded batches
    got = ours(path).encode(TEXTS, **kwargs)
    assert_close(f"{pipeline} {case}", got, ref)


@pytest.mark.parametrize("pipeline", ["bert_mean_dense", "bert_cls_max_prompt", "qwen3_lasttoken"])
def test_pipeline_normalize_options(st_paths, st_model, ours, pipeline):
    path = st_paths[pipeline]
    st = st_model(path)
    emb = ours(path)
    ref = st.encode(TEXTS, normalize_embeddings=True)
    assert_close(f"{pipeline} normalize=True", emb.encode(TEXTS, normalize=True), ref)
    raw = emb.encode(TEXTS, normalize=False)  # the snapshot's Normalize modules skipped
    if "Normalize" in emb.info["modules"]:
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        assert not np.allclose(norms, 1.0)
        assert_close(f"{pipeline} normalize=False", raw / norms, st.encode(TEXTS))
    else:
        assert_close(f"{pipeline} normalize=False", raw, st.encode(TEXTS))


def test_pipeline_prompt_lengths(st_paths, st_model, ours):
    """include_prompt=false leaves out the prompt's tokens minus a trailing special token."""
    for pipeline in ["bert_cls_max_prompt", "xlmr_mean_prompt", "llama_causal_mean"]:
        st = st_model(st_paths[pipeline])
        prompt = st.prompts.get("query")
        assert ours(st_paths[pipeline]).prompt_length(prompt) == st[0]._get_prompt_length(prompt)


@pytest.mark.parametrize("mode,bound", [("eager", 1.15), ("fused", 1.0)])
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_pipeline_bf16_error_ratio(st_paths, st_model, ours, pipeline, mode, bound):
    path = st_paths[pipeline]
    ref = st_model(path).encode(TEXTS)
    st_bf16 = st_model(path, "bfloat16").encode(TEXTS)
    got = ours(path, "bfloat16", mode).encode(TEXTS)
    ratio = rms(got - ref) / rms(st_bf16 - ref)
    _util.PARITY_ERRORS.setdefault("embeddings", {})[f"{pipeline} bf16 {mode} ratio"] = ratio
    assert ratio <= bound, f"{pipeline} bf16 {mode}: ratio {ratio:.3f} > {bound}"


# --- batch invariance ---------------------------------------------------------------------


@pytest.mark.parametrize("target", ["minilm", "roberta_weighted", "qwen3_lasttoken"])
@pytest.mark.parametrize("dtype,mode", [("float32", "fused"), ("bfloat16", "eager")])
def test_batch_invariance(minilm, st_paths, ours, target, dtype, mode):
    path = minilm if target == "minilm" else st_paths[target]
    emb = ours(path, dtype, mode)
    batch = emb.encode(TEXTS)
    for batch_size in (1, 3):
        np.testing.assert_array_equal(emb.encode(TEXTS, batch_size=batch_size), batch)
    order = np.random.default_rng(0).permutation(len(TEXTS))
    np.testing.assert_array_equal(emb.encode([TEXTS[i] for i in order]), batch[order])
    for i, text in enumerate(TEXTS):
        np.testing.assert_array_equal(emb.encode([text]), batch[i : i + 1], err_msg=repr(text[:30]))


# --- bad input ----------------------------------------------------------------------------


def broken_copy(src, dst, edit):
    shutil.copytree(src, dst)
    edit(dst)
    return dst


def test_missing_pooling_config(hz, st_paths, tmp_path):
    path = broken_copy(st_paths["bert_mean_dense"], tmp_path / "p",
                       lambda d: (d / "1_Pooling" / "config.json").unlink())
    with pytest.raises(hz.FileError, match=r"1_Pooling/config.json: missing"):
        hz.Embedder.from_pretrained(path)


def test_unknown_pooling_mode(hz, st_paths, tmp_path):
    def edit(d):
        cfg = d / "1_Pooling" / "config.json"
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "pooling_mode": "median"}))

    path = broken_copy(st_paths["bert_mean_dense"], tmp_path / "p", edit)
    with pytest.raises(hz.ConfigError, match=r"config.json: unknown pooling mode 'median'"):
        hz.Embedder.from_pretrained(path)


def test_roberta_huge_pad_token_id_is_a_config_error(hz, tmp_path):
    # pad_token_id + 1 overflowed int64 (undefined behaviour) instead of failing the check.
    path = tiny_encoders.build_encoder("roberta", tmp_path / "r")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "pad_token_id": 2**63 - 1}))
    with pytest.raises(hz.ConfigError, match=r"pad_token_id 9223372036854775807 leaves no positions"):
        hz.Encoder.from_pretrained(path)


def test_dense_pickle_is_a_clear_error(hz, st_paths, tmp_path):
    def edit(d):
        (d / "2_Dense" / "model.safetensors").rename(d / "2_Dense" / "pytorch_model.bin")

    path = broken_copy(st_paths["bert_mean_dense"], tmp_path / "p", edit)
    with pytest.raises(hz.FileError, match=r"pytorch_model.bin.*only safetensors"):
        hz.Embedder.from_pretrained(path)


def test_unsupported_module(hz, st_paths, tmp_path):
    def edit(d):
        modules = json.loads((d / "modules.json").read_text())
        modules.append({"idx": 9, "name": "9", "path": "", "type": "sentence_transformers.models.LayerNorm"})
        (d / "modules.json").write_text(json.dumps(modules))

    path = broken_copy(st_paths["bert_mean_dense"], tmp_path / "p", edit)
    with pytest.raises(hz.ConfigError, match=r"module type 'LayerNorm' is not supported"):
        hz.Embedder.from_pretrained(path)


def test_empty_text_list_gives_an_empty_result(minilm, ours, st_model):
    """Defined behaviour: [0, dimension] float32 (sentence-transformers returns an empty array)."""
    got = ours(minilm).encode([])
    assert got.shape == (0, 384) and got.dtype == np.float32
    assert st_model(minilm).encode([]).size == 0


@pytest.mark.parametrize("target", ["minilm", "xlmr_mean_prompt", "qwen3_lasttoken"])
def test_empty_string_matches_sentence_transformers(minilm, st_paths, ours, st_model, target):
    """"" still has the tokenizer's special tokens ([CLS] [SEP], <s> </s>, <|endoftext|>)."""
    path = minilm if target == "minilm" else st_paths[target]
    assert_close(f"{target} empty string", ours(path).encode([""]), st_model(path).encode([""]))
    assert_close(f"{target} empty string alone", ours(path).encode(""), st_model(path).encode(""))


def test_bad_arguments(hz, minilm, ours):
    emb = ours(minilm)
    with pytest.raises(hz.InvalidArgument, match="prompt name 'query' is not configured"):
        emb.encode(["x"], prompt_name="query")
    with pytest.raises(hz.InvalidArgument, match="batch_size"):
        emb.encode(["x"], batch_size=0)
    with pytest.raises(hz.InvalidArgument, match=r"texts\[1\] must be a str"):
        emb.encode(["x", 3])
    with pytest.raises(hz.InvalidArgument, match="dtype"):
        hz.Embedder.from_pretrained(minilm, dtype="float16")


def test_text_with_no_tokens_is_an_error(hz, st_paths, tmp_path):
    """A tokenizer that adds no special tokens turns "" into nothing to pool: an error
    naming the text (sentence-transformers would pool padding)."""
    def edit(d):
        tok = json.loads((d / "tokenizer.json").read_text())
        tok["post_processor"] = None
        (d / "tokenizer.json").write_text(json.dumps(tok))

    path = broken_copy(st_paths["qwen3_lasttoken"], tmp_path / "p", edit)
    with pytest.raises(hz.InvalidArgument, match="text 1 encodes to no tokens"):
        hz.Embedder.from_pretrained(path).encode(["fine", ""])


# --- CLI ----------------------------------------------------------------------------------


def test_cli_embed_json(hubzoo_bin, minilm, ours):
    texts = ["The cat sits.", "", "A somewhat longer sentence about embeddings."]
    proc = _util.run_cli("embed", "-m", str(minilm), "--format", "json", "--threads", "2", *texts)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["dimension"] == 384 and out["dtype"] == "float32"
    got = np.asarray(out["embeddings"], dtype=np.float32)
    np.testing.assert_array_equal(got, ours(minilm).encode(texts))


def test_cli_embed_options(hubzoo_bin, st_paths, ours):
    path = st_paths["bert_mean_dense"]
    proc = _util.run_cli("embed", "-m", str(path), "--prompt-name", "query", "--no-normalize", "hello", "x")
    assert proc.returncode == 0, proc.stderr
    got = np.asarray([[float(v) for v in line.split()] for line in proc.stdout.splitlines()], np.float32)
    np.testing.assert_array_equal(got, ours(path).encode(["hello", "x"], prompt_name="query", normalize=False))


def test_cli_embed_errors(hubzoo_bin, minilm, st_paths):
    _util.assert_cli_error(_util.run_cli("embed", "-m", str(minilm), "--prompt-name", "q", "x"), "prompt name 'q'")
    _util.assert_cli_error(_util.run_cli("embed", "-m", str(minilm)), "text")


def test_base_decoder_without_lm_head_is_not_a_causal_lm(hz, st_paths):
    """The untied base checkpoint has no lm_head: an encoder loads it, generation says why not."""
    import json

    path = st_paths["llama_base_lasttoken"]
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "np") as f:
        names = set(f.keys())
    assert "lm_head.weight" not in names and "embed_tokens.weight" in names
    assert not json.loads((path / "config.json").read_text()).get("tie_word_embeddings", False)
    with pytest.raises(hz.ConfigError, match="'LlamaModel' is a base model without a language-model head"):
        hz.CausalLM.from_pretrained(str(path))
