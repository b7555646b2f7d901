// Per-target part of ops/quant_matmul.cc: the int8 mode's kernels for the K
// types (Q2_K .. Q6_K) over QuantMatrix::panels (the K panel
// layout of ops/quant.h), on AVX512-VNNI. A vector lane is one of the panel's
// 16 weight rows, as in the 32-weight types' panel kernels
// (ops/quant_int8_panels-inl.h): per column quad, one vector of the 16 rows'
// codes meets a broadcast of x's four bytes in one vpdpbusd. Per block and
// 32- (or 16-) column group, the 16 rows' group sums are multiplied by their
// 4-, 6- or 8-bit scales, decoded once per panel block for the 16 rows; the
// exact integers I and J of each 32-column chunk (quant.h's order) then enter
// the chunk's two fmas with its activation scale. The row
// kernels (ops/quant_int8_fused-inl.h) paid ~58 instructions per 144-byte
// Q4_K block-row, mostly unpacking each row's scales and codes; here it is
// ~14. The 256-bit kernels of CPUs without VNNI and the dispatch of a range
// are in ops/quant_int8_kpanels256-inl.h. Included by ops/quant_matmul.cc
// only, after quant_int8_panels-inl.h.
#if defined(HUBZOO_OPS_QUANT_INT8_KPANELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_KPANELS_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_KPANELS_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_KPANELS_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE && HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

// Per row of x, the integer sums of its activations over each group of G
// columns (the J term, and Q6_K's offset of 32), kept while the activations
// are unchanged (as BlockSums).
struct GroupSums {
  std::vector<int32_t> sum;  // [rows][k / G]
  // [rows][k / G / 2]: per two groups 2j, 2j + 1 (Q6_K's chunk j of
  // kXBlock columns), the int16 pair (sum 2j, sum 2j + 1) as a dword,
  // |sum| < 2^15 (the AVX2 Q6_K kernel's offset, a chunk per vpmaddwd).
  std::vector<int32_t> pairs;
  uint64_t version = 0;
  int64_t r0 = 0, r1 = 0, group = 0;
};

inline void SumGroups(const quant::Int8Acts& acts, int64_t r0, int64_t r1, int64_t group,
                      GroupSums& out) {
  if (acts.version != 0 && out.version == acts.version && out.r0 == r0 && out.r1 == r1 &&
      out.group == group) {
    return;
  }
  out.version = acts.version;
  out.r0 = r0;
  out.r1 = r1;
  out.group = group;
  const int64_t ng = acts.k / group;
  out.sum.resize((r1 - r0) * ng);
  out.pairs.resize((r1 - r0) * (ng / 2));
  const auto pair = [](int32_t lo, int32_t hi) {
    return static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xFFFF) | static_cast<uint32_t>(hi)
                                                                           << 16);
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* qx = acts.qx.data() + r * acts.k;
    int32_t* sum = out.sum.data() + (r - r0) * ng;
    for (int64_t g = 0; g < ng; ++g) {
      int32_t s = 0;
      for (int64_t e = 0; e < group; ++e) s += qx[g * group + e];
      sum[g] = s;
    }
    int32_t* pairs = out.pairs.data() + (r - r0) * (ng / 2);
    for (int64_t j = 0; j + 2 <= ng; j += 2) pairs[j / 2] = pair(sum[j], sum[j + 1]);
  }
}

using KPanelFn = void (*)(const QuantMatmulArgs&, quant::Int8Acts&, const GroupSums&, int64_t,
                          int64_t, int64_t, int64_t);

