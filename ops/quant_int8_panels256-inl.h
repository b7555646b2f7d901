// Per-target part of ops/quant_matmul.cc, split off
// ops/quant_int8_panels-inl.h for size: the 32-weight block types' int8
// kernels over QuantMatrix::panels without AVX512-VNNI (256 bits at a time),
// and Int8Rows32Range, which picks a kernel for a range. Included by
// ops/quant_matmul.cc only, after ops/quant_int8_panels-inl.h.
#if defined(HUBZOO_OPS_QUANT_INT8_PANELS256_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_PANELS256_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_PANELS256_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_PANELS256_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ShiftBits, 256 bits at a time.
HWY_INLINE __m256i ShiftBits256(__m256i v, int s) {
  return s >= 0 ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(s))
                : _mm256_srl_epi16(v, _mm_cvtsi32_si128(-s));
}

// ---- Panels without AVX512-VNNI: 256-bit vpmaddubsw over the same panels.
// A 64-byte quad vector's first 32 bytes are rows 0 .. 7 of the panel, its
// last 32 rows 8 .. 15: half h of a block is one __m256i per quad, a lane
// per weight row as in the VNNI kernels, and a row of x meets it with one
// broadcast of its four bytes. vpmaddubsw (unsigned codes times signed x)
// sums pairs into int16 and vpmaddwd the pairs into int32; the int16 sums
// stay exact because |x| <= 127 (quant::quantize_activations clamps there,
// llama.cpp's quantizer too) and, per int16 lane, a half block sums 8
// products of u <= 31 (at most 31496).
// Q8_0's u = code + 128 would overflow a pair; it multiplies |code| by x
// with code's sign (vpsignb) instead, at most 2 * 128 * 127 = 32512 a pair.
// So does Q8_G; Q4_G's codes are Q4_0's. Their zeros, one per row and block,
// start each row's sum at -z * S_h (S_h: x's sum over the half block).
// The integers are those of quant::int8_block_dot, and the floats the same
// fma chain per output: bit for bit the reference on any target.

// Half h of a block: quad q's eight rows' codes (unsigned; Q8_0: signed),
// and those rows' scales a (and mins c).
template <QuantType t>
HWY_INLINE void PanelHalf(const uint8_t* blk, int h, __m256i (&u)[8], __m256& a, __m256& c) {
  if constexpr (kPanelG<t>) {
    a = _mm256_loadu_ps(reinterpret_cast<const float*>(blk) + 8 * h);
  } else {
    a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
  }
  if constexpr (kPanelMin<t>)
    c = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)));
  const uint8_t* codes = blk + kPanelCodesAt<t> + 32 * h;
  if constexpr (t == QuantType::Q8_0 || t == QuantType::Q8_G) {
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q)
      u[q] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * q)),
                              bias);
  } else {
    const __m256i nib = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * v));
      u[v] = _mm256_and_si256(x, nib);
      u[4 + v] = _mm256_and_si256(_mm256_srli_epi16(x, 4), nib);
    }
    if constexpr (kPanelQ5<t>) {
      // As PanelBlock: quad q's fifth bits are bit q of the planes' bytes
      // (a shift and a mask per quad; spreading a 32-bit mask to bytes took
      // a broadcast, a shuffle and a compare).
      const __m256i planes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPanelPlanesAt<t> + 32 * h));
      const __m256i bit4 = _mm256_set1_epi8(16);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q)
        u[q] = _mm256_or_si256(u[q], _mm256_and_si256(ShiftBits256(planes, 4 - q), bit4));
    }
  }
}

// Half h's eight rows' zeros (Q4_G, Q8_G: the stored int8, without the
// panel codes' +128), as int32 lanes; 0 for the other types.
template <QuantType t>
HWY_INLINE __m256i PanelZeros256(const uint8_t* blk, int h) {
  if constexpr (!kPanelG<t>) {
    (void)blk;
    (void)h;
    return _mm256_setzero_si256();
  } else {
    int64_t z;
    std::memcpy(&z, blk + 64 + 8 * h, sizeof(z));
    return _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(z));
  }
}

