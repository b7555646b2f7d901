// The K-type quantizers: llama.cpp's quantize_row_q4_K_ref, _q5_K_ref and
// _q6_K_ref (ggml-quants.c), reimplemented from their definitions so that
// the bytes equal theirs (python/tests/test_quant_llama_ref.py compiles
// ggml-quants.c and compares). That is also what llama-quantize writes for
// these types when no importance matrix is given. Every float expression
// keeps llama.cpp's operand order and rounding (one rounding per operation:
// this file is compiled with -ffp-contract=off, as ggml-base is compiled
// without FMA on x86-64).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/quant_internal.h"

namespace hubzoo::quant {
namespace {

void store_fp16(uint8_t* p, float v) {
  const uint16_t h = float_to_fp16(v);
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// ggml's nearest_int: round half to even via the 1.5 * 2^23 trick (exact for
// |v| < 2^22; outside it, the same bits as ggml's, whose assert is compiled out).
int nearest_int(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

// make_qkx2_quants: scale and min of n values on levels 0..nmax, minimising
// the weighted squared error over nstep + 1 trial scales around nmax / range.
struct Qkx2 {
  int n, nmax;
  float rmin, rdelta;
  int nstep;
};
float make_qkx2(const Qkx2& p, const float* x, const float* w, uint8_t* L, float* the_min) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < p.n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
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
    if (!(D > 0)) continue;
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

// Q4_K (nmax 15) and Q5_K (31): 8 sub-blocks of 32 with a 6-bit scale and
// min each (12 packed bytes at b + 4), fp16 d and dmin at b and b + 2. L gets
// the 256 levels for the caller to pack.
void quantize_scale_min_k(const float* x, uint8_t* b, const Qkx2& p, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2(p, xs, weights, L + 32 * j, &mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* s = b + 4;
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    // ggml stores nearest_int into a uint8_t before the MIN: keep the low byte.
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
  const float d = load_fp16(b), dmin = load_fp16(b + 2);
  for (int j = 0; j < 8; ++j) {
    const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    const float dl = d * static_cast<float>(sc);
    if (dl == 0.0f) continue;  // keeps make_qkx2's levels, as ggml does
    const float dm = dmin * static_cast<float>(m);
    for (int l = 32 * j; l < 32 * j + 32; ++l) {
      L[l] = static_cast<uint8_t>(std::clamp(nearest_int((x[l] + dm) / dl), 0, p.nmax));
    }
  }
}

// d, dmin, scales[12], qs[128]: byte l of each 32-byte run holds levels
// j + l (low nibble) and j + l + 32 (high) of the 64-level span j.
void quantize_q4_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quantize_scale_min_k(x, b, {32, 15, -1.0f, 0.1f, 20}, L);
  uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64, q += 32) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// d, dmin, scales[12], qh[32], qs[128]: as Q4_K for the low nibbles; bit
// 2s (2s + 1) of qh[l] is the fifth bit of level 64s + l (64s + l + 32).
void quantize_q5_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quantize_scale_min_k(x, b, {32, 31, -0.5f, 0.1f, 15}, L);
  uint8_t* qh = b + 16;
  uint8_t* ql = b + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) l1 -= 16, qh[j] |= m1;
      if (l2 > 15) l2 -= 16, qh[j] |= m2;
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
  }
}

// make_qx_quants(16, 32, x, L, rmse_type 1, no weights): a signed scale for
// levels -32..31 (stored + 32), trying 18 scales around -32 / max with
// weights x^2. An all-zero group (amax < 1e-15) gives scale 0 and levels 0.
float make_qx_q6(const float* x, uint8_t* L) {
  constexpr int n = 16, nmax = 32;
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) amax = ax, max = x[i];
  }
  if (amax < 1e-15f) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  auto level = [&](float iscale, int i) {
    return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = static_cast<uint8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(level(iscale, i) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ql[128], qh[64], scales[16] (int8), d (fp16 at 208). Per 128-level half h:
// ql[64h + l] holds levels l (low nibble) and l + 64 (high), ql[64h + l + 32]
// levels l + 32 and l + 96; qh[32h + l] their top two bits, 2 bits each.
void quantize_q6_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = make_qx_q6(x + 16 * ib, L + 16 * ib);
    const float abs_scale = std::fabs(scales[ib]);
    if (abs_scale > max_abs_scale) max_abs_scale = abs_scale, max_scale = scales[ib];
  }
  std::memset(b, 0, 210);
  if (max_abs_scale < 1e-15f) return;  // all zero: every byte 0 (d = +0)
  const float iscale = -128.0f / max_scale;
  store_fp16(b + 208, 1 / iscale);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int ib = 0; ib < 16; ++ib) {
    sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  }
  const float d0 = load_fp16(b + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = d0 * static_cast<float>(sc[j]);
    if (d == 0.0f) continue;  // keeps make_qx_q6's levels, as ggml does
    for (int i = 16 * j; i < 16 * j + 16; ++i) {
      L[i] = static_cast<uint8_t>(std::clamp(nearest_int(x[i] / d), -32, 31) + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* s = L + j + l;
      ql[l] = static_cast<uint8_t>((s[0] & 0xF) | ((s[64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((s[32] & 0xF) | ((s[96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((s[0] >> 4) | ((s[32] >> 4) << 2) | ((s[64] >> 4) << 4) |
                                   ((s[96] >> 4) << 6));
    }
  }
}

}  // namespace

bool quantize_k_block(QuantType t, const float* x, uint8_t* b) {
  switch (t) {
    case QuantType::Q4_K:
      return quantize_q4_k(x, b), true;
    case QuantType::Q5_K:
      return quantize_q5_k(x, b), true;
    case QuantType::Q6_K:
      return quantize_q6_k(x, b), true;
    default:
      return false;
  }
}

}  // namespace hubzoo::quant