template <QuantType t>
constexpr int64_t kKPanelBlock = kPanelRows* kTraitsOf<t>.block_bytes;
// x's group sums per block: 32-column groups (Q4_K, Q5_K) or 16 (Q2_K, Q3_K, Q6_K).
constexpr int64_t KGroupsOf(QuantType t) {
  return t == QuantType::Q4_K || t == QuantType::Q5_K ? 8 : 16;
}
template <QuantType t>
constexpr int64_t kGroupsOf = KGroupsOf(t);
// Panel blocks prefetched ahead of the one being read (~14 KiB: the
// hardware prefetcher alone stops at every 4 KiB page; ~7 KiB was slower).
template <QuantType t>
constexpr int64_t kKPanelAhead = std::max<int64_t>(1, 14336 / kKPanelBlock<t>);

#if HWY_TARGET <= HWY_AVX3
HWY_DIAGNOSTICS(push)
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wmaybe-uninitialized")

// Byte j of every dword of v, zero-extended to the dword.
HWY_INLINE __m512i DwordByte(__m512i v, int j) {
  const __m128i c =
      _mm_setr_epi8(static_cast<char>(j), -1, -1, -1, static_cast<char>(4 + j), -1, -1, -1,
                    static_cast<char>(8 + j), -1, -1, -1, static_cast<char>(12 + j), -1, -1, -1);
  return _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(c));
}

// The 16 group scales of a Q2_K / Q3_K panel block decoded to bytes, as
// Q6_K's panel holds its int8 ones: vector out[v] holds at dword l row l's
// scales of groups 4v .. 4v + 3, out[4 + v] Q2_K's mins the same. Q3_K's
// are signed (scale_q3k: a low nibble of bytes 0 .. 7, two bits of byte
// 8 + g % 4, minus 32); Q2_K's scales and mins are its bytes' nibbles.
template <QuantType t, typename Load>
HWY_INLINE void KGroupScales(const Load& load, __m512i (&out)[8]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  if constexpr (t == QuantType::Q2_K) {
    for (int v = 0; v < 4; ++v) {
      const __m512i s = load(64 + 64 * v);
      out[v] = _mm512_and_si512(s, low4);
      out[4 + v] = _mm512_and_si512(_mm512_srli_epi16(s, 4), low4);
    }
  } else {
    const __m512i s0 = load(32), s1 = load(96), s2 = load(160);
    const __m512i top = _mm512_set1_epi8(0x30), bias = _mm512_set1_epi8(32);
    const __m512i low[4] = {_mm512_and_si512(s0, low4), _mm512_and_si512(s1, low4),
                            _mm512_and_si512(_mm512_srli_epi16(s0, 4), low4),
                            _mm512_and_si512(_mm512_srli_epi16(s1, 4), low4)};
    const __m512i high[4] = {_mm512_slli_epi16(s2, 4), _mm512_slli_epi16(s2, 2), s2,
                             _mm512_srli_epi16(s2, 2)};
    for (int v = 0; v < 4; ++v) {
      out[v] = _mm512_sub_epi8(_mm512_or_si512(low[v], _mm512_and_si512(high[v], top)), bias);
      out[4 + v] = _mm512_setzero_si512();
    }
  }
}

// The codes u (unsigned, w = sc (u - offset)) of a 16-column group type's
// panel block: u[s] holds at dword l row l's codes of columns
// 128h + 32s + 4q .. + 3. Q6_K: a ql nibble and 2 bits of qh << 4 (its
// runs in read order, ops/quant.h); Q2_K / Q3_K: bits 2s .. 2s + 1 of qs
// vector 8h + q, and Q3_K's third bit, bit 4h + s of hmask vector q.
template <QuantType t, typename Load>
HWY_INLINE void KGroupCodes(const Load& load, int h, int q, __m512i (&u)[4]) {
  if constexpr (t == QuantType::Q6_K) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
    const int64_t at = 288 + 768 * (2 * h + q / 4) + 64 * (q % 4);
    const __m512i qh = load(at), lo = load(at + 256), hi = load(at + 512);
    u[0] = _mm512_or_si512(_mm512_and_si512(lo, low4),
                           _mm512_and_si512(_mm512_slli_epi16(qh, 4), top));
    u[1] = _mm512_or_si512(_mm512_and_si512(hi, low4),
                           _mm512_and_si512(_mm512_slli_epi16(qh, 2), top));
    u[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo, 4), low4),
                           _mm512_and_si512(qh, top));
    u[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(hi, 4), low4),
                           _mm512_and_si512(_mm512_srli_epi16(qh, 2), top));
  } else {
    const __m512i three = _mm512_set1_epi8(3);
    const __m512i codes = load((t == QuantType::Q2_K ? 320 : 736) + 64 * (8 * h + q));
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) u[s] = _mm512_and_si512(_mm512_srli_epi16(codes, 2 * s), three);
    if constexpr (t == QuantType::Q3_K) {
      const __m512i hm = load(224 + 64 * q), four = _mm512_set1_epi8(4);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s)
        u[s] = _mm512_or_si512(u[s], _mm512_and_si512(ShiftBits(hm, 2 - (4 * h + s)), four));
    }
  }
}