// The integer sum of a half block's eight rows against x's 16 codes of
// column quads q0 .. q0 + 3 (a half block of columns), from `start`
// (BlockSums, per row for Q4_G / Q8_G; Q8_0, whose codes are signed here,
// from 0). The four quads' pair sums are one exact int16 sum (at most
// 16 * 31 * 127 for Q5).
template <QuantType t>
HWY_INLINE __m256i QuadsDot(const __m256i (&u)[8], const int8_t* x, int q0, __m256i start) {
  const __m256i ones = _mm256_set1_epi16(1);
  const auto xq = [&](int q) {
    int32_t v;
    std::memcpy(&v, x + 4 * q, sizeof(v));
    return _mm256_set1_epi32(v);
  };
  if constexpr (t == QuantType::Q8_0 || t == QuantType::Q8_G) {
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int q = q0; q < q0 + 4; q += 2) {
      const __m256i p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(u[q]), _mm256_sign_epi8(xq(q), u[q]));
      const __m256i p1 =
          _mm256_maddubs_epi16(_mm256_abs_epi8(u[q + 1]), _mm256_sign_epi8(xq(q + 1), u[q + 1]));
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, ones));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, ones));
    }
    if constexpr (t == QuantType::Q8_0) {
      (void)start;
      return _mm256_add_epi32(s0, s1);
    } else {
      return _mm256_add_epi32(start, _mm256_add_epi32(s0, s1));
    }
  } else {
    __m256i s = _mm256_maddubs_epi16(u[q0], xq(q0));
#pragma GCC unroll 4
    for (int q = q0 + 1; q < q0 + 4; ++q)
      s = _mm256_add_epi16(s, _mm256_maddubs_epi16(u[q], xq(q)));
    return _mm256_add_epi32(start, _mm256_madd_epi16(s, ones));
  }
}

// acc + block b of a row of x (XRows' codes, scales and sums) against half
// h's eight rows (PanelHalf: quads u, scales a, mins c; PanelZeros256: zeros
// z), in the order of quant.h.
template <QuantType t>
HWY_INLINE __m256 HalfBlockDot(const __m256i (&u)[8], __m256 a, __m256 c, __m256i z,
                               const int8_t* qx, const float* dx, const int32_t* start,
                               const float* jsum, int64_t b, __m256 acc) {
  const int8_t* x = qx + b * 32;
  // BlockSums' start: -S_h for zeros per row (times each row's zero), else
  // the common offset's -z * S_h.
  const auto start_of = [&](int half) {
    const __m256i s = _mm256_set1_epi32(start[2 * b + half]);
    if constexpr (kPanelG<t>) {
      return _mm256_mullo_epi32(z, s);
    } else {
      (void)z;
      return s;
    }
  };
  const __m256i i0 = QuadsDot<t>(u, x, 0, start_of(0));
  const __m256i i1 = QuadsDot<t>(u, x, 4, start_of(1));
  const __m256 tv =
      _mm256_fmadd_ps(_mm256_set1_ps(dx[2 * b + 1]), _mm256_cvtepi32_ps(i1),
                      _mm256_mul_ps(_mm256_set1_ps(dx[2 * b]), _mm256_cvtepi32_ps(i0)));
  acc = _mm256_fmadd_ps(a, tv, acc);
  if constexpr (kPanelMin<t>) acc = _mm256_fmadd_ps(c, _mm256_set1_ps(jsum[b]), acc);
  return acc;
}

// R rows of x (r ..) against the panel of rows n .. n + 15.
template <QuantType t, int R>
HWY_NOINLINE void Panel256(const QuantMatmulArgs& a, quant::Int8Acts& acts, const BlockSums& sums,
                           int64_t rc, int64_t r, int64_t n, int64_t n1) {
  constexpr bool kMin = kPanelMin<t>;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  const uint8_t* blk = w.panels.get() + n / kPanelRows * nb * kPanelBlock<t>;
  const uint8_t* const end = PanelsEnd<t>(w, n1);
  const XRows<R> xs(acts, sums, rc, r, nb);
  __m256 acc[R][2];
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, blk += kPanelBlock<t>) {
    PrefetchAhead<t>(blk, end);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i u[8];
      __m256 av, cv = _mm256_setzero_ps();
      PanelHalf<t>(blk, h, u, av, cv);
      const __m256i zv = PanelZeros256<t>(blk, h);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        acc[i][h] = HalfBlockDot<t>(u, av, cv, zv, xs.qx[i], xs.dx[i], xs.start[i], xs.jsum[i], b,
                                    acc[i][h]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    alignas(32) float out[kPanelRows];
    _mm256_store_ps(out, acc[i][0]);
    _mm256_store_ps(out + 8, acc[i][1]);
    StorePanelRow(out, a, r + i, n, std::min(kPanelRows, n1 - n));
  }
}

