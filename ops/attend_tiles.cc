// ops/attend_tiles.h: the scalar reference and, for AVX-512 targets, the
// kernel on AMX-BF16 tiles, compiled per SIMD target and dispatched at run
// time. Built with -ffp-contract=off (CMakeLists.txt): the softmax's
// t = s * scale and t - m must stay two roundings.
#include "ops/attend_tiles.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"
#include "ops/attend_online.h"
#include "ops/bf16.h"
#include "ops/cpu_amx.h"
#include "ops/flush_denormals.h"
#include "ops/scratch.h"

#ifndef HUBZOO_OPS_ATTEND_TILES_ONCE
#define HUBZOO_OPS_ATTEND_TILES_ONCE
namespace hubzoo {

// Element offsets of (position, dim) in a TileKv's keys and values.
inline int64_t key_index(const TileKv& kv, int64_t pos, int64_t c) {
  const int64_t rb = pos / kTileBlock - kv.block0, half = pos % kTileBlock / 16;
  return ((rb * 2 + half) * (kv.dk() / 32) + c / 32) * 512 + c % 32 / 2 * 32 + pos % 16 * 2 + c % 2;
}
inline int64_t value_index(const TileKv& kv, int64_t pos, int64_t c) {
  const int64_t rb = pos / kTileBlock - kv.block0;
  return rb * kTileBlock * kv.dv() + pos % kTileBlock / 2 * kv.dv() * 2 + c * 2 + pos % 2;
}

std::atomic<int64_t> g_attend_tiles_amx{0};

}  // namespace hubzoo
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attend_tiles.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/exp_f32-inl.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3

// Tile instructions with fixed registers (inline assembly: no target of
// Highway 1.0 enables them). Every tile is configured 16 rows x 64 bytes.
#define HUBZOO_TILE_LOAD(T)                                                                 \
  HWY_INLINE void TileLoad##T(const void* p, int64_t stride_bytes) {                        \
    asm volatile("tileloadd (%0,%1,1), %%tmm" #T : : "r"(p), "r"(stride_bytes) : "memory"); \
  }
#define HUBZOO_TILE_STORE(T)                                                                    \
  HWY_INLINE void TileStore##T(void* p, int64_t stride_bytes) {                                 \
    asm volatile("tilestored %%tmm" #T ", (%0,%1,1)" : : "r"(p), "r"(stride_bytes) : "memory"); \
  }
#define HUBZOO_TILE_ZERO(T) \
  HWY_INLINE void TileZero##T() { asm volatile("tilezero %%tmm" #T ::: "memory"); }
// tmm C += tmm A (16 rows x 32 bf16) times tmm B (16 pairs x 16 columns).
#define HUBZOO_TILE_DOT(C, A, B)                                               \
  HWY_INLINE void TileDot##C##A##B() {                                         \
    asm volatile("tdpbf16ps %%tmm" #B ", %%tmm" #A ", %%tmm" #C ::: "memory"); \
  }
HUBZOO_TILE_LOAD(2)
HUBZOO_TILE_LOAD(3)
HUBZOO_TILE_LOAD(4)
HUBZOO_TILE_LOAD(5)
HUBZOO_TILE_LOAD(6)
HUBZOO_TILE_STORE(0)
HUBZOO_TILE_STORE(1)
HUBZOO_TILE_STORE(2)
HUBZOO_TILE_STORE(3)
HUBZOO_TILE_ZERO(0)
HUBZOO_TILE_ZERO(1)
HUBZOO_TILE_ZERO(2)
HUBZOO_TILE_ZERO(3)
HUBZOO_TILE_DOT(0, 4, 2)
HUBZOO_TILE_DOT(1, 4, 3)
HUBZOO_TILE_DOT(0, 4, 5)
HUBZOO_TILE_DOT(1, 4, 6)
HUBZOO_TILE_DOT(2, 4, 5)
HUBZOO_TILE_DOT(3, 4, 6)
#undef HUBZOO_TILE_LOAD
#undef HUBZOO_TILE_STORE
#undef HUBZOO_TILE_ZERO
#undef HUBZOO_TILE_DOT

// 16 floats to 16 bf16 as vcvtneps2bf16 rounds (DAZ, nearest even).
HWY_INLINE __m256i ToBf16(__m512 v) {
  __m256i out;
  asm("vcvtneps2bf16 %1, %0" : "=v"(out) : "v"(v));
  return out;
}