// R rows of x from r against the K panel of weight rows n .. n + 15.
template <QuantType t, int R>
HWY_NOINLINE void KPanelRows(const QuantMatmulArgs& a, quant::Int8Acts& acts, const GroupSums& sums,
                             int64_t rc, int64_t r, int64_t n, int64_t n1) {
  constexpr int64_t kBlock = kKPanelBlock<t>;
  constexpr bool kSix = t == QuantType::Q6_K;
  constexpr int64_t kGroups = kGroupsOf<t>;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 256;
  const uint8_t* blk = w.panels.get() + n / kPanelRows * nb * kBlock;
  const uint8_t* const end =
      w.panels.get() + (n1 + kPanelRows - 1) / kPanelRows * nb * kBlock;  // this range's panels
  const int8_t* qx[R];
  const float* dx[R];
  const int32_t* xs[R];
  __m512 acc[R];
  for (int i = 0; i < R; ++i) {
    const quant::Int8Row row = acts.row(r + i);
    qx[i] = row.qx;
    dx[i] = row.dx;
    xs[i] = sums.sum.data() + (r + i - rc) * (w.k / sums.group);
    acc[i] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, blk += kBlock) {
    // A quarter of the block kKPanelAhead ahead per quarter of this one: a
    // whole block's lines at once were too many requests in flight.
    const uint8_t* const ahead =
        blk + kKPanelAhead<t> * kBlock < end ? blk + kKPanelAhead<t> * kBlock : nullptr;
    const auto prefetch = [&](int part) {
      if (!ahead) return;
      for (int64_t o = part * kBlock / 4 / 64 * 64; o < (part + 1) * kBlock / 4; o += 64)
        hwy::Prefetch(ahead + o);
    };
    const auto load = [&](int64_t at) { return _mm512_loadu_si512(blk + at); };
    // F16C: the same floats as quant::load_fp16 (a NaN only meets products, quiet in both).
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    // Chunk `at` (0 .. 7, kXBlock columns) of the block for row i of x:
    // acc += (d * dx) I, then (c * dx) J, the order of quant.h.
    const auto chunk = [&](int i, int at, __m512i I, const __m512& c, const __m512i* J) {
      const __m512 dxv = _mm512_set1_ps(dx[i][b * 8 + at]);
      acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d, dxv), _mm512_cvtepi32_ps(I), acc[i]);
      if (J) acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(c, dxv), _mm512_cvtepi32_ps(*J), acc[i]);
    };
    if constexpr (kGroups == 8) {
      // c = -dmin by its sign bit, as the reference negates it (a NaN's sign too).
      const __m512 neg_dmin = _mm512_xor_ps(
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32))),
          _mm512_set1_ps(-0.0f));
      // The 12 scale bytes as four vectors of four groups' bytes (row l's at
      // dword l): scales 0-3, mins 0-3, scales 4-7, mins 4-7 (llama.cpp's
      // get_scale_min_k4).
      const __m512i s0 = load(64), s1 = load(128), s2 = load(192);
      const __m512i six = _mm512_set1_epi8(0x3F), top = _mm512_set1_epi8(0x30);
      const __m512i sc03 = _mm512_and_si512(s0, six), mn03 = _mm512_and_si512(s1, six);
      const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(s2, low4),
                                           _mm512_and_si512(_mm512_srli_epi16(s0, 2), top));
      const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(s2, 4), low4),
                                           _mm512_and_si512(_mm512_srli_epi16(s1, 2), top));
      constexpr int64_t kCodes = t == QuantType::Q5_K ? 768 : 256;
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        prefetch(c);
        // Chunks 2c (low nibbles) and 2c + 1 (high), a 32-column group each.
        __m512i lo_dot[R], hi_dot[R];
        for (int i = 0; i < R; ++i) lo_dot[i] = hi_dot[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          const __m512i codes = load(kCodes + 64 * (8 * c + v));
          __m512i lo = _mm512_and_si512(codes, low4), hi;
          if constexpr (t == QuantType::Q4_K) {
            hi = _mm512_andnot_si512(low4, codes);
          } else {  // bit 4 of column 64c + 4v + i: qh[4v + i] bit 2c; of 64c + 32 + ..: 2c + 1
            const __m512i qh = load(256 + 64 * v), bit4 = _mm512_set1_epi8(0x10);
            lo = _mm512_or_si512(lo, _mm512_and_si512(ShiftBits(qh, 4 - 2 * c), bit4));
            hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(codes, 4), low4),
                                 _mm512_and_si512(ShiftBits(qh, 3 - 2 * c), bit4));
          }