// One row of x (a decode step) against S streams of panels: stream p is
// `count` panels of 16 rows from row first[p] on, read front to back, and
// ends (for prefetching) at row stop[p]. One sequential stream per thread
// leaves the memory idle between the hardware prefetcher's requests; S of
// them in flight read faster (Zen 2, SmolLM2's 49152x576 Q4_0 lm_head on 2
// threads: 23-25 GB/s with one stream, 35-37 with three to five,
// bench/quant_matmul_bench --one-stream). Each output's chain is
// Panel256<t, 1>'s. Without `prefetch`, the hardware prefetchers alone
// (quant::kLongPieceStreams).
template <QuantType t, int S>
HWY_NOINLINE void Panel256Streams(const QuantMatmulArgs& a, quant::Int8Acts& acts,
                                  const BlockSums& sums, int64_t rc, int64_t r,
                                  const int64_t* first, const int64_t* stop, int64_t count,
                                  int64_t n1, bool prefetch) {
  constexpr bool kMin = kPanelMin<t>;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  const uint8_t *blk[S], *end[S];
  StreamStarts<t, S>(w, first, stop, n1, prefetch, blk, end);
  const XRows<1> xs(acts, sums, rc, r, nb);
  for (int64_t i = 0; i < count; ++i) {
    __m256 acc[S][2];
    for (int p = 0; p < S; ++p) acc[p][0] = acc[p][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 4
      for (int p = 0; p < S; ++p) {
        PrefetchAhead<t>(blk[p], end[p]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i u[8];
          __m256 av, cv = _mm256_setzero_ps();
          PanelHalf<t>(blk[p], h, u, av, cv);
          const __m256i zv = PanelZeros256<t>(blk[p], h);
          acc[p][h] = HalfBlockDot<t>(u, av, cv, zv, xs.qx[0], xs.dx[0], xs.start[0], xs.jsum[0], b,
                                      acc[p][h]);
        }
        blk[p] += kPanelBlock<t>;
      }
    }
    for (int p = 0; p < S; ++p) {
      const int64_t row = first[p] + i * kPanelRows;
      alignas(32) float out[kPanelRows];
      _mm256_store_ps(out, acc[p][0]);
      _mm256_store_ps(out + 8, acc[p][1]);
      StorePanelRow(out, a, r, row, std::min(kPanelRows, n1 - row));
    }
  }
}

using StreamsFn = void (*)(const QuantMatmulArgs&, quant::Int8Acts&, const BlockSums&, int64_t,
                           int64_t, const int64_t*, const int64_t*, int64_t, int64_t, bool);
template <QuantType t>
constexpr StreamsFn kStreamsOf[quant::kMaxDecodeStreams] = {
    &Panel256Streams<t, 1>, &Panel256Streams<t, 2>, &Panel256Streams<t, 3>, &Panel256Streams<t, 4>,
    &Panel256Streams<t, 5>, &Panel256Streams<t, 6>, &Panel256Streams<t, 7>, &Panel256Streams<t, 8>};

using Panel256Fn = void (*)(const QuantMatmulArgs&, quant::Int8Acts&, const BlockSums&, int64_t,
                            int64_t, int64_t, int64_t);
template <QuantType t>
constexpr Panel256Fn kPanel256Of[4] = {&Panel256<t, 1>, &Panel256<t, 2>, &Panel256<t, 3>,
                                       &Panel256<t, 4>};

// Rows [r0, r1) x panels [n0, n1) (n0 a multiple of 16): four rows of x at a
// time against a panel, which stays in L1 or L2 across a chunk's rows.
template <QuantType t>
HWY_NOINLINE void Int8Panels256Range(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0,
                                     int64_t r1, int64_t n0, int64_t n1) {
  thread_local BlockSums sums;
  for (int64_t rc = r0; rc < r1; rc += kTokenChunk) {
    const int64_t rc_end = std::min(r1, rc + kTokenChunk);
    SumBlocks(acts, rc, rc_end, CommonOffset(t), sums);
    const DecodeStreams ds = DecodeStreamsOf<t>(n0, n1, a.w->k, true);
    if (rc_end - rc == 1 && ds.streams > 1 && n1 > n0) {
      ForDecodeStreams(n0, n1, ds.streams,
                       [&](int64_t s, const int64_t* first, const int64_t* stop, int64_t count) {
                         kStreamsOf<t>[s - 1](a, acts, sums, rc, rc, first, stop, count, n1,
                                              !ds.long_piece && quant::int8_decode_prefetch());
                       });
      continue;
    }
    for (int64_t n = n0; n < n1; n += kPanelRows) {
      for (int64_t r = rc; r < rc_end;) {
        const int rows = static_cast<int>(std::min<int64_t>(rc_end - r, 4));
        kPanel256Of<t>[rows - 1](a, acts, sums, rc, r, n, n1);
        r += rows;
      }
    }
  }
  if (r1 - r0 > 64) sums = BlockSums{};
}
#endif  // AVX2 and up

