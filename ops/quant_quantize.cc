// Quantizers: llama.cpp's reference quantizers (quantize_row_*_ref in
// ggml-quants.c), reimplemented from their definitions. Q8_0, Q4_0, Q4_1,
// Q5_0 and Q5_1 give the bytes of gguf-py's quants.quantize; Q4_K follows
// quantize_row_q4_K_ref (make_qkx2_quants search, 6-bit scales and mins).
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
using quant::fp16_to_float;

void store_fp16(uint8_t* p, float v) {
  const uint16_t h = float_to_fp16(v);
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// ggml's nearest_int: round half to even via the 1.5 * 2^23 trick (|v| < 2^22).
int nearest_int(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007FFFFF) - 0x00400000;
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

// llama.cpp's make_qkx2_quants: the scale and min of n values with levels
// 0..nmax minimising the weighted error over a small grid of scales.
struct Qkx2 {
  int n, nmax;
  float rmin, rdelta;
  int nstep;
};
float make_qkx2(const Qkx2& p, const float* x, const float* w, uint8_t* L, float* the_min) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < p.n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + p.n, 0);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(p.nmax) / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < p.n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, p.nmax));
    const float diff = scale * L[i] + min - x[i];
    best += w[i] * (diff * diff);
  }
  uint8_t Laux[32];
  for (int is = 0; is <= p.nstep; ++is) {
    iscale =
        (p.rmin + p.rdelta * static_cast<float>(is) + static_cast<float>(p.nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < p.n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, p.nmax);
      Laux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * static_cast<float>(l);
      sum_l2 += w[i] * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w[i] * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur = 0;
    for (int i = 0; i < p.n; ++i) {
      const float diff = this_scale * Laux[i] + this_min - x[i];
      cur += w[i] * (diff * diff);
    }
    if (cur < best) {
      std::copy(Laux, Laux + p.n, L);
      best = cur;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

void quantize_q4_k(const float* x, uint8_t* b) {
  float scales[8], mins[8], weights[32];
  uint8_t L[256];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2({32, 15, -1.0f, 0.1f, 20}, xs, weights, L + 32 * j, &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* s = b + 4;
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int ls = std::min(63, nearest_int(inv_scale * scales[j]) & 0xFF);
    const int lm = std::min(63, nearest_int(inv_min * mins[j]) & 0xFF);
    if (j < 4) {
      s[j] = static_cast<uint8_t>(ls);
      s[j + 4] = static_cast<uint8_t>(lm);
    } else {
      s[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      s[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  store_fp16(b, max_scale / 63.0f);
  store_fp16(b + 2, max_min / 63.0f);
  const float d = fp16_to_float(quant::load_u16(b)), dmin = fp16_to_float(quant::load_u16(b + 2));
  for (int j = 0; j < 8; ++j) {
    const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    const float dl = d * static_cast<float>(sc);
    if (dl == 0.0f) continue;
    const float dm = dmin * static_cast<float>(m);
    for (int l = 32 * j; l < 32 * j + 32; ++l) {
      L[l] = static_cast<uint8_t>(std::clamp(nearest_int((x[l] + dm) / dl), 0, 15));
    }
  }
  uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
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
    case QuantType::Q4_K:
      return quantize_q4_k(x, b);
    default:
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

QuantMatrix quantize_matrix(QuantType t, const float* w, int64_t n, int64_t k, ThreadPool& pool) {
  if (n < 0) throw InvalidArgument("quantize_matrix: negative row count");
  QuantMatrix m;
  m.type = t;
  m.n = n;
  m.k = k;
  m.row_bytes = quant_row_bytes(t, k);
  if (!can_quantize(t)) {
    throw InvalidArgument("quantize: no quantizer for " + std::string(quant_name(t)));
  }
  if (n > 0 && !w) throw InvalidArgument("quantize_matrix: null weights");
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(m.bytes()));
  uint8_t* dst = buf->data();
  pool.parallel_for(n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quantize_row(t, w + r * k, dst + r * m.row_bytes, k);
  });
  m.data = buf->data();
  m.keep = buf;
  return m;
}

}  // namespace hubzoo
