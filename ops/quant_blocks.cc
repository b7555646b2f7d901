// Block formats: dequantization (bit for bit gguf-py's quants.dequantize),
// the int8-mode decoding of a block, and the QuantMatrix helpers.
//
// Every dequantized weight is one float32 expression of gguf-py's, in its
// order: products of an fp16 scale and small integers are exact in float32,
// so the only roundings are the ones gguf-py makes too (compiled with
// -ffp-contract=off all the same, see CMakeLists.txt).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"

namespace hubzoo {
namespace quant {
namespace {

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
void scale_min_k4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K: signed 6-bit scale of group g (0..15) from the 12 packed bytes.
int scale_q3k(int g, const uint8_t* s) {
  const int low = g < 8 ? s[g] & 0xF : s[g - 8] >> 4;
  const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The integer q of element l of a block and its group's float scale (w = a*q)
// or affine pair (w = a*q - b): one table-free decoding per type, shared by
// dequantization (float) and the int8 mode (integers).
int q4_nibble(const uint8_t* qs, int l) { return l < 16 ? qs[l] & 0xF : qs[l - 16] >> 4; }
int q5_value(const uint8_t* qh, const uint8_t* qs, int l) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return q4_nibble(qs, l) | static_cast<int>(((h >> l) & 1u) << 4);
}
int q2k_value(const uint8_t* qs, int l) {  // Q2_K: 2 bits of qs[(l/128)*32 + l%32]
  return (qs[(l / 128) * 32 + l % 32] >> (2 * ((l % 128) / 32))) & 3;
}
int q3k_value(const uint8_t* hmask, const uint8_t* qs, int l) {
  const int low = q2k_value(qs, l);
  const int high = (hmask[l % 32] >> (l / 32)) & 1;
  return low - (high ? 0 : 4);
}
int q4k_value(const uint8_t* qs, int l) {  // sub-block j = l/32 uses qs[(j/2)*32 + l%32]
  const int j = l / 32;
  return (qs[(j / 2) * 32 + l % 32] >> (4 * (j % 2))) & 0xF;
}
int q6k_value(const uint8_t* ql, const uint8_t* qh, int l) {
  const int half = l / 128, r = l % 128;
  const int low = (ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
  const int high = (qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
  return (low | (high << 4)) - 32;
}

struct Q4KHead {
  float d, dmin;
  const uint8_t* scales;
};
Q4KHead q4k_head(const uint8_t* b) { return {load_fp16(b), load_fp16(b + 2), b + 4}; }

// The K types (256-weight super-blocks).
void dequantize_k_block(QuantType t, const uint8_t* b, float* y) {
  switch (t) {
    case QuantType::Q2_K: {  // scales[16], qs[64], d, dmin
      const float d = load_fp16(b + 80), dmin = load_fp16(b + 82);
      for (int g = 0; g < 16; ++g) {
        const float dl = d * static_cast<float>(b[g] & 0xF);
        const float ml = dmin * static_cast<float>(b[g] >> 4);
        for (int l = g * 16; l < g * 16 + 16; ++l) {
          y[l] = dl * static_cast<float>(q2k_value(b + 16, l)) - ml;
        }
      }
      return;
    }
    case QuantType::Q3_K: {  // hmask[32], qs[64], scales[12], d
      const float d = load_fp16(b + 108);
      for (int g = 0; g < 16; ++g) {
        const float dl = d * static_cast<float>(scale_q3k(g, b + 96));
        for (int l = g * 16; l < g * 16 + 16; ++l) {
          y[l] = dl * static_cast<float>(q3k_value(b, b + 32, l));
        }
      }
      return;
    }
    case QuantType::Q4_K:
    case QuantType::Q5_K: {  // d, dmin, scales[12], (Q5_K: qh[32]), qs[128]
      const Q4KHead h = q4k_head(b);
      const bool five = t == QuantType::Q5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = five ? b + 48 : b + 16;
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(j, h.scales, &sc, &m);
        const float dl = h.d * static_cast<float>(sc);
        const float ml = h.dmin * static_cast<float>(m);
        for (int l = j * 32; l < j * 32 + 32; ++l) {
          const int q = q4k_value(qs, l) | (five ? ((qh[l % 32] >> j) & 1) << 4 : 0);
          y[l] = dl * static_cast<float>(q) - ml;
        }
      }
      return;
    }
    case QuantType::Q6_K: {  // ql[128], qh[64], scales[16] (int8), d
      const float d = load_fp16(b + 208);
      for (int g = 0; g < 16; ++g) {
        const float dl = d * static_cast<float>(static_cast<int8_t>(b[192 + g]));
        for (int l = g * 16; l < g * 16 + 16; ++l) {
          y[l] = dl * static_cast<float>(q6k_value(b, b + 128, l));
        }
      }
      return;
    }
    default:
      break;
  }
  throw InvalidArgument("dequantize: not a K type");
}

void dequantize_block(QuantType t, const uint8_t* b, float* y) {
  switch (t) {
    case QuantType::Q4_0: {
      const float d = load_fp16(b);
      for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>(q4_nibble(b + 2, l) - 8);
      return;
    }
    case QuantType::Q4_1: {
      const float d = load_fp16(b), m = load_fp16(b + 2);
      for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>(q4_nibble(b + 4, l)) + m;
      return;
    }
    case QuantType::Q5_0: {
      const float d = load_fp16(b);
      for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>(q5_value(b + 2, b + 6, l) - 16);
      return;
    }
    case QuantType::Q5_1: {
      const float d = load_fp16(b), m = load_fp16(b + 2);
      for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>(q5_value(b + 4, b + 8, l)) + m;
      return;
    }
    case QuantType::Q8_0: {
      const float d = load_fp16(b);
      for (int l = 0; l < 32; ++l) y[l] = static_cast<float>(static_cast<int8_t>(b[2 + l])) * d;
      return;
    }
    case QuantType::Q2_K:
    case QuantType::Q3_K:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K:
      return dequantize_k_block(t, b, y);
    case QuantType::Q4_G: {  // f32 scale, i8 zero, 3 pad, qs[16]
      float s;
      std::memcpy(&s, b, 4);
      const int zero = static_cast<int8_t>(b[4]);
      for (int l = 0; l < 32; ++l) y[l] = s * static_cast<float>(q4_nibble(b + 8, l) - zero);
      return;
    }
    case QuantType::Q8_G: {  // f32 scale, i8 zero, 3 pad, q[32] (int8)
      float s;
      std::memcpy(&s, b, 4);
      const int zero = static_cast<int8_t>(b[4]);
      for (int l = 0; l < 32; ++l) {
        y[l] = s * static_cast<float>(static_cast<int8_t>(b[8 + l]) - zero);
      }
      return;
    }
  }
  throw InvalidArgument("dequantize: unknown QuantType");
}

void set_groups(Int8Block* o, int groups, int32_t sc, int32_t off, int32_t mn) {
  for (int g = 0; g < groups; ++g) o->sc[g] = sc, o->off[g] = off, o->mn[g] = mn;
}

}  // namespace

bool int8_has_min(QuantType t) {
  return t == QuantType::Q4_1 || t == QuantType::Q5_1 || t == QuantType::Q2_K ||
         t == QuantType::Q4_K || t == QuantType::Q5_K;
}

void decode_int8(QuantType t, const uint8_t* b, Int8Block* o) {
  o->c = 0.0f;
  switch (t) {
    case QuantType::Q4_0:
    case QuantType::Q4_1:
    case QuantType::Q5_0:
    case QuantType::Q5_1: {
      const bool has_m = t == QuantType::Q4_1 || t == QuantType::Q5_1;
      const bool five = t == QuantType::Q5_0 || t == QuantType::Q5_1;
      o->a = load_fp16(b);
      if (has_m) o->c = load_fp16(b + 2);
      const uint8_t* p = b + (has_m ? 4 : 2);
      const int bias = has_m ? 0 : (five ? 16 : 8);
      for (int l = 0; l < 32; ++l) {
        const int q = five ? q5_value(p, p + 4, l) : q4_nibble(p, l);
        o->q[l] = static_cast<int8_t>(q - bias);
      }
      set_groups(o, 2, 1, 0, has_m ? 1 : 0);
      return;
    }
    case QuantType::Q8_0:
      o->a = load_fp16(b);
      std::memcpy(o->q, b + 2, 32);
      set_groups(o, 2, 1, 0, 0);
      return;
    case QuantType::Q2_K:
      o->a = load_fp16(b + 80);
      o->c = -load_fp16(b + 82);
      for (int l = 0; l < 256; ++l) o->q[l] = static_cast<int8_t>(q2k_value(b + 16, l));
      for (int g = 0; g < 16; ++g) o->sc[g] = b[g] & 0xF, o->off[g] = 0, o->mn[g] = b[g] >> 4;
      return;
    case QuantType::Q3_K:
      o->a = load_fp16(b + 108);
      for (int l = 0; l < 256; ++l) o->q[l] = static_cast<int8_t>(q3k_value(b, b + 32, l));
      for (int g = 0; g < 16; ++g) o->sc[g] = scale_q3k(g, b + 96), o->off[g] = 0, o->mn[g] = 0;
      return;
    case QuantType::Q4_K:
    case QuantType::Q5_K: {
      const Q4KHead h = q4k_head(b);
      const bool five = t == QuantType::Q5_K;
      const uint8_t* qs = five ? b + 48 : b + 16;
      o->a = h.d;
      o->c = -h.dmin;
      for (int l = 0; l < 256; ++l) {
        const int q = q4k_value(qs, l) | (five ? ((b[16 + l % 32] >> (l / 32)) & 1) << 4 : 0);
        o->q[l] = static_cast<int8_t>(q);
      }
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(j, h.scales, &sc, &m);
        for (int g = 2 * j; g < 2 * j + 2; ++g) o->sc[g] = sc, o->off[g] = 0, o->mn[g] = m;
      }
      return;
    }
    case QuantType::Q6_K:
      o->a = load_fp16(b + 208);
      for (int l = 0; l < 256; ++l) o->q[l] = static_cast<int8_t>(q6k_value(b, b + 128, l));
      for (int g = 0; g < 16; ++g) {
        o->sc[g] = static_cast<int8_t>(b[192 + g]), o->off[g] = 0, o->mn[g] = 0;
      }
      return;
    case QuantType::Q4_G:
    case QuantType::Q8_G: {
      std::memcpy(&o->a, b, 4);
      const int zero = static_cast<int8_t>(b[4]);
      for (int l = 0; l < 32; ++l) {
        o->q[l] = t == QuantType::Q4_G ? static_cast<int8_t>(q4_nibble(b + 8, l))
                                       : static_cast<int8_t>(b[8 + l]);
      }
      set_groups(o, 2, 1, -zero, 0);
      return;
    }
  }
  throw InvalidArgument("decode_int8: unknown QuantType");
}

void decode_int8_wide(QuantType t, const uint8_t* block, Int8Wide out) {
  Int8Block d;
  decode_int8(t, block, &d);
  const int64_t elems = quant_traits(t).block_elems;
  for (int64_t l = 0; l < elems; ++l) {
    out.w16[l] = static_cast<int16_t>(d.sc[l / 16] * d.q[l] + d.off[l / 16]);
    if (out.mn16) out.mn16[l] = static_cast<int16_t>(d.mn[l / 16]);
  }
  *out.a = d.a;
  *out.c = d.c;
}

void quantize_activations(const float* x, int64_t k, int64_t block, Int8Row out) {
  for (int64_t b0 = 0; b0 < k; b0 += block) {
    float amax = 0.0f;
    for (int64_t i = b0; i < b0 + block; ++i) amax = std::max(amax, std::abs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.dx[b0 / block] = d;
    for (int64_t i = b0; i < b0 + block; ++i) {
      // Round half to even by adding and subtracting 1.5 * 2^23 (|x * id| <= 127.x
      // here): the same value as std::nearbyint, without its libm call.
      const float r = (x[i] * id + 12582912.0f) - 12582912.0f;
      const float v = r == r ? std::clamp(r, -127.0f, 127.0f) : 0.0f;  // NaN (x or id inf): 0
      out.qx[i] = static_cast<int8_t>(v);
    }
  }
}

float int8_block_dot(const Int8Row& x, const int16_t* w16, const int16_t* mn16, const float* a,
                     const float* c, int64_t k, int64_t block) {
  float acc = 0.0f;
  if (x_block_of(block) == kXHalf) {
    for (int64_t b = 0; b < k / block; ++b) {
      int32_t i[2] = {0, 0}, j[2] = {0, 0};
      for (int64_t e = b * block; e < (b + 1) * block; ++e) {
        const int h = static_cast<int>((e - b * block) / kXHalf);
        i[h] += w16[e] * x.qx[e];
        if (mn16) j[h] += mn16[e] * x.qx[e];
      }
      const float d0 = x.dx[2 * b], d1 = x.dx[2 * b + 1];
      acc = std::fma(a[b], std::fma(d1, static_cast<float>(i[1]), d0 * static_cast<float>(i[0])),
                     acc);
      if (mn16) {
        acc = std::fma(c[b], std::fma(d1, static_cast<float>(j[1]), d0 * static_cast<float>(j[0])),
                       acc);
      }
    }
    return acc;
  }
  for (int64_t s = 0; s < k / kXBlock; ++s) {
    int32_t i = 0, j = 0;
    for (int64_t e = s * kXBlock; e < (s + 1) * kXBlock; ++e) {
      i += w16[e] * x.qx[e];
      if (mn16) j += mn16[e] * x.qx[e];
    }
    const int64_t b = s * kXBlock / block;
    acc = std::fma(a[b] * x.dx[s], static_cast<float>(i), acc);
    if (mn16) acc = std::fma(c[b] * x.dx[s], static_cast<float>(j), acc);
  }
  return acc;
}

namespace {
// How this CPU's decode steps read 32-weight panels by default
// (int8_decode_streams(), int8_decode_prefetch()). Three streams, each
// prefetched in software, won where they were introduced: Zen 2 on the AVX2
// kernels (1.1-1.25x in the kernels, bench/results/decode_streams.md) and
// the Xeon (family 6 model 207) on the VNNI ones (decode b1 Qwen2.5-Coder-0.5B
// 1.13x, SmolLM2 Q4_0 1.07x). On Zen 4 (AVX-512 VNNI, no AMX) one stream
// read by the hardware prefetchers alone wins: decode b1 1.04-1.22x on six
// files (one stream against three 0.97-1.13x, then no software prefetch
// 1.01-1.07x more; bench/results/decode_reads_zen4.md). AMD's cores with
// AVX-512 (Zen 4, Zen 5) read that way; Zen 5 is unmeasured.
struct DecodeReads {
  int streams = 3;
  bool prefetch = true;
};
DecodeReads DefaultDecodeReads() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();  // (this runs from a static initializer)
  if (__builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f")) return {1, false};
#endif
  return {};
}

std::atomic<bool> g_vnni_allowed{true};
std::atomic<bool> g_amx_enabled{false};
std::atomic<int64_t> g_amx_tiles{0};
std::atomic<bool> g_fused_allowed{true};
std::atomic<int> g_decode_streams{DefaultDecodeReads().streams};
std::atomic<bool> g_decode_prefetch{DefaultDecodeReads().prefetch};
std::atomic<int64_t> g_long_piece_bytes{int64_t{4} << 20};
}  // namespace
bool int8_vnni_allowed() { return g_vnni_allowed.load(std::memory_order_relaxed); }
void set_int8_vnni_allowed(bool allowed) { g_vnni_allowed.store(allowed); }
bool int8_amx_enabled() { return g_amx_enabled.load(std::memory_order_relaxed); }
void set_int8_amx_enabled(bool enabled) { g_amx_enabled.store(enabled); }
int64_t int8_amx_tiles() { return g_amx_tiles.load(std::memory_order_relaxed); }
void count_int8_amx_tile() { g_amx_tiles.fetch_add(1, std::memory_order_relaxed); }
bool int8_fused_allowed() { return g_fused_allowed.load(std::memory_order_relaxed); }
void set_int8_fused_allowed(bool allowed) { g_fused_allowed.store(allowed); }
int int8_decode_streams() { return g_decode_streams.load(std::memory_order_relaxed); }
void set_int8_decode_streams(int streams) {
  g_decode_streams.store(std::clamp(streams, 1, kMaxDecodeStreams));
}
bool int8_decode_prefetch() { return g_decode_prefetch.load(std::memory_order_relaxed); }
void set_int8_decode_prefetch(bool prefetch) { g_decode_prefetch.store(prefetch); }
int64_t int8_long_piece_bytes() { return g_long_piece_bytes.load(std::memory_order_relaxed); }
void set_int8_long_piece_bytes(int64_t bytes) {
  g_long_piece_bytes.store(std::max<int64_t>(0, bytes));
}

float exact_lane_dot(const float* x, const float* w, int64_t k) {
  float acc[16] = {};
  for (int64_t i = 0; i < k; ++i) acc[i % 16] = std::fma(x[i], w[i], acc[i % 16]);
  return lane_tree(acc);
}

}  // namespace quant

void dequantize_row(QuantType t, const void* blocks, float* out, int64_t k) {
  const QuantTraits& q = quant_traits(t);
  quant_row_bytes(t, k);  // checks k
  if (!blocks || !out) throw InvalidArgument("dequantize_row: null input or output");
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < k / q.block_elems; ++i) {
    quant::dequantize_block(t, b + i * q.block_bytes, out + i * q.block_elems);
  }
}

void QuantMatrix::dequantize_row(int64_t r, float* out) const {
  if (r < 0 || r >= n) {
    throw InvalidArgument("QuantMatrix::dequantize_row: row " + std::to_string(r) +
                          " outside [0, " + std::to_string(n) + ")");
  }
  if (panels) {
    std::vector<uint8_t> blocks(static_cast<size_t>(row_bytes));
    panel_row_blocks(*this, r, blocks.data());
    hubzoo::dequantize_row(type, blocks.data(), out, k);
    return;
  }
  hubzoo::dequantize_row(type, row(r), out, k);
}

void QuantMatrix::dequantize(float* out) const {
  std::fill(out, out + n * k, 0.0f);
  std::vector<float> row(k_perm.empty() ? 0 : static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    float* const dst = out + r * k;
    if (k_perm.empty()) {
      dequantize_row(r, dst);
      continue;
    }
    dequantize_row(r, row.data());
    for (int64_t j = 0; j < k; ++j) dst[k_perm[static_cast<size_t>(j)]] += row[j];
  }
}

QuantMatrix concat_quant(const std::vector<const QuantMatrix*>& parts) {
  if (parts.empty()) throw InvalidArgument("concat_quant: no parts");
  QuantMatrix out;
  out.type = parts[0]->type;
  out.k = parts[0]->k;
  out.row_bytes = parts[0]->row_bytes;
  for (const QuantMatrix* p : parts) {
    if (!p || p->type != out.type || p->k != out.k || p->row_bytes != out.row_bytes) {
      throw InvalidArgument("concat_quant: parts differ in type or k");
    }
    if (!p->k_perm.empty()) throw InvalidArgument("concat_quant: a part has a k permutation");
    if (!p->row_order.empty()) throw InvalidArgument("concat_quant: a part has a row order");
    if (p->n > 0 && !p->data) throw InvalidArgument("concat_quant: a part has no data");
    out.n += p->n;
  }
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(out.bytes()));
  uint8_t* dst = buf->data();
  for (const QuantMatrix* p : parts) {
    if (p->bytes() > 0) std::memcpy(dst, p->data, static_cast<size_t>(p->bytes()));
    dst += p->bytes();
  }
  out.data = buf->data();
  out.keep = buf;
  return out;
}

QuantMatrix permute_rows(const QuantMatrix& w, const std::vector<int64_t>& rows) {
  QuantMatrix out;
  out.type = w.type;
  out.k = w.k;
  out.row_bytes = w.row_bytes;
  out.n = static_cast<int64_t>(rows.size());
  out.k_perm = w.k_perm;
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(out.bytes()));
  for (int64_t i = 0; i < out.n; ++i) {
    if (rows[i] < 0 || rows[i] >= w.n) {
      throw InvalidArgument("permute_rows: row " + std::to_string(rows[i]) + " outside [0, " +
                            std::to_string(w.n) + ")");
    }
    std::memcpy(buf->data() + i * w.row_bytes, w.row(rows[i]), static_cast<size_t>(w.row_bytes));
  }
  out.data = buf->data();
  out.keep = buf;
  return out;
}

}  // namespace hubzoo
