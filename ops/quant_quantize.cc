// Quantizers: llama.cpp's reference quantizers (quantize_row_*_ref in
// ggml-quants.c), reimplemented from their definitions. Q8_0, Q4_0, Q4_1,
// Q5_0 and Q5_1 give the bytes of gguf-py's quants.quantize; the K types
// (Q4_K, Q5_K, Q6_K) are in ops/quant_quantize_k.cc.
// Compiled with -ffp-contract=off (CMakeLists.txt): every a * b + c rounds
// twice, as numpy does.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "base/error.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"

namespace hubzoo {
namespace {

using quant::float_to_fp16;

void store_fp16(uint8_t* p, float v) {
  const uint16_t h = float_to_fp16(v);
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// Value of largest magnitude, the first on ties (gguf-py's argmax of abs; an
// all-zero block gives x[0], whose sign then reaches d).
float signed_absmax(const float* x) {
  int best = 0;
  for (int j = 1; j < 32; ++j) {
    if (std::fabs(x[j]) > std::fabs(x[best])) best = j;
  }
  return x[best];
}

// Q4_0 (nmax 8 / bias 8.5, 15) and Q5_0 (16 / 16.5, 31): d = max / -nmax.
void quantize_sym(const float* x, uint8_t* b, float nmax, int top, bool five) {
  const float d = signed_absmax(x) / -nmax;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_fp16(b, d);
  uint32_t qh = 0;
  uint8_t* qs = b + (five ? 6 : 2);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(top, static_cast<int>(std::trunc(x[j] * id + (nmax + 0.5f))));
    const int q1 = std::min(top, static_cast<int>(std::trunc(x[j + 16] * id + (nmax + 0.5f))));
    qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  if (five) std::memcpy(b + 2, &qh, 4);
}

// Q4_1 (15) and Q5_1 (31): d = (max - min) / nmax, m = min.
void quantize_affine(const float* x, uint8_t* b, int nmax, bool five) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) min = std::min(min, x[j]), max = std::max(max, x[j]);
  const float d = (max - min) / static_cast<float>(nmax);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_fp16(b, d);
  store_fp16(b + 2, min);
  uint32_t qh = 0;
  uint8_t* qs = b + (five ? 8 : 4);
  for (int j = 0; j < 16; ++j) {
    const float v0 = std::trunc((x[j] - min) * id + 0.5f);
    const float v1 = std::trunc((x[j + 16] - min) * id + 0.5f);
    const int q0 = std::clamp(static_cast<int>(v0), 0, nmax);
    const int q1 = std::clamp(static_cast<int>(v1), 0, nmax);
    qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  if (five) std::memcpy(b + 4, &qh, 4);
}

void quantize_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_fp16(b, d);
  for (int j = 0; j < 32; ++j)
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

void quantize_block(QuantType t, const float* x, uint8_t* b) {
  switch (t) {
    case QuantType::Q8_0:
      return quantize_q8_0(x, b);
    case QuantType::Q4_0:
      return quantize_sym(x, b, 8.0f, 15, false);
    case QuantType::Q5_0:
      return quantize_sym(x, b, 16.0f, 31, true);
    case QuantType::Q4_1:
      return quantize_affine(x, b, 15, false);
    case QuantType::Q5_1:
      return quantize_affine(x, b, 31, true);
    default:
      if (quant::quantize_k_block(t, x, b)) return;
      break;
  }
  throw InvalidArgument("quantize: no quantizer for " + std::string(quant_name(t)));
}

}  // namespace

bool can_quantize(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
    case QuantType::Q4_0:
    case QuantType::Q4_1:
    case QuantType::Q5_0:
    case QuantType::Q5_1:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_row(QuantType t, const float* x, void* blocks, int64_t k) {
  const QuantTraits& q = quant_traits(t);
  quant_row_bytes(t, k);  // checks k
  if (!can_quantize(t)) {
    throw InvalidArgument("quantize: no quantizer for " + std::string(q.name));
  }
  if (!x || !blocks) throw InvalidArgument("quantize_row: null input or output");
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < k / q.block_elems; ++i) {
    quantize_block(t, x + i * q.block_elems, b + i * q.block_bytes);
  }
}

namespace {
// An owned matrix of t's blocks for [n, k] weights, to be filled: its rows'
// buffer in out (kept alive by the matrix).
QuantMatrix owned_quant_matrix(QuantType t, int64_t n, int64_t k, uint8_t*& out) {
  if (n < 0) throw InvalidArgument("quantize_matrix: negative row count");
  QuantMatrix m;
  m.type = t;
  m.n = n;
  m.k = k;
  m.row_bytes = quant_row_bytes(t, k);
  if (!can_quantize(t)) {
    throw InvalidArgument("quantize: no quantizer for " + std::string(quant_name(t)));
  }
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(m.bytes()));
  out = buf->data();
  m.data = buf->data();
  m.keep = buf;
  return m;
}
}  // namespace

QuantMatrix quantize_matrix(QuantType t, const float* w, int64_t n, int64_t k, ThreadPool& pool) {
  uint8_t* dst;
  QuantMatrix m = owned_quant_matrix(t, n, k, dst);
  if (n > 0 && !w) throw InvalidArgument("quantize_matrix: null weights");
  pool.parallel_for(n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quantize_row(t, w + r * k, dst + r * m.row_bytes, k);
  });
  return m;
}

QuantMatrix quantize_matrix_chunked(QuantType t, int64_t n, int64_t k,
                                    const std::function<void(int64_t, int64_t, float*)>& read,
                                    ThreadPool& pool) {
  uint8_t* buf;
  QuantMatrix m = owned_quant_matrix(t, n, k, buf);
  const int64_t chunk = std::max<int64_t>(1, kQuantizeChunkFloats / std::max<int64_t>(1, k));
  std::vector<float> rows(static_cast<size_t>(std::min(n, chunk) * k));
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    read(r0, r1, rows.data());
    uint8_t* dst = buf + r0 * m.row_bytes;
    pool.parallel_for(r1 - r0, 1, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) quantize_row(t, &rows[r * k], dst + r * m.row_bytes, k);
    });
  }
  return m;
}

}  // namespace hubzoo
