"""Block formats and quantized products (ops/quant.h) against gguf-py.

gguf-py's quants.dequantize is what transformers runs when it loads a GGUF file,
so hubzoo's dequantize_row must give its float32 bits exactly, for every block
type, on random blocks (random quants, random finite fp16 scales including
subnormal ones). quants.quantize is llama.cpp's reference quantizer for Q8_0,
Q4_0, Q4_1, Q5_0 and Q5_1: hubzoo's bytes must equal its bytes. The products
are held against numpy on the dequantized weights.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants

GGML = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
BLOCK = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
         "Q8_0": (32, 34), "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144),
         "Q5_K": (256, 176), "Q6_K": (256, 210), "Q4_G": (32, 24), "Q8_G": (32, 40)}
# Byte offsets of each type's fp16 scale fields.
FP16_AT = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
           "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


@pytest.fixture(scope="module")
def q(hz):
    return hz._hubzoo.quant


def fp16_scales(rng, n):
    """Finite fp16 values over many binades, subnormals (< 2**-14) included."""
    v = rng.uniform(-1, 1, n) * np.exp2(rng.integers(-22, 6, n).astype(np.float64))
    return v.astype(np.float16)


def random_blocks(rng, name, nblocks):
    elems, size = BLOCK[name]
    b = rng.integers(0, 256, (nblocks, size), dtype=np.uint8)
    if name in FP16_AT:
        for at in FP16_AT[name]:
            b[:, at:at + 2] = fp16_scales(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
    else:  # Q4_G / Q8_G: f32 scale, i8 zero, 3 pad bytes
        s = (rng.uniform(-1, 1, nblocks) * np.exp2(rng.integers(-20, 4, nblocks))).astype(np.float32)
        b[:, 0:4] = s.view(np.uint8).reshape(nblocks, 4)
        b[:, 4] = rng.integers(0, 16, nblocks) if name == "Q4_G" else rng.integers(0, 256, nblocks)
        b[:, 5:8] = 0
    return b


def private_dequantize(name, b):
    """scale * float32(q - zero), as quant_type.h defines Q4_G and Q8_G."""
    s = b[:, 0:4].copy().view(np.float32)
    zero = b[:, 4].view(np.int8).astype(np.int32)[:, None]
    if name == "Q4_G":
        qs = b[:, 8:24]
        qv = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32)
    else:
        qv = b[:, 8:40].view(np.int8).astype(np.int32)
    return (s * (qv - zero).astype(np.float32)).reshape(-1)


@pytest.mark.parametrize("name", GGML + ["Q4_G", "Q8_G"])
def test_dequantize_matches_gguf_py_bits(q, name):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    nblocks = 64
    b = random_blocks(rng, name, nblocks)
    elems = BLOCK[name][0]
    ref = (quants.dequantize(b, T[name]).reshape(-1) if name in GGML
           else private_dequantize(name, b))
    got = q.dequantize(name, b.reshape(-1), nblocks * elems)
    assert got.dtype == np.float32
    diff = np.flatnonzero(got.view(np.uint32) != ref.astype(np.float32).view(np.uint32))
    assert diff.size == 0, f"{name}: {diff.size} values differ, first at {diff[:5]}: {got[diff[:5]]} vs {ref[diff[:5]]}"


def quantize_inputs(rng, k):
    rows = [rng.standard_normal(k), rng.uniform(-3, 7, k), rng.standard_normal(k) * 1e-3,
            np.zeros(k), rng.standard_normal(k) * 3e4]
    x = np.concatenate(rows).astype(np.float32)
    x[40:72] = 0.0  # an all-zero block
    x[100] = -0.0
    x[200:232] = 1.0  # a constant block (max == min)
    return x


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_quantize_bytes_match_gguf_py(q, name):
    rng = np.random.default_rng(7)
    x = quantize_inputs(rng, 1024)
    ref = quants.quantize(x.reshape(1, -1), T[name]).reshape(-1)
    got = q.quantize(name, x)
    bad = np.flatnonzero(got != ref)
    assert bad.size == 0, f"{name}: {bad.size} bytes differ, first at {bad[:8]}"


# Largest error of a block in steps of its grid (step: amax / 127, amax / 8 and
# amax / 16 for the symmetric types, (max - min) / 15 or / 31 for the affine
# ones): half a step, or a whole one at the clamped end of Q4_0/Q5_0 (d =
# max / -8 maps -max onto 8, one past the top level 7), plus the fp16
# rounding of the scale (2**-11 relative, times up to 127 levels for Q8_0).
STEPS = {"Q8_0": (127, 0.5 + 127 * 2**-11), "Q4_0": (8, 1 + 8 * 2**-11),
         "Q5_0": (16, 1 + 16 * 2**-11), "Q4_1": (15, 0.5 + 15 * 2**-11),
         "Q5_1": (31, 0.5 + 31 * 2**-11)}


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"])
def test_quantize_round_trip_error(q, name):
    """Dequantized blocks stay within their grid's step; the K types within
    12% (Q4_K), 6% (Q5_K) and 3% (Q6_K) rms. Their bytes are held against
    llama.cpp's own quantizers in test_quant_llama_ref.py."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4096).astype(np.float32)
    back = q.dequantize(name, q.quantize(name, x), x.size)
    blocks, err = x.reshape(-1, 32), np.abs(back - x).reshape(-1, 32).max(axis=1)
    if name in STEPS:
        levels, steps = STEPS[name]
        if name in ("Q4_1", "Q5_1"):
            step = (blocks.max(axis=1) - blocks.min(axis=1)) / levels
            slack = np.abs(blocks.min(axis=1)) * 2**-11  # the fp16 min
        else:
            step, slack = np.abs(blocks).max(axis=1) / levels, 0
        assert np.all(err <= steps * step + slack + 1e-7), np.max(err / step)
    rel = np.linalg.norm(back - x) / np.linalg.norm(x)
    assert rel < {"Q8_0": 0.006, "Q5_0": 0.06, "Q5_1": 0.05, "Q5_K": 0.06,
                  "Q6_K": 0.03}.get(name, 0.12), rel