// Rows [r0, r1) x weight rows [n0, n1) of a 32-weight block type.
inline void Int8Rows32Range(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0, int64_t r1,
                            int64_t n0, int64_t n1, bool vnni) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (vnni) {
    switch (a.w->type) {
      case QuantType::Q4_0:
        return Int8QuadsRange<QuantType::Q4_0>(a, acts, r0, r1, n0, n1);
      case QuantType::Q4_1:
        return Int8QuadsRange<QuantType::Q4_1>(a, acts, r0, r1, n0, n1);
      case QuantType::Q5_0:
        return Int8QuadsRange<QuantType::Q5_0>(a, acts, r0, r1, n0, n1);
      case QuantType::Q5_1:
        return Int8QuadsRange<QuantType::Q5_1>(a, acts, r0, r1, n0, n1);
      case QuantType::Q8_0:
        return Int8QuadsRange<QuantType::Q8_0>(a, acts, r0, r1, n0, n1);
      case QuantType::Q4_G:
        return Int8QuadsRange<QuantType::Q4_G>(a, acts, r0, r1, n0, n1);
      case QuantType::Q8_G:
        return Int8QuadsRange<QuantType::Q8_G>(a, acts, r0, r1, n0, n1);
      default:
        break;
    }
  }
#else
  (void)vnni;
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (a.w->panels && n0 % kPanelRows == 0) {
    switch (a.w->type) {
      case QuantType::Q4_0:
        return Int8Panels256Range<QuantType::Q4_0>(a, acts, r0, r1, n0, n1);
      case QuantType::Q4_1:
        return Int8Panels256Range<QuantType::Q4_1>(a, acts, r0, r1, n0, n1);
      case QuantType::Q5_0:
        return Int8Panels256Range<QuantType::Q5_0>(a, acts, r0, r1, n0, n1);
      case QuantType::Q5_1:
        return Int8Panels256Range<QuantType::Q5_1>(a, acts, r0, r1, n0, n1);
      case QuantType::Q8_0:
        return Int8Panels256Range<QuantType::Q8_0>(a, acts, r0, r1, n0, n1);
      case QuantType::Q4_G:
        return Int8Panels256Range<QuantType::Q4_G>(a, acts, r0, r1, n0, n1);
      case QuantType::Q8_G:
        return Int8Panels256Range<QuantType::Q8_G>(a, acts, r0, r1, n0, n1);
      default:
        break;
    }
  }
#endif
  const bool has_min = quant::int8_has_min(a.w->type);
  const int64_t nb = a.w->k / 32;
  thread_local PairPanel panel;
  thread_local quant::Int8Weights wd;
  thread_local BlockSums sums;
  for (int64_t rc = r0; rc < r1; rc += kTokenChunk) {
    const int64_t rc_end = std::min(r1, rc + kTokenChunk);
    if (has_min) SumBlocks(acts, rc, rc_end, 0, sums);
    for (int64_t n = n0; n < n1; n += kPanelRows) {
      PackPairs(*a.w, n, n1, wd, panel);
      for (int64_t rb = rc; rb < rc_end; rb += kMRPairs) {
        const int64_t mr = std::min<int64_t>(kMRPairs, rc_end - rb);
        const int8_t* qx[kMRPairs];
        const float* dx[kMRPairs];
        const float* jsum[kMRPairs] = {};
        for (int64_t r = 0; r < mr; ++r) {
          const quant::Int8Row row = acts.row(rb + r);
          qx[r] = row.qx;
          dx[r] = row.dx;
          if (has_min) jsum[r] = sums.sum.data() + (rb + r - rc) * nb;
        }
        alignas(64) float out[kMRPairs][kPanelRows];
        kPairTiles[has_min][mr - 1](qx, dx, jsum, panel, nb, out);
        for (int64_t r = 0; r < mr; ++r)
          StorePanelRow(out[r], a, rb + r, n, std::min(kPanelRows, n1 - n));
      }
    }
  }
  if (r1 - r0 > 64) sums = BlockSums{};
}

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
