"""The Hub's quantized safetensors (layers/hub_quant.h): each quantized linear as hubzoo
converts it to Q4_G / Q8_G, dequantized, against the format's own dequantization.

- compressed-tensors: checkpoints written by the `compressed-tensors` package itself
  (apply_quantization_config, its calculate_qparams, ModelCompressor.compress_model); the
  reference is the package's own decompress of the saved tensors.
- GPTQ and AWQ: no packer installs without a GPU stack, so the checkpoints are packed here
  from the documented layouts (docs/architecture.md, "The Hub's quantized safetensors"),
  the packers checked on known words; the reference is the formats' dequantization as
  gptqmodel (what transformers loads both through) writes it, computed in fp32.

Equality is bit for bit: every format's weight is scale * (q - zero) with small integers
q - zero (|q - zero| < 2^9) and the scale stored as f32/f16/bf16, so the product has at
most 24 significant bits' worth of rounding once, in fp32, on both sides. Where the
reference computes in the scale's own dtype (compressed-tensors with bf16 scales, AWQ's and
GPTQ's fp16 kernels), its value is the fp32 product rounded once to that dtype; that is
checked too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import _util

LINEARS = [
    "model.layers.0.self_attn.q_proj",
    "model.layers.0.self_attn.k_proj",
    "model.layers.0.self_attn.v_proj",
    "model.layers.0.self_attn.o_proj",
    "model.layers.0.mlp.gate_proj",
    "model.layers.0.mlp.up_proj",
    "model.layers.0.mlp.down_proj",
]
# Llama with in_features 128 and 256, so groups of 32, 64 and 128 all divide them.
TINY = dict(
    hidden_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=256,
    num_hidden_layers=1,
    tie_word_embeddings=False,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return _util.tiny_models.build("llama_tied_llama3", tmp_path_factory.mktemp("hq") / "base", **TINY)


def same_bits(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.dtype == np.float32 and ref.dtype == np.float32
    assert ours.shape == ref.shape
    diff = ours.view(np.uint32) != ref.view(np.uint32)
    assert not diff.any(), f"{diff.sum()} of {diff.size} differ, e.g. {ours[diff][:4]} vs {ref[diff][:4]}"


# --- compressed-tensors ----------------------------------------------------------------------


def ct_checkpoint(base: Path, out: Path, fmt: str, bits: int, strategy: str, group_size, symmetric: bool,
                  dtype: str = "float32") -> Path:
    """A checkpoint quantized and written by the compressed-tensors package (min-max qparams)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams

    model = _util.tiny_models.load_hf(base, dtype)
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy=strategy,
                            group_size=group_size)
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)}, ignore=["lm_head"]
    )
    apply_quantization_config(model, config)
    for _, module in model.named_modules():
        if not hasattr(module, "weight_scale"):
            continue
        w = module.weight.data
        if strategy == "group":
            g = w.unflatten(-1, (w.shape[1] // group_size, group_size))
            lo, hi = g.amin(-1), g.amax(-1)
        elif strategy == "tensor":
            lo, hi = w.amin().reshape(1), w.amax().reshape(1)
        else:
            lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
        scale, zero = calculate_qparams(lo, hi, args)
        module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
        if hasattr(module, "weight_zero_point"):
            module.weight_zero_point.data.copy_(zero.reshape(module.weight_zero_point.shape))
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=fmt)
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    return out


def ct_reference(path: Path, prefix: str) -> torch.Tensor:
    """The package's own decompress of the saved tensors of one linear."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    qc = QuantizationConfig.model_validate(json.loads((path / "config.json").read_text())["quantization_config"])
    scheme = qc.config_groups["group_0"]
    tensors = load_file(path / "model.safetensors")
    local = {k[len(prefix) + 1:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
    compressor = BaseCompressor.get_value_from_registry(scheme.format or qc.format)
    return compressor.decompress(local, scheme)["weight"]


CT_CASES = [
    ("pack-quantized", 4, "group", 32, True),
    ("pack-quantized", 4, "group", 128, True),
    ("pack-quantized", 4, "group", 32, False),
    ("pack-quantized", 4, "group", 128, False),
    ("pack-quantized", 4, "channel", None, False),
    ("pack-quantized", 8, "channel", None, True),
    ("int-quantized", 8, "channel", None, True),
    ("int-quantized", 8, "channel", None, False),
    ("naive-quantized", 8, "group", 64, True),
    ("int-quantized", 4, "group", 32, False),  # int4 values in int8 storage -> Q4_G
    ("pack-quantized", 4, "tensor", None, True),  # one scale for the whole matrix
]


@pytest.mark.parametrize("fmt,bits,strategy,group_size,symmetric", CT_CASES)
def test_compressed_tensors_equals_package_decompress(hz, base, tmp_path, fmt, bits, strategy, group_size,
                                                      symmetric):
    path = ct_checkpoint(base, tmp_path / "q", fmt, bits, strategy, group_size, symmetric)
    for prefix in LINEARS:
        info = hz._hubzoo.hub_quant_info(str(path), prefix)
        assert info["type"] == ("Q4_G" if bits == 4 else "Q8_G")
        suffixes = sorted(name[len(prefix) + 1:] for name in info["tensors"])
        if fmt == "pack-quantized":
            want = ["weight_packed", "weight_scale", "weight_shape"] + ([] if symmetric else ["weight_zero_point"])
        else:
            want = ["weight", "weight_scale"] + ([] if symmetric else ["weight_zero_point"])
        assert suffixes == sorted(want)
        ref = ct_reference(path, prefix)
        assert ref.dtype == torch.float32
        same_bits(hz._hubzoo.hub_quant_dequantize(str(path), prefix), ref.numpy())
    assert not hz._hubzoo.hub_quant_info(str(path), "lm_head")["is_quantized"]


def test_compressed_tensors_bf16_scales_round_once(hz, base, tmp_path):
    """bf16 scales: the package dequantizes in bf16, i.e. hubzoo's exact fp32 product rounded to bf16."""
    path = ct_checkpoint(base, tmp_path / "q", "pack-quantized", 4, "group", 32, False, dtype="bfloat16")
    for prefix in LINEARS:
        ref = ct_reference(path, prefix)
        assert ref.dtype == torch.bfloat16
        ours = torch.from_numpy(hz._hubzoo.hub_quant_dequantize(str(path), prefix))
        assert torch.equal(ours.to(torch.bfloat16), ref)
        assert not torch.equal(ours, ref.float())  # ours is the unrounded product


# --- GPTQ ------------------------------------------------------------------------------------


def pack_gptq_rows(q: np.ndarray) -> np.ndarray:
    """[k, n] 4-bit values -> qweight [k/8, n] int32: row i of each 8 at bits 4 (i % 8)."""
    k, n = q.shape
    words = np.zeros((k // 8, n), dtype=np.uint32)
    for i in range(8):
        words |= q[i::8].astype(np.uint32) << (4 * i)
    return words.view(np.int32)


def pack_cols(z: np.ndarray, order=tuple(range(8))) -> np.ndarray:
    """[g, n] 4-bit values -> [g, n/8] int32: column 8j + order[i] at bits 4i."""
    g, n = z.shape
    words = np.zeros((g, n // 8), dtype=np.uint32)
    for i, c in enumerate(order):
        words |= (z[:, c::8].astype(np.uint32) & 15) << (4 * i)
    return words.view(np.int32)


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def test_packers_follow_the_documented_layouts():
    q = np.arange(8, dtype=np.int64).reshape(8, 1) * np.ones((1, 8), dtype=np.int64)
    assert pack_gptq_rows(q).view(np.uint32)[0, 0] == 0x76543210  # row i at bits 4i
    row = np.arange(8, dtype=np.int64).reshape(1, 8)
    assert pack_cols(row).view(np.uint32)[0, 0] == 0x76543210  # GPTQ qzeros: column i at bits 4i
    assert pack_cols(row, AWQ_ORDER).view(np.uint32)[0, 0] == 0x75316420  # AWQ: columns 0,2,4,6,1,3,5,7


def rtn_params(w: torch.Tensor, sym: bool):
    """GPTQ's Quantizer.find_params for 4 bits on rows of w: (scale fp16, zero int, q int)."""
    xmin = torch.clamp(w.min(1).values, max=0)
    xmax = torch.clamp(w.max(1).values, min=0)
    if sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    both = (xmin == 0) & (xmax == 0)
    xmin[both], xmax[both] = -1, 1
    scale = ((xmax - xmin) / 15).half()
    zero = torch.full_like(xmin, 8) if sym else torch.round(-xmin / scale.float())
    q = torch.clamp(torch.round(w / scale.float()[:, None]) + zero[:, None], 0, 15)
    return scale, zero.long(), q.long()


def gptq_pack_linear(w: torch.Tensor, group_size: int, desc_act: bool, sym: bool, v1: bool, seed: int):
    """qweight, qzeros, scales, g_idx of an [n, k] weight (RTN in GPTQ's grouping)."""
    n, k = w.shape
    gs = k if group_size == -1 else group_size
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(k, generator=gen) if desc_act else torch.arange(k)
    groups = (k + gs - 1) // gs
    g_idx = torch.empty(k, dtype=torch.int32)
    q = torch.empty(n, k, dtype=torch.long)
    scales = torch.empty(groups, n, dtype=torch.float16)
    zeros = torch.empty(groups, n, dtype=torch.long)
    for g in range(groups):
        cols = perm[g * gs:(g + 1) * gs]
        g_idx[cols] = g
        s, z, qq = rtn_params(w[:, cols], sym)
        scales[g], zeros[g], q[:, cols] = s, z, qq
    stored = (zeros - 1) & 15 if v1 else zeros
    return {
        "qweight": torch.from_numpy(pack_gptq_rows(q.t().numpy())),
        "qzeros": torch.from_numpy(pack_cols(stored.numpy())),
        "scales": scales,
        "g_idx": g_idx,
    }


def unpack_rows(packed: torch.Tensor) -> torch.Tensor:
    u = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.empty(packed.shape[0] * 8, packed.shape[1], dtype=torch.int64)
    for i in range(8):
        out[i::8] = (u >> (4 * i)) & 15
    return out


def unpack_cols(packed: torch.Tensor) -> torch.Tensor:
    u = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.empty(packed.shape[0], packed.shape[1] * 8, dtype=torch.int64)
    for i in range(8):
        out[:, i::8] = (u >> (4 * i)) & 15
    return out


def gptq_reference(t: dict, v1: bool) -> torch.Tensor:
    """gptqmodel's GPTQ dequantization (utils/model_dequant.py convert_gptq_file), in fp32:
    v1 zero points +1 per 4-bit field, W^T = (q - zeros[g_idx]) * scales[g_idx]."""
    zeros = unpack_cols(t["qzeros"])
    if v1:
        zeros = (zeros + 1) & 15
    g = t["g_idx"].long()
    w = (unpack_rows(t["qweight"]).float() - zeros.float()[g]) * t["scales"].float()[g]
    return w.t().contiguous()


def write_quantized(base: Path, out: Path, quantization_config: dict, pack) -> dict:
    """base's checkpoint with each of LINEARS replaced by pack(weight) tensors."""
    out.mkdir(parents=True)
    tensors = load_file(base / "model.safetensors")
    packed = {}
    for i, prefix in enumerate(LINEARS):
        packed[prefix] = pack(tensors.pop(prefix + ".weight"), i)
        for name, value in packed[prefix].items():
            tensors[f"{prefix}.{name}"] = value
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((base / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (out / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copy(base / "generation_config.json", out / "generation_config.json")
    return packed


# GPTQ's act order is argsort(diag(H)) of the layer's input, so linears that read the same
# input (q/k/v, gate/up) share g_idx; the packers' seed follows the input.
INPUT_OF = [0, 0, 0, 1, 2, 2, 3]

GPTQ_CASES = [(g, d, s) for g in (32, 64, 128, -1) for d in (False, True) for s in (True, False)]


@pytest.mark.parametrize("group_size,desc_act,sym", GPTQ_CASES)
def test_gptq_equals_reference_dequant(hz, base, tmp_path, group_size, desc_act, sym):
    qc = {"quant_method": "gptq", "bits": 4, "group_size": group_size, "desc_act": desc_act, "sym": sym,
          "checkpoint_format": "gptq", "damp_percent": 0.01, "true_sequential": True}

    def pack(w, i):
        if not sym and i == 0:
            w = w.clone()
            w[0, :] = w[0, :].abs()  # row 0's groups all >= 0: zero point 0, stored as 15 in v1
        return gptq_pack_linear(w, group_size, desc_act, sym, v1=True, seed=INPUT_OF[i])

    path = tmp_path / "gptq"
    packed = write_quantized(base, path, qc, pack)
    if not sym:
        assert (unpack_cols(packed[LINEARS[0]]["qzeros"])[:, 0] == 15).all()
    for prefix in LINEARS:
        info = hz._hubzoo.hub_quant_info(str(path), prefix)
        assert info["type"] == "Q4_G"
        assert sorted(info["tensors"]) == sorted(f"{prefix}.{s}" for s in ("qweight", "qzeros", "scales", "g_idx"))
        # desc_act: stored column j is input k_perm[j], grouped; with one group (or without
        # desc_act) no permutation.
        if desc_act and 0 < group_size < info["k"]:
            g_idx = packed[prefix]["g_idx"].numpy()
            assert len(info["k_perm"]) == info["k"]
            assert np.all(np.diff(g_idx[np.array(info["k_perm"])]) >= 0)
        else:
            assert info["k_perm"] == []
        ref = gptq_reference(packed[prefix], v1=True)
        ours = hz._hubzoo.hub_quant_dequantize(str(path), prefix)
        same_bits(ours, ref.numpy())
        # gptqmodel's fp16 torch kernel computes the same product in fp16: one rounding of ours.
        g = packed[prefix]["g_idx"].long()
        zeros = ((unpack_cols(packed[prefix]["qzeros"]) + 1) & 15)[g]
        fp16 = ((unpack_rows(packed[prefix]["qweight"]) - zeros).half() * packed[prefix]["scales"][g]).t()
        assert torch.equal(torch.from_numpy(ours).half(), fp16)
    assert not hz._hubzoo.hub_quant_info(str(path), "lm_head")["is_quantized"]


def test_gptq_v2_zero_points_are_stored_as_is(hz, base, tmp_path):
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False, "sym": False,
          "format": "gptq_v2"}
    packed = write_quantized(base, tmp_path / "v2", qc,
                             lambda w, i: gptq_pack_linear(w, 64, False, False, v1=False, seed=INPUT_OF[i]))
    for prefix in LINEARS:
        same_bits(hz._hubzoo.hub_quant_dequantize(str(tmp_path / "v2"), prefix),
                  gptq_reference(packed[prefix], v1=False).numpy())


# --- AWQ -------------------------------------------------------------------------------------


def awq_pack_linear(w: torch.Tensor, group_size: int):
    """AWQ GEMM: qweight [k, n/8] (columns interleaved 0,2,4,6,1,3,5,7), qzeros [k/G, n/8], scales."""
    n, k = w.shape
    groups = k // group_size
    q = torch.empty(n, k, dtype=torch.long)
    scales = torch.empty(groups, n, dtype=torch.float16)
    zeros = torch.empty(groups, n, dtype=torch.long)
    for g in range(groups):
        cols = slice(g * group_size, (g + 1) * group_size)
        s, z, qq = rtn_params(w[:, cols], sym=False)
        scales[g], zeros[g], q[:, cols] = s, z, qq
    return {
        "qweight": torch.from_numpy(pack_cols(q.t().numpy(), AWQ_ORDER)),
        "qzeros": torch.from_numpy(pack_cols(zeros.numpy(), AWQ_ORDER)),
        "scales": scales,
    }


def awq_reference(t: dict, group_size: int) -> torch.Tensor:
    """gptqmodel's dequantize_gemm (quantization/awq/utils/packing_utils.py) in fp32: unpack
    columnwise, undo the order with AWQ_REVERSE_ORDER, (q - zeros) * scales per group."""
    reverse = torch.arange(t["qweight"].shape[1] * 8).view(-1, 8)[:, [0, 4, 1, 5, 2, 6, 3, 7]].reshape(-1)
    q = unpack_cols(t["qweight"])[:, reverse]
    z = unpack_cols(t["qzeros"])[:, reverse].repeat_interleave(group_size, dim=0)
    s = t["scales"].float().repeat_interleave(group_size, dim=0)
    return ((q - z).float() * s).t().contiguous()


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_awq_equals_reference_dequant(hz, base, tmp_path, group_size):
    qc = {"quant_method": "awq", "bits": 4, "group_size": group_size, "version": "gemm", "zero_point": True,
          "modules_to_not_convert": None}
    packed = write_quantized(base, tmp_path / "awq", qc, lambda w, i: awq_pack_linear(w, group_size))
    for prefix in LINEARS:
        info = hz._hubzoo.hub_quant_info(str(tmp_path / "awq"), prefix)
        assert info["type"] == "Q4_G" and info["k_perm"] == []
        assert sorted(info["tensors"]) == sorted(f"{prefix}.{s}" for s in ("qweight", "qzeros", "scales"))
        ours = hz._hubzoo.hub_quant_dequantize(str(tmp_path / "awq"), prefix)
        same_bits(ours, awq_reference(packed[prefix], group_size).numpy())


# --- bad input -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gptq_dir(base, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hq_bad") / "gptq"
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True, "sym": True}
    write_quantized(base, path, qc, lambda w, i: gptq_pack_linear(w, 32, True, True, v1=True, seed=INPUT_OF[i]))
    return path


def variant_of(src: Path, dst: Path, quantization_config=None, drop=(), replace=None) -> Path:
    shutil.copytree(src, dst)
    if quantization_config is not None:
        config = json.loads((dst / "config.json").read_text())
        config["quantization_config"] = quantization_config
        (dst / "config.json").write_text(json.dumps(config))
    if drop or replace:
        tensors = load_file(dst / "model.safetensors")
        for name in drop:
            del tensors[name]
        tensors.update(replace or {})
        save_file(tensors, dst / "model.safetensors")
    return dst


QC = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True, "sym": True}
BAD_CONFIGS = [
    ({**QC, "bits": 3}, "'bits'"),
    ({**QC, "bits": 8}, "'bits'"),
    ({**QC, "group_size": 40}, "'group_size'"),
    ({k: v for k, v in QC.items() if k != "group_size"}, "'group_size'"),
    ({**QC, "checkpoint_format": "marlin"}, "'checkpoint_format'"),
    ({**QC, "quant_method": "bitsandbytes"}, "'quant_method'"),
    ({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemv"}, "'version'"),
    ({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "exllama"}, "'version'"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "strategy": "channel"},
                                    "input_activations": {"num_bits": 8, "strategy": "token", "dynamic": True}}}},
     "'input_activations'"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}},
     "'format'"),
]


@pytest.mark.parametrize("qc,field", BAD_CONFIGS)
def test_unsupported_config_is_a_config_error_naming_the_field(hz, gptq_dir, tmp_path, qc, field):
    path = variant_of(gptq_dir, tmp_path / "bad", quantization_config=qc)
    with pytest.raises(hz.ConfigError, match=field) as e:
        hz._hubzoo.hub_quant_dequantize(str(path), LINEARS[0])
    assert "config.json" in str(e.value)
    # Loading the model refuses it the same way (models/model_info.cc).
    with pytest.raises(hz.ConfigError, match=field):
        hz.CausalLM.from_pretrained(str(path), dtype="float32")


def test_bad_tensors_name_file_tensor_and_field(hz, gptq_dir, tmp_path):
    prefix = LINEARS[0]
    missing = variant_of(gptq_dir, tmp_path / "no_g_idx", drop=[prefix + ".g_idx"])
    with pytest.raises(hz.TensorMappingError, match=r"q_proj\.g_idx' is missing \(desc_act true needs it\)"):
        hz._hubzoo.hub_quant_dequantize(str(missing), prefix)
    scales = load_file(gptq_dir / "model.safetensors")[prefix + ".scales"]
    wrong = variant_of(gptq_dir, tmp_path / "scales", replace={prefix + ".scales": scales[:2].contiguous()})
    with pytest.raises(hz.TensorMappingError, match=r"model\.safetensors: tensor '.*q_proj\.scales' must be "
                                                    r"F32/F16/BF16 \[4, 128\], got F16 \[2, 128\]"):
        hz._hubzoo.hub_quant_dequantize(str(wrong), prefix)
    g_idx = load_file(gptq_dir / "model.safetensors")[prefix + ".g_idx"].clone()
    g_idx[3] = 1000
    far = variant_of(gptq_dir, tmp_path / "g_idx", replace={prefix + ".g_idx": g_idx})
    with pytest.raises(hz.TensorMappingError, match=r"g_idx' holds group 1000 at column 3"):
        hz._hubzoo.hub_quant_dequantize(str(far), prefix)