HWY_INLINE __m512 FromBf16(__m256i b) {
  // The masked forms: GCC 12 warns of the unmasked ones' _mm512_undefined_*.
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, b);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));
}

// Lanes i of the 16 from position `first` with first + i in [a, b).
HWY_INLINE __mmask16 LanesIn(int64_t first, int64_t a, int64_t b) {
  const int64_t lo = std::clamp<int64_t>(a - first, 0, 16);
  const int64_t hi = std::clamp<int64_t>(b - first, 0, 16);
  if (hi <= lo) return 0;
  const uint32_t upto_hi = hi == 16 ? 0xFFFFu : (1u << hi) - 1u;
  return static_cast<__mmask16>(upto_hi & ~((1u << lo) - 1u));
}

// Row r of the scores (s: np floats from position p0) to its bf16
// probabilities (p: np values, zero outside [lo, end)); returns L.
HWY_INLINE float Softmax(const float* s, int64_t np, int64_t lo, int64_t end, float scale,
                         uint16_t* p) {
  const hn::CappedTag<float, 16> df;
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t u = lo / 16 * 16; u < end; u += 16) {
    const __mmask16 in = LanesIn(u, lo, end);
    vmax = _mm512_mask_max_ps(vmax, in, vmax, _mm512_mul_ps(_mm512_load_ps(s + u), vscale));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, vmax);
  const __m512 m = _mm512_set1_ps(*std::max_element(lanes, lanes + 16));
  __m512 l = _mm512_setzero_ps();
  for (int64_t u = 0; u < np; u += 16) {
    const __mmask16 in = LanesIn(u, lo, end);
    if (!in) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(p + u), _mm256_setzero_si256());
      continue;
    }
    const __m512 t = _mm512_mul_ps(_mm512_load_ps(s + u), vscale);
    const __m512 e = ExpF32(df, hn::Vec<decltype(df)>{_mm512_sub_ps(t, m)}).raw;
    const __m256i pb = ToBf16(_mm512_maskz_mov_ps(in, e));
    _mm256_store_si256(reinterpret_cast<__m256i*>(p + u), pb);
    l = _mm512_add_ps(l, FromBf16(pb));
  }
  _mm512_store_ps(lanes, l);
  return sum_lanes16(lanes);
}

