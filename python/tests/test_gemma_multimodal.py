"""The text towers of multimodal Gemma checkpoints (Gemma3ForConditionalGeneration,
Gemma4ForConditionalGeneration): tiny checkpoints built and saved by transformers with tiny
vision (and audio) towers (hubzoo.testing.tiny_models.MULTIMODAL) prove the tensor names
transformers 5.23 writes; hubzoo runs the text tower and ignores the other towers with a reason.

- per-layer (rtol/atol 1e-4) and logits (atol 1e-3, equal argmax) parity with the
  transformers multimodal model's text-only forward, and 32 greedy tokens equal to its generate();
- the same bits as the text tower saved as a text-only checkpoint (Gemma3ForCausalLM /
  Gemma4ForCausalLM) in fp32 and both bf16 modes, so every rung the text-only variant passes
  (test_decoder_parity.py, test_bf16.py, test_gemma.py) holds for the multimodal one;
- Gemma 4's image/audio/video placeholder ids embedded as pad_token_id, as transformers'
  text-only forward embeds them;
- the towers listed in ModelInfo.ignored_modules, `hubzoo inspect` and a stderr note; bad
  configs and checkpoints as typed errors.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import _util
from _util import capture_names, hf_forward, hf_generate

MULTIMODAL = _util.tiny_models.MULTIMODAL
TEXT_ONLY = {"Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
             "Gemma4ForConditionalGeneration": "Gemma4ForCausalLM"}
TOWER_PREFIXES = ("language_model.model.", "model.language_model.")
HEADS = ("language_model.lm_head.weight", "lm_head.weight")
IGNORED = {
    "gemma3_multimodal": {"vision_tower.", "multi_modal_projector."},
    "gemma4_multimodal": {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.",
                          "model.embed_audio."},
}


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("multimodal")
    return {name: _util.tiny_models.build_multimodal(name, root / name) for name in MULTIMODAL}


@pytest.fixture(scope="module")
def hf_mm(paths):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _util.tiny_models.load_hf_multimodal(paths[name])
        return cache[name]

    return get


@pytest.fixture(params=list(MULTIMODAL))
def name(request):
    return request.param


def _text_only_copy(src, dst):
    """The text tower as a text-only checkpoint: text_config (with the top-level
    tie_word_embeddings), tensors renamed to model.* / lm_head.weight."""
    from safetensors.numpy import load_file, save_file

    config = json.loads((src / "config.json").read_text())
    text = config["text_config"]
    text["architectures"] = [TEXT_ONLY[config["architectures"][0]]]
    text["tie_word_embeddings"] = config.get("tie_word_embeddings", True)
    tensors = {}
    for key, value in load_file(str(src / "model.safetensors")).items():
        for prefix in TOWER_PREFIXES:
            if key.startswith(prefix):
                tensors["model." + key[len(prefix):]] = value
        if key in HEADS:
            tensors["lm_head.weight"] = value
    dst.mkdir()
    save_file(tensors, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(text, indent=2))
    shutil.copy(src / "generation_config.json", dst)
    return dst


def _vocab(hf):
    return hf.config.get_text_config().vocab_size


def _placeholders(name):
    fields = MULTIMODAL[name][2]
    return [fields[k] for k in ("image_token_id", "audio_token_id", "video_token_id") if k in fields]


def _text_prompt(name, vocab, length, seed):
    """Random ids without Gemma 4's media placeholders (which only the multimodal model remaps)."""
    ids = _util.random_prompt(vocab, length, seed)
    return np.where(np.isin(ids, _placeholders(name)), 3, ids)


def test_names_and_ignored_towers(hz, paths, name):
    from safetensors import safe_open

    model = hz.CausalLM.from_pretrained(str(paths[name]))
    with safe_open(str(paths[name] / "model.safetensors"), "np") as f:
        names = list(f.keys())
    tower = [n for n in names if n.startswith(TOWER_PREFIXES) or n in HEADS]
    others = sorted(set(names) - set(tower))
    assert others and tower
    info = model.info
    assert set(info["ignored_modules"]) == IGNORED[name]
    for n in others:
        assert n in info["ignored_tensors"], n
        assert "runs here as a text model" in info["ignored_tensors"][n]
    assert not any(n in info["ignored_tensors"] for n in tower)
    assert info["num_layers"] == _util.tiny_models.make_config(MULTIMODAL[name][1]).num_hidden_layers


def test_text_only_forward_matches_transformers(hz, paths, hf_mm, name):
    """Every named intermediate at rtol/atol 1e-4, logits atol 1e-3 with equal argmax, on a
    prompt crossing the sliding window (Gemma 4: holding its media placeholder ids)."""
    hf = hf_mm(name)
    ids = _util.random_prompt(_vocab(hf), 37, seed=11)[None]
    if name == "gemma4_multimodal":
        ids[0, [4, 9, 20]] = _placeholders(name)
    ours = hz.CausalLM.from_pretrained(str(paths[name]))
    names = capture_names(ours.num_layers)
    logits, got = ours.forward(ids, capture=names)
    ref_logits, ref = hf_forward(hf, ids)
    failures = []
    for n in names:
        _util.record_error(f"tiny/{name}", n, got[n], ref[n])
        f = _util.allclose_failure(n, got[n], ref[n], 1e-4, 1e-4)
        if f:
            failures.append(f)
    assert not failures, "\n".join(failures)
    assert float(np.abs(logits - ref_logits).max()) <= 1e-3
    _util.assert_argmax_equal(logits, ref_logits)