def exact_bound(x, w, bias):
    """Rounding bound of quant.h's exact order: 16 lane chains of k / 16 fmas,
    a 4-level tree and the bias add: (k / 16 + 5) * 2**-24 * sum |x w| (+ |bias|)."""
    k = x.shape[1]
    return (k / 16 + 5) * 2.0**-24 * (np.abs(x) @ np.abs(w.T) + np.abs(bias))


def int8_bound(x, w, elems):
    """Error of rounding x to int8 per activation block of `elems` columns (16
    against the 32-weight block types, 32 against the K types): half a step
    dx = amax / 127 per element (plus the scale's rounding), times sum |w| over
    the block's columns."""
    m, k = x.shape
    amax = np.abs(x).reshape(m, k // elems, elems).max(axis=2)
    wsum = np.abs(w).reshape(w.shape[0], k // elems, elems).sum(axis=2)
    return (amax / 127 * (0.5 + 1e-5)) @ wsum.T


@pytest.mark.parametrize("name", GGML + ["Q4_G", "Q8_G"])
@pytest.mark.parametrize("mode", ["exact", "int8"])
def test_quant_matmul_against_numpy(q, name, mode):
    rng = np.random.default_rng(11)
    n, k, m = 37, 512, 5
    elems, size = BLOCK[name]
    b = random_blocks(rng, name, n * k // elems)
    w = q.dequantize(name, b.reshape(-1), n * k).reshape(n, k).astype(np.float64)
    x = rng.standard_normal((m, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    ref = x.astype(np.float64) @ w.T + bias
    got = q.quant_matmul(name, b.reshape(-1), n, k, x, mode, bias, threads=2)
    same = q.quant_matmul(name, b.reshape(-1), n, k, x, mode, bias, reference=True)
    assert np.array_equal(got.view(np.uint32), same.view(np.uint32))
    xd = x.astype(np.float64)
    tol = exact_bound(xd, w, bias)
    if mode == "int8":
        tol = tol + int8_bound(xd, w, 16 if elems == 32 else 32) * (1 + 1e-3)
    assert np.all(np.abs(got - ref) <= tol), np.max(np.abs(got - ref) / tol)


def test_bad_arguments_raise(q, hz):
    err = hz._hubzoo.InvalidArgument
    with pytest.raises(err, match="not a whole number"):
        q.dequantize("Q4_K", np.zeros(144, np.uint8), 200)
    with pytest.raises(err, match="bytes"):
        q.dequantize("Q8_0", np.zeros(33, np.uint8), 32)
    with pytest.raises(err, match="unknown quantized type"):
        q.dequantize("Q7_0", np.zeros(34, np.uint8), 32)
    with pytest.raises(err, match="no quantizer"):
        q.quantize("Q3_K", np.zeros(256, np.float32))
    with pytest.raises(err, match="mode"):
        q.quant_matmul("Q8_0", np.zeros(34, np.uint8), 1, 32, np.zeros((1, 32), np.float32), "fp8")
