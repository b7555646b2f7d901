"""Bad checkpoints and arguments: a typed exception naming the file/tensor/field, never a crash.

Each corrupt checkpoint is checked twice: through Python (the exception class and its
message) and through the CLI (`hubzoo inspect -m DIR`: one `error:` line on stderr,
exit code > 0, not killed by a signal).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import _util

BASE_VARIANT = "llama_linear"
TENSOR = "model.layers.0.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _util.tiny_models.build(BASE_VARIANT, tmp_path_factory.mktemp("bad") / "base")


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def write_safetensors(path: Path, header: dict, body: bytes) -> None:
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def edit_config(d: Path, **fields) -> None:
    config = json.loads((d / "config.json").read_text())
    config.update(fields)
    (d / "config.json").write_text(json.dumps(config, indent=2))


# --- corruptions: each takes the copied checkpoint dir, returns (error class, words in message)


def truncated(d):
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 1000])
    return "FormatError", ["model.safetensors"]


def header_length_past_eof(d):
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(struct.pack("<Q", len(data) * 2) + data[8:])
    return "FormatError", ["model.safetensors"]


def header_not_json(d):
    f = d / "model.safetensors"
    _, body = read_safetensors(f)
    raw = b'{"model.norm.weight": {"dtype": "F32", '  # cut off mid-object
    raw += b" " * (-len(raw) % 8)
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    return "FormatError", ["model.safetensors"]


def overlapping_offsets(d):
    f = d / "model.safetensors"
    header, body = read_safetensors(f)
    a = header["model.layers.0.input_layernorm.weight"]["data_offsets"]
    b = header["model.layers.0.post_attention_layernorm.weight"]
    size = b["data_offsets"][1] - b["data_offsets"][0]
    start = a[0] + 4  # starts inside the first norm's bytes, same length as before
    b["data_offsets"] = [start, start + size]
    write_safetensors(f, header, body)
    return "FormatError", ["model.safetensors"]


def offsets_past_end(d):
    f = d / "model.safetensors"
    header, body = read_safetensors(f)
    t = header["model.norm.weight"]
    size = t["data_offsets"][1] - t["data_offsets"][0]
    t["data_offsets"] = [len(body), len(body) + size]
    write_safetensors(f, header, body)
    return "FormatError", ["model.safetensors"]


def missing_shard(d):
    model = _util.tiny_models.load_hf(d)
    (d / "model.safetensors").unlink()
    model.save_pretrained(d, max_shard_size="100KB")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3, shards
    (d / shards[1]).unlink()
    return "FileError", [shards[1]]


def wrong_shape(d):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(d / "model.safetensors")
    rows, cols = tensors[TENSOR].shape
    tensors[TENSOR] = np.zeros((rows + 1, cols), dtype=np.float32)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    return "TensorMappingError", [TENSOR]


def missing_tensor(d):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(d / "model.safetensors")
    del tensors[TENSOR]
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    return "TensorMappingError", [TENSOR]


def extra_tensor(d):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.0.mlp.surprise_proj.weight"] = np.ones((4, 4), dtype=np.float32)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    return "TensorMappingError", ["model.layers.0.mlp.surprise_proj.weight"]


def unknown_architecture(d):
    edit_config(d, architectures=["FooForCausalLM"])
    return "ConfigError", ["FooForCausalLM"]


def unsupported_rope_type(d):
    edit_config(d, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    return "ConfigError", ["dynamic"]


def inconsistent_heads(d):
    edit_config(d, num_key_value_heads=3)  # 4 attention heads are not a multiple of 3
    return "ConfigError", ["num_key_value_heads"]


def too_many_layers(d):
    # Checked before anything is built per layer: 10^15 layers used to allocate
    # per-layer specs until std::bad_alloc.
    edit_config(d, num_hidden_layers=10**15)
    return "ConfigError", ["num_hidden_layers", "1000000000000000", "1024"]


def missing_config(d):
    (d / "config.json").unlink()
    return "FileError", ["config.json"]


def config_not_json(d):
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], ')
    return "FormatError", ["config.json"]


CORRUPTIONS = [
    truncated,
    header_length_past_eof,
    header_not_json,
    overlapping_offsets,
    offsets_past_end,
    missing_shard,
    wrong_shape,
    missing_tensor,
    extra_tensor,
    unknown_architecture,
    unsupported_rope_type,
    inconsistent_heads,
    too_many_layers,
    missing_config,
    config_not_json,
]


@pytest.fixture(params=CORRUPTIONS, ids=lambda f: f.__name__)
def corrupt(request, base, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(base, d)
    error, words = request.param(d)
    return d, error, words


def test_python_raises_typed_error(hz, corrupt):
    d, error, words = corrupt
    with pytest.raises(getattr(hz, error)) as info:
        hz.CausalLM.from_pretrained(str(d))
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_cli_prints_one_error_line(hubzoo_bin, corrupt):
    d, _, words = corrupt
    _util.assert_cli_error(_util.run_cli("inspect", "-m", str(d)), *words)


def test_exception_hierarchy(hz):
    assert issubclass(hz.Error, RuntimeError)
    for name in ("FileError", "FormatError", "ConfigError", "TensorMappingError", "NotFoundError", "InvalidArgument"):
        assert issubclass(getattr(hz, name), hz.Error), name


def test_repo_id_not_in_cache(hz, hubzoo_bin, tmp_path, monkeypatch):
    empty = tmp_path / "hub"
    empty.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(empty))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hz.NotFoundError) as info:
        hz.CausalLM.from_pretrained("nobody/no-such-model")
    assert "nobody/no-such-model" in str(info.value)
    proc = _util.run_cli("inspect", "-m", "nobody/no-such-model")
    _util.assert_cli_error(proc, "nobody/no-such-model")


def test_missing_directory(hz, tmp_path):
    with pytest.raises((hz.FileError, hz.NotFoundError)) as info:
        hz.CausalLM.from_pretrained(str(tmp_path / "does-not-exist"))
    assert "does-not-exist" in str(info.value)


def test_sharded_checkpoint_loads(hz, base, tmp_path):
    d = tmp_path / "sharded"
    shutil.copytree(base, d)
    model = _util.tiny_models.load_hf(d)
    (d / "model.safetensors").unlink()
    model.save_pretrained(d, max_shard_size="100KB")
    assert (d / "model.safetensors.index.json").is_file()
    ids = _util.random_prompt(model.config.vocab_size, 11, seed=5)[None]
    sharded = hz.CausalLM.from_pretrained(str(d)).forward(ids)
    single = hz.CausalLM.from_pretrained(str(base)).forward(ids)
    assert np.array_equal(sharded, single)


@pytest.fixture(scope="module")
def base_model(hz, base):
    return hz.CausalLM.from_pretrained(str(base))


IDS = np.array([[5, 6, 7, 8]], dtype=np.int64)
INVALID_CALLS = {
    "token_id_past_vocab": lambda m, v: m.forward(np.array([[5, v, 7]], dtype=np.int64)),
    "negative_token_id": lambda m, v: m.forward(np.array([[5, -1, 7]], dtype=np.int64)),
    "mask_shape": lambda m, v: m.forward(IDS, attention_mask=np.ones((1, 3), dtype=np.int64)),
    "unknown_capture_name": lambda m, v: m.forward(IDS, capture=["layers.99"]),
    "prefill_past_input": lambda m, v: m.forward_incremental(IDS, 5),
    "negative_temperature": lambda m, v: m.generate(IDS, max_new_tokens=4, temperature=-1.0),
    "generate_token_past_vocab": lambda m, v: m.generate(np.array([[5, v]], dtype=np.int64), max_new_tokens=2),
}


@pytest.mark.parametrize("case", sorted(INVALID_CALLS))
def test_invalid_arguments(hz, base_model, case):
    vocab = base_model.config["vocab_size"]
    with pytest.raises(hz.InvalidArgument):
        INVALID_CALLS[case](base_model, vocab)
    # The model still works after a rejected call.
    assert base_model.forward(IDS).shape == (1, 4, vocab)


def test_unsupported_dtype(hz, base):
    with pytest.raises(hz.Error):
        hz.CausalLM.from_pretrained(str(base), dtype="float64")


def test_cli_bad_ids(hubzoo_bin, base):
    vocab = json.loads((base / "config.json").read_text())["vocab_size"]
    proc = _util.run_cli("generate", "-m", str(base), "--ids", f"5,{vocab},7", "--format", "json")
    _util.assert_cli_error(proc)
    proc = _util.run_cli("generate", "-m", str(base), "--ids", "5,x,7", "--format", "json")
    assert proc.returncode > 0, proc