void AttendTilesAmx(const TileKv& kv, const TileRows& r) {
  // The blocks some row sees, [b0, b0 + blocks) of kv's (the others add
  // nothing): a causal prompt's first rows read a few of the sequence's.
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (int64_t i = 0; i < r.rows; ++i) {
    if (r.end[i] > r.lo[i]) lo = std::min(lo, r.lo[i]), hi = std::max(hi, r.end[i]);
  }
  const int64_t b0 = hi > 0 ? lo / kTileBlock - kv.block0 : 0;
  const int64_t blocks = hi > 0 ? (hi + kTileBlock - 1) / kTileBlock - kv.block0 - b0 : 1;
  const int64_t d = kv.d, dk = kv.dk(), dv = kv.dv(), np = blocks * kTileBlock;
  const int64_t p0 = (kv.block0 + b0) * kTileBlock;
  thread_local AlignedScratch<uint16_t> qbuf, pbuf;
  thread_local AlignedScratch<float> sbuf, obuf;
  uint16_t* const qb = qbuf.get(kTileRows * dk);
  uint16_t* const pb = pbuf.get(kTileRows * np);
  float* const s = sbuf.get(kTileRows * np);
  float* const o = obuf.get(kTileRows * dv);
  FlushDenormals flush(true);
  // The queries in bf16, rows and dims past the rows' zero.
  for (int64_t i = 0; i < kTileRows; ++i) {
    uint16_t* row = qb + i * dk;
    for (int64_t c = 0; c < dk; c += 16) {
      const __mmask16 in = i < r.rows ? LanesIn(c, 0, d) : 0;
      const __m512 x = _mm512_maskz_loadu_ps(in, in ? r.q[i] + c : nullptr);
      _mm256_store_si256(reinterpret_cast<__m256i*>(row + c), ToBf16(x));
    }
  }
  AmxTileConfig::load_16x64();
  // Scores, 32 positions (two tiles) at a time.
  const int64_t dblocks = dk / 32, ls = np * 4;
  for (int64_t b = 0; b < blocks; ++b) {
    TileZero0();
    TileZero1();
    const uint16_t* keys = kv.keys + (b0 + b) * 2 * dblocks * 512;
    for (int64_t db = 0; db < dblocks; ++db) {
      TileLoad4(qb + db * 32, dk * 2);
      TileLoad2(keys + db * 512, 64);
      TileDot042();
      TileLoad3(keys + (dblocks + db) * 512, 64);
      TileDot143();
    }
    TileStore0(s + b * kTileBlock, ls);
    TileStore1(s + b * kTileBlock + 16, ls);
  }
  float total[kTileRows] = {};
  for (int64_t i = 0; i < kTileRows; ++i) {
    if (i < r.rows && r.end[i] > r.lo[i]) {
      total[i] = Softmax(s + i * np, np, r.lo[i] - p0, r.end[i] - p0, r.scale, pb + i * np);
    } else {
      std::memset(pb + i * np, 0, static_cast<size_t>(np) * sizeof(uint16_t));
    }
  }
  // Probabilities times values, four 16-column tiles at a time.
  for (int64_t c0 = 0; c0 < dv; c0 += 64) {
    const int64_t tiles = std::min<int64_t>(4, (dv - c0) / 16);
    TileZero0();
    TileZero1();
    TileZero2();
    TileZero3();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint16_t* v = kv.values + (b0 + b) * kTileBlock * dv + c0 * 2;
      TileLoad4(pb + b * kTileBlock, np * 2);
      TileLoad5(v, dv * 4);
      TileDot045();
      if (tiles > 1) TileLoad6(v + 32, dv * 4), TileDot146();
      if (tiles > 2) TileLoad5(v + 64, dv * 4), TileDot245();
      if (tiles > 3) TileLoad6(v + 96, dv * 4), TileDot346();
    }
    TileStore0(o + c0, dv * 4);
    if (tiles > 1) TileStore1(o + c0 + 16, dv * 4);
    if (tiles > 2) TileStore2(o + c0 + 32, dv * 4);
    if (tiles > 3) TileStore3(o + c0 + 48, dv * 4);
  }
  asm volatile("tilerelease" ::: "memory");
  for (int64_t i = 0; i < r.rows; ++i) {
    float* out = r.out[i];
    if (r.end[i] <= r.lo[i]) {
      std::fill_n(out, d, 0.0f);
      continue;
    }
    const __m512 inv = _mm512_set1_ps(total[i]);
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 in = LanesIn(c, 0, d);
      _mm512_mask_storeu_ps(out + c, in, _mm512_div_ps(_mm512_load_ps(o + i * dv + c), inv));
    }
  }
}

bool HasAmxKernel() { return true; }

// attend_tiles_pages: per row, scores of a page's 16 positions as one vector
// (the even and odd dim chains side by side), the softmax as above, then
// per 16 columns the even and odd position chains of each 32-block.
void AttendTilesPages(const TilePages& kv, const TileRows& r) {
  const int64_t d = kv.d, dk = (d + 31) / 32 * 32;
  thread_local AlignedScratch<uint16_t> pbuf;
  thread_local AlignedScratch<float> sbuf;
  FlushDenormals flush(true);
  alignas(64) float qb[512 + 32];
  for (int64_t i = 0; i < r.rows; ++i) {
    const int64_t lo = r.lo[i], end = r.end[i];
    if (end <= lo) {
      std::fill_n(r.out[i], d, 0.0f);
      continue;
    }
    for (int64_t c = 0; c < dk; c += 16) {
      const __mmask16 in = LanesIn(c, 0, d);
      const __m512 x = _mm512_maskz_loadu_ps(in, r.q[i] + (in ? c : 0));
      _mm512_store_ps(qb + c, FromBf16(ToBf16(x)));
    }
    const int64_t p0 = lo / 16 * 16, np = (end - p0 + 15) / 16 * 16;
    float* const s = sbuf.get(np);
    uint16_t* const p = pbuf.get(np);
    for (int64_t u = 0; u < np; u += 16) {
      const auto* keys = static_cast<const uint16_t*>(kv.key_pages[(p0 + u) / 16]) + kv.key_offset;
      __m512 total = _mm512_setzero_ps();
      for (int64_t c0 = 0; c0 < d; c0 += 32) {
        __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
        for (int64_t c = c0; c < std::min(c0 + 32, d); c += 2) {
          const auto* k = reinterpret_cast<const __m256i*>(keys + c * 16);
          even = _mm512_fmadd_ps(_mm512_set1_ps(qb[c]), FromBf16(_mm256_loadu_si256(k)), even);
          if (c + 1 < d) {
            odd = _mm512_fmadd_ps(_mm512_set1_ps(qb[c + 1]), FromBf16(_mm256_loadu_si256(k + 1)),
                                  odd);
          }
        }
        total = _mm512_add_ps(total, _mm512_add_ps(even, odd));
      }
      _mm512_store_ps(s + u, total);
    }
    const float sum = Softmax(s, np, lo - p0, end - p0, r.scale, p);
    const __m512 inv = _mm512_set1_ps(sum);
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 cols = LanesIn(c, 0, d);
      __m512 total = _mm512_setzero_ps();
      for (int64_t b = lo / kTileBlock; b * kTileBlock < end; ++b) {
        __m512 chain[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t j = std::max(lo, b * kTileBlock); j < std::min(end, (b + 1) * kTileBlock);
             ++j) {
          const auto* v = static_cast<const uint16_t*>(kv.value_pages[j / 16]) + kv.value_offset +
                          j % 16 * kv.value_stride + c;
          const __m512 vv = FromBf16(_mm256_maskz_loadu_epi16(cols, v));
          const __m512 pj = _mm512_set1_ps(bf16_to_float(p[j - p0]));
          chain[j % 2] = _mm512_fmadd_ps(pj, vv, chain[j % 2]);
        }
        total = _mm512_add_ps(total, _mm512_add_ps(chain[0], chain[1]));
      }
      _mm512_mask_storeu_ps(r.out[i] + c, cols, _mm512_div_ps(total, inv));
    }
  }
}