#pragma GCC unroll 4
          for (int i = 0; i < R; ++i) {
            const int8_t* x = qx[i] + b * 256 + 64 * c + 4 * v;
            lo_dot[i] = Dot4Broadcast(lo_dot[i], lo, x);
            hi_dot[i] = Dot4Broadcast(hi_dot[i], hi, x + 32);
          }
        }
        const __m512i sc03_47 = c < 2 ? sc03 : sc47, mn03_47 = c < 2 ? mn03 : mn47;
        const __m512i sc_lo = DwordByte(sc03_47, (2 * c) % 4);
        const __m512i sc_hi = DwordByte(sc03_47, (2 * c + 1) % 4);
        const __m512i mn_lo = DwordByte(mn03_47, (2 * c) % 4);
        const __m512i mn_hi = DwordByte(mn03_47, (2 * c + 1) % 4);
        for (int i = 0; i < R; ++i) {
          // Q4_K's high nibbles stayed in place (16 times the code): their
          // products, 16 times too, are exact and come back down by a shift.
          __m512i i_hi = _mm512_mullo_epi32(sc_hi, hi_dot[i]);
          if constexpr (t == QuantType::Q4_K) i_hi = _mm512_srai_epi32(i_hi, 4);
          // J = min * (x's group sum), |sum| < 2^15: the min zero-extended
          // in each dword meets the sum's low int16 in one vpmaddwd.
          const int32_t* sums = xs[i] + b * kGroups + 2 * c;
          const __m512i j_lo = _mm512_madd_epi16(mn_lo, _mm512_set1_epi32(sums[0]));
          const __m512i j_hi = _mm512_madd_epi16(mn_hi, _mm512_set1_epi32(sums[1]));
          chunk(i, 2 * c, _mm512_mullo_epi32(sc_lo, lo_dot[i]), neg_dmin, &j_lo);
          chunk(i, 2 * c + 1, i_hi, neg_dmin, &j_hi);
        }
      }
    } else {
      // The 16-column group types Q2_K, Q3_K and Q6_K: half h of the block
      // (128 columns), quads q of its 32-byte runs (KGroupCodes), group
      // 8h + 2s + qq two per chunk 4h + s. w = sc (u - o) with o = 32 (Q6_K),
      // 4 (Q3_K) or 0 (Q2_K, whose mins enter as J): -o * x's group sum
      // starts each group's dot.
      constexpr int kOffset = kSix ? 32 : t == QuantType::Q3_K ? 4 : 0;
      // The groups' scales as bytes (KGroupScales): Q6_K's in its panel.
      __m512i decoded[8];
      if constexpr (!kSix) KGroupScales<t>(load, decoded);
      const auto scales = [&](int v) {  // vector v of the scales (Q2_K's mins: 4 + v)
        if constexpr (kSix) return load(32 + 64 * v);
        return decoded[v];
      };
      __m512 neg_dmin = d;  // Q2_K's c = -dmin
      if constexpr (t == QuantType::Q2_K) {
        neg_dmin = _mm512_xor_ps(
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32))),
            _mm512_set1_ps(-0.0f));
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m512i I[R][4];
#pragma GCC unroll 2
        for (int qq = 0; qq < 2; ++qq) {
          prefetch(2 * h + qq);
          __m512i dot[R][4];
          for (int i = 0; i < R; ++i) {
            for (int s = 0; s < 4; ++s) {
              dot[i][s] = _mm512_set1_epi32(-kOffset * xs[i][b * kGroups + 8 * h + 2 * s + qq]);
            }
          }
#pragma GCC unroll 4
          for (int q = 4 * qq; q < 4 * qq + 4; ++q) {
            __m512i u[4];
            KGroupCodes<t>(load, h, q, u);
#pragma GCC unroll 4
            for (int i = 0; i < R; ++i) {
              const int8_t* x = qx[i] + b * 256 + 128 * h + 4 * q;
#pragma GCC unroll 4
              for (int s = 0; s < 4; ++s) dot[i][s] = Dot4Broadcast(dot[i][s], u[s], x + 32 * s);
            }
          }
#pragma GCC unroll 4
          for (int s = 0; s < 4; ++s) {
            const int g = 8 * h + 2 * s + qq;  // its scale, sign-extended
            const __m512i sv = scales(g / 4);
            const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(sv, 24 - 8 * (g % 4)), 24);
            for (int i = 0; i < R; ++i) {
              const __m512i p = _mm512_mullo_epi32(sc, dot[i][s]);
              I[i][s] = qq == 0 ? p : _mm512_add_epi32(I[i][s], p);
            }
          }
        }
        if constexpr (t == QuantType::Q2_K) {
          for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
            for (int s = 0; s < 4; ++s) {
              // J = the chunk's two groups' mins times x's group sums.
              const int g = 8 * h + 2 * s;
              const int32_t* sums = xs[i] + b * kGroups + g;
              const __m512i mn = scales(4 + g / 4);
              const __m512i J = _mm512_add_epi32(
                  _mm512_madd_epi16(DwordByte(mn, g % 4), _mm512_set1_epi32(sums[0])),
                  _mm512_madd_epi16(DwordByte(mn, g % 4 + 1), _mm512_set1_epi32(sums[1])));
              chunk(i, 4 * h + s, I[i][s], neg_dmin, &J);
            }
          }
        } else {  // no pragma: unrolled so, Q6_K's prefill lost 10%
          for (int i = 0; i < R; ++i) {
            for (int s = 0; s < 4; ++s) chunk(i, 4 * h + s, I[i][s], d, nullptr);
          }
        }
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    alignas(64) float out[kPanelRows];
    _mm512_store_ps(out, acc[i]);
    StorePanelRow(out, a, r + i, n, std::min(kPanelRows, n1 - n));
  }
}

template <QuantType t>
constexpr KPanelFn kKPanelRows[4] = {&KPanelRows<t, 1>, &KPanelRows<t, 2>, &KPanelRows<t, 3>,
                                     &KPanelRows<t, 4>};

HWY_DIAGNOSTICS(pop)
#endif  // AVX-512

#endif  // AVX2 and up

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