def test_greedy_generation_matches_transformers(hz, paths, hf_mm, name):
    hf = hf_mm(name)
    ids = _text_prompt(name, _vocab(hf), 6, seed=12)[None]
    ref = hf_generate(hf, ids, max_new_tokens=32)
    got = hz.CausalLM.from_pretrained(str(paths[name])).generate(ids, max_new_tokens=32)
    assert got.tolist() == ref.tolist()


@pytest.mark.parametrize("dtype,mode", [("float32", "fused"), ("bfloat16", "eager"), ("bfloat16", "fused")])
def test_same_bits_as_the_text_only_checkpoint(hz, paths, hf_mm, name, dtype, mode, tmp_path):
    """The tower saved as Gemma{3,4}ForCausalLM gives the same bits: forward, cached decode,
    a padded batch and greedy tokens."""
    text = _text_only_copy(paths[name], tmp_path / "text")
    mm = hz.CausalLM.from_pretrained(str(paths[name]), dtype=dtype, mode=mode)
    plain = hz.CausalLM.from_pretrained(str(text), dtype=dtype, mode=mode)
    assert mm.info["ignored_modules"] and not plain.info["ignored_modules"]
    vocab = _vocab(hf_mm(name))
    prompts = [_text_prompt(name, vocab, n, seed=n) for n in (40, 7, 23)]
    batch, mask = _util.left_pad(prompts, 0)
    np.testing.assert_array_equal(mm.forward(batch, attention_mask=mask),
                                  plain.forward(batch, attention_mask=mask))
    np.testing.assert_array_equal(mm.forward_incremental(prompts[0][None], 5),
                                  plain.forward_incremental(prompts[0][None], 5))
    a = mm.generate(prompts[1][None], max_new_tokens=16)[0].tolist()
    b = plain.generate(prompts[1][None], max_new_tokens=16)[0].tolist()
    # Equal up to a generated media placeholder, which only the multimodal model embeds as pad.
    stop = next((i + 1 for i, t in enumerate(a) if t in _placeholders(name)), len(a))
    assert a[:stop] == b[:stop]


def test_gemma4_placeholders_embed_as_pad(hz, paths, hf_mm, tmp_path):
    """Image/audio/video placeholder ids take pad_token_id's embeddings and per-layer
    embeddings in the multimodal model only (a planted check: the text-only model differs)."""
    name = "gemma4_multimodal"
    ids = _text_prompt(name, _vocab(hf_mm(name)), 20, seed=13)[None]
    with_media = ids.copy()
    with_media[0, [2, 8, 15]] = _placeholders(name)
    as_pad = ids.copy()
    as_pad[0, [2, 8, 15]] = 0
    mm = hz.CausalLM.from_pretrained(str(paths[name]))
    plain = hz.CausalLM.from_pretrained(str(_text_only_copy(paths[name], tmp_path / "text")))
    np.testing.assert_array_equal(mm.forward(with_media), plain.forward(as_pad))
    assert not np.array_equal(plain.forward(with_media), plain.forward(as_pad))


def test_inspect_and_note_name_the_towers(hubzoo_bin, paths, name):
    proc = _util.run_cli("inspect", "-m", str(paths[name]))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["architecture"] == MULTIMODAL[name][0]
    assert set(report["ignored_modules"]) == IGNORED[name]
    proc = _util.run_cli("generate", "-m", str(paths[name]), "--ids", "5,6,7", "--max-new-tokens", "2")
    assert proc.returncode == 0, proc.stderr
    for prefix in IGNORED[name]:
        assert f"not loaded: {prefix}*" in proc.stderr


def _edit_config(src, dst, edit):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_bad_multimodal_checkpoints(hz, paths, name, tmp_path):
    no_text = _edit_config(paths[name], tmp_path / "no_text", lambda c: c.pop("text_config"))
    with pytest.raises(hz.ConfigError, match="text_config"):
        hz.CausalLM.from_pretrained(str(no_text))
    bad_text = _edit_config(paths[name], tmp_path / "bad_text",
                            lambda c: c["text_config"].update(hidden_activation="relu"))
    with pytest.raises(hz.ConfigError, match="hidden_activation"):
        hz.CausalLM.from_pretrained(str(bad_text))
    # The text tower's tensors under a third spelling: none found, named.
    from safetensors.numpy import load_file, save_file

    renamed = tmp_path / "renamed"
    shutil.copytree(paths[name], renamed)
    tensors = load_file(str(renamed / "model.safetensors"))
    tensors = {k.replace("language_model", "text_model"): v for k, v in tensors.items()}
    save_file(tensors, str(renamed / "model.safetensors"))
    with pytest.raises(hz.TensorMappingError, match="embed_tokens.weight"):
        hz.CausalLM.from_pretrained(str(renamed))