#else

void AttendTilesAmx(const TileKv& kv, const TileRows& r) { attend_tiles_reference(kv, r); }
bool HasAmxKernel() { return false; }
void AttendTilesPages(const TilePages&, const TileRows&) {
  throw InvalidArgument("attend_tiles_pages: no AVX-512 kernel on this target");
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(AttendTilesAmx);
HWY_EXPORT(HasAmxKernel);
HWY_EXPORT(AttendTilesPages);

void TileKv::clear() const {
  std::fill_n(keys, key_elements(), uint16_t{0});
  std::fill_n(values, value_elements(), uint16_t{0});
}

void TileKv::put(int64_t pos, const float* key, const float* value) const {
  std::vector<uint16_t> k(d), v(d);
  to_bf16(key, d, k.data());  // exact: the values are bf16 already
  to_bf16(value, d, v.data());
  put_bits(pos, k.data(), 1, v.data());
}

void TileKv::put_bits(int64_t pos, const uint16_t* key, int64_t key_stride,
                      const uint16_t* value) const {
  if (pos < block0 * kTileBlock || pos >= (block0 + blocks) * kTileBlock) {
    throw InvalidArgument("attend_tiles: position " + std::to_string(pos) +
                          " outside the packed blocks");
  }
  uint16_t* const k = keys + key_index(*this, pos, 0);  // dims 2i, 2i + 1 adjacent
  for (int64_t c = 0; c < d; ++c) k[c / 32 * 512 + c % 32 / 2 * 32 + c % 2] = key[c * key_stride];
  uint16_t* const v = values + value_index(*this, pos, 0);
  for (int64_t c = 0; c < d; ++c) v[c * 2] = value[c];
}

void attend_tiles_reference(const TileKv& kv, const TileRows& r) {
  const int64_t d = kv.d, dk = kv.dk();
  std::vector<float> qb(dk), t, p;
  for (int64_t i = 0; i < r.rows; ++i) {
    const int64_t lo = r.lo[i], end = r.end[i];
    float* out = r.out[i];
    if (end <= lo) {
      std::fill_n(out, d, 0.0f);
      continue;
    }
    for (int64_t c = 0; c < dk; ++c) {
      qb[c] = c < d ? flush_denormal(round_bf16(flush_denormal(r.q[i][c]))) : 0.0f;
    }
    t.assign(end - lo, 0.0f);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j < end; ++j) {
      float total = 0.0f;
      for (int64_t c0 = 0; c0 < dk; c0 += 32) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t c = c0; c < c0 + 32; c += 2) {
          const float k0 = c < d ? bf16_to_float(kv.keys[key_index(kv, j, c)]) : 0.0f;
          const float k1 = c + 1 < d ? bf16_to_float(kv.keys[key_index(kv, j, c + 1)]) : 0.0f;
          even = flush_denormal(std::fma(qb[c], flush_denormal(k0), even));
          odd = flush_denormal(std::fma(qb[c + 1], flush_denormal(k1), odd));
        }
        total = flush_denormal(total + flush_denormal(even + odd));
      }
      t[j - lo] = flush_denormal(total * r.scale);
      m = std::max(m, t[j - lo]);
    }
    float lanes[16] = {};
    p.assign(end - lo, 0.0f);
    for (int64_t j = lo; j < end; ++j) {
      p[j - lo] = round_bf16(exp_f32(flush_denormal(t[j - lo] - m)));
      lanes[j % 16] = flush_denormal(lanes[j % 16] + p[j - lo]);
    }
    const float L = sum_lanes16(lanes);
    for (int64_t c = 0; c < d; ++c) {
      float total = 0.0f;
      for (int64_t b = lo / kTileBlock; b * kTileBlock < end; ++b) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t j = b * kTileBlock; j < (b + 1) * kTileBlock; j += 2) {
          if (j >= lo && j < end) {
            const float v = flush_denormal(bf16_to_float(kv.values[value_index(kv, j, c)]));
            even = flush_denormal(std::fma(p[j - lo], v, even));
          }
          if (j + 1 >= lo && j + 1 < end) {
            const float v = flush_denormal(bf16_to_float(kv.values[value_index(kv, j + 1, c)]));
            odd = flush_denormal(std::fma(p[j + 1 - lo], v, odd));
          }
        }
        total = flush_denormal(total + flush_denormal(even + odd));
      }
      out[c] = flush_denormal(total / L);
    }
  }
}

