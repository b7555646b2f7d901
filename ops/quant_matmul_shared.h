// Shared by ops/quant_matmul.cc's scalar references and its per-target
// kernels (the -inl headers it includes): the tiling constants, the int8
// mode's quantized activations, and the scalar paths of both modes. Not
// installed API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/quant.h"
#include "ops/quant_internal.h"

namespace hubzoo::quant {

// [[maybe_unused]]: a build with only a scalar target (the fuzz tree) has no tiled kernel.
[[maybe_unused]] constexpr int64_t kNR = 4;    // weight rows per tile
[[maybe_unused]] constexpr int64_t kKC = 512;  // k per range (a multiple of 256 and of 16)
// Rows of x per chunk in the exact mode: as many as keep the chunk (rows x k
// floats) within ~512 KiB of L2, from 32 to 128; each weight tile is decoded
// once per chunk (the decoding was ~17% of a 512-token prefill at 32 rows).
[[maybe_unused]] constexpr int64_t kRows = 32;
[[maybe_unused]] constexpr int64_t kRowsMax = 128;
inline int64_t exact_chunk_rows(int64_t k) {
  return std::clamp<int64_t>((512 * 1024 / 4) / std::max<int64_t>(k, 1), kRows, kRowsMax) / 4 * 4;
}
// Int8 rows are a quarter of the bytes: 4x the rows per chunk, so each weight
// row is decoded a quarter as often (the decoding was ~40% of the tile time).
[[maybe_unused]] constexpr int64_t kRows8 = 128;

// Rows of x after k_perm: x row r, gathered into `buf` when w has a permutation.
inline const float* gathered_row(const QuantMatmulArgs& a, int64_t r, float* buf) {
  const float* x = a.x + r * a.ldx;
  if (a.w->k_perm.empty()) return x;
  for (int64_t j = 0; j < a.w->k; ++j) buf[j] = x[a.w->k_perm[j]];
  return buf;
}

// Activations of every row quantized for the int8 mode (rows of x after k_perm).
struct Int8Acts {
  int64_t k = 0;
  int64_t block = kXBlock;  // x_block_of the weights' block: dx holds k / block scales per row
  std::vector<int8_t> qx;
  std::vector<float> dx;
  // Unique to each quantization (quantize_rows), 0 for none: what a kernel's
  // per-thread cache of sums over these activations (BlockSums) is keyed by.
  uint64_t version = 0;
  Int8Row row(int64_t r) { return {qx.data() + r * k, dx.data() + r * (k / block)}; }
  const int8_t* qx_row(int64_t r) const { return qx.data() + r * k; }
  const float* dx_row(int64_t r) const { return dx.data() + r * (k / block); }
};

// Exact mode over rows [r0, r1) x columns [n0, n1), scalar (the reference's arithmetic).
inline void exact_scalar(const QuantMatmulArgs& a, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const int64_t k = a.w->k;
  std::vector<float> w(k), xg(k);
  for (int64_t n = n0; n < n1; ++n) {
    a.w->dequantize_row(n, w.data());
    for (int64_t r = r0; r < r1; ++r) {
      const float s = exact_lane_dot(gathered_row(a, r, xg.data()), w.data(), k);
      a.y[r * a.ldy + n] = a.bias ? s + a.bias[n] : s;
    }
  }
}

// Weight rows [n, n + rows) over columns [k0, k0 + kc) in the widened int8
// form: w16/mn16 (row stride kc), a/c (row stride kc / block).
struct Int8Weights {
  std::vector<int16_t> w16, mn16;
  std::vector<float> a, c;
};
inline void decode_rows_int8(const QuantMatrix& w, int64_t n, int64_t rows, int64_t k0, int64_t kc,
                             Int8Weights& out) {
  const QuantTraits& tr = quant_traits(w.type);
  const int64_t nb = kc / tr.block_elems;
  const bool has_min = int8_has_min(w.type);
  out.w16.resize(rows * kc);
  out.mn16.resize(has_min ? rows * kc : 0);
  out.a.resize(rows * nb);
  out.c.resize(rows * nb);
  for (int64_t j = 0; j < rows; ++j) {
    const uint8_t* row = w.row(n + j) + k0 / tr.block_elems * tr.block_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = j * kc + b * tr.block_elems;
      decode_int8_wide(w.type, row + b * tr.block_bytes,
                       {out.w16.data() + at, has_min ? out.mn16.data() + at : nullptr,
                        out.a.data() + j * nb + b, out.c.data() + j * nb + b});
    }
  }
}

// Int8 mode over rows [r0, r1) x columns [n0, n1), scalar.
inline void int8_scalar(const QuantMatmulArgs& a, Int8Acts& acts, int64_t r0, int64_t r1,
                        int64_t n0, int64_t n1) {
  const int64_t k = a.w->k;
  const bool has_min = int8_has_min(a.w->type);
  Int8Weights wd;
  for (int64_t n = n0; n < n1; ++n) {
    decode_rows_int8(*a.w, n, 1, 0, k, wd);
    for (int64_t r = r0; r < r1; ++r) {
      const float s =
          int8_block_dot(acts.row(r), wd.w16.data(), has_min ? wd.mn16.data() : nullptr,
                         wd.a.data(), wd.c.data(), k, quant_traits(a.w->type).block_elems);
      a.y[r * a.ldy + n] = a.bias ? s + a.bias[n] : s;
    }
  }
}

}  // namespace hubzoo::quant