namespace {
void check_rows(const TileRows& r) {
  if (r.rows < 0 || r.rows > kTileRows) {
    throw InvalidArgument("attend_tiles: " + std::to_string(r.rows) + " rows (at most 16)");
  }
}
}  // namespace

void attend_tiles(const TileKv& kv, const TileRows& r) {
  check_rows(r);
  for (int64_t i = 0; i < r.rows; ++i) {
    if (r.end[i] > r.lo[i] &&
        (r.lo[i] < kv.block0 * kTileBlock || r.end[i] > (kv.block0 + kv.blocks) * kTileBlock)) {
      throw InvalidArgument("attend_tiles: a row's positions outside the packed blocks");
    }
  }
  if (attend_tiles_amx()) {
    g_attend_tiles_amx.fetch_add(1, std::memory_order_relaxed);
    HWY_DYNAMIC_DISPATCH(AttendTilesAmx)(kv, r);
    return;
  }
  attend_tiles_reference(kv, r);
}

void attend_tiles_pages(const TilePages& kv, const TileRows& r) {
  check_rows(r);
  if (kv.d > 512) throw InvalidArgument("attend_tiles_pages: head_dim over 512");
  if (HWY_DYNAMIC_DISPATCH(HasAmxKernel)()) return HWY_DYNAMIC_DISPATCH(AttendTilesPages)(kv, r);
  // Elsewhere (tests): the rows' positions packed, then the reference.
  int64_t lo = std::numeric_limits<int64_t>::max(), end = 0;
  for (int64_t i = 0; i < r.rows; ++i) {
    if (r.end[i] > r.lo[i]) lo = std::min(lo, r.lo[i]), end = std::max(end, r.end[i]);
  }
  if (end == 0) lo = 0;
  TileKv t;
  t.d = kv.d;
  t.block0 = lo / kTileBlock;
  t.blocks = std::max<int64_t>(1, (end + kTileBlock - 1) / kTileBlock - t.block0);
  std::vector<uint16_t> keys(t.key_elements()), values(t.value_elements());
  t.keys = keys.data();
  t.values = values.data();
  t.clear();
  for (int64_t j = lo; j < end; ++j) {
    const auto* k = static_cast<const uint16_t*>(kv.key_pages[j / 16]) + kv.key_offset + j % 16;
    const auto* v = static_cast<const uint16_t*>(kv.value_pages[j / 16]) + kv.value_offset +
                    j % 16 * kv.value_stride;
    t.put_bits(j, k, 16, v);
  }
  attend_tiles_reference(t, r);
}

bool attend_tiles_amx() { return amx_bf16_ready() && HWY_DYNAMIC_DISPATCH(HasAmxKernel)(); }

int64_t attend_tiles_amx_calls() { return g_attend_tiles_amx.load(); }

}  // namespace hubzoo
#endif  // HWY_ONCE
