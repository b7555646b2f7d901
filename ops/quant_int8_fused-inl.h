// Per-target part of ops/quant_matmul.cc, split off for size: the int8
// mode's pair sums and its fused kernels for few rows of x (decode), which
// read the weight blocks straight into registers. Included by
// ops/quant_matmul.cc only, after ops/quant_decode-inl.h, once per target.
#if defined(HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"
#if HWY_ARCH_X86
#include <immintrin.h>  // _cvtsh_ss
#endif

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE
using quant::kNR;

using DI16 = hn::Repartition<int16_t, DF>;  // 2 * kN int16 lanes
using DI32 = hn::Repartition<int32_t, DF>;
// The int8 order of quant_internal.h (int8_lane_dot): lane L of the 16 is
// element pair (2L, 2L + 1) of each 32-column span; vpmaddwd (ReorderWiden-
// MulAccumulate on int16) produces exactly those pair sums, in lane order.
// Pair sums of int16 lanes added to int32 lanes: vpmaddwd + vpaddd, or one
// vpdpwssd where the CPU has AVX512-VNNI (the same exact integers). The VNNI
// form is inline assembly: Highway 1.0 does not emit it and the AVX3 target
// does not enable the instruction set for the compiler.
template <bool kVnni>
HWY_INLINE hn::Vec<DI32> PairSums(hn::Vec<DI16> w, hn::Vec<DI16> x, hn::Vec<DI32> acc) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kVnni) {
    asm("vpdpwssd %2, %1, %0" : "+v"(acc.raw) : "v"(w.raw), "v"(x.raw));
    return acc;
  }
#endif
  hn::Vec<DI32> unused = hn::Zero(DI32());
  return hn::ReorderWidenMulAccumulate(DI32(), w, x, acc, unused);
}

// ---- int8 mode, few rows of x (decode), AVX-512: the weight blocks read
// straight into byte registers, no buffer. One 64-byte vector is one
// 64-column span: its weights as unsigned codes u (0..255) against the
// activations' int8, so the quad sums of quant.h's int8 order are one
// vpdpbusd (AVX512-VNNI) or vpmaddubsw + vpmaddwd (AVX512BW; no pair of
// products here exceeds int16) lane by lane. Integer sums are exact, so the
// results equal the reference bit for bit; offsets (w = u - z) come in as
// -z * (the quad sums of x), computed once per span and row of x.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() through as the
// unmasked lanes and then warn that it may be uninitialized (GCC bug
// 105593, fixed in 13); Highway's x86 headers turn the warning off the same way.
HWY_DIAGNOSTICS(push)
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wmaybe-uninitialized")
constexpr int64_t kFusedRows = 16;  // rows of x up to which the fused path runs

// An fp16 scale by F16C (vcvtph2ps): the same float as quant::load_fp16 for
// every non-NaN half; a NaN (signalling ones come out quiet here) only ever
// meets a multiplication, which quiets it in both, so the products agree.
HWY_INLINE float Fp16(const uint8_t* p) { return _cvtsh_ss(quant::load_u16(p)); }

// How far ahead (bytes) of weight rows n.. to prefetch: whole groups of kNR
// rows, at least ~8 KiB (short rows are done before one group's lines
// arrive); 0 where that passes the end of the matrix.
HWY_INLINE int64_t PrefetchAhead(const QuantMatrix& w, int64_t n) {
  const int64_t group = kNR * w.row_bytes;
  const int64_t groups = std::max<int64_t>(1, (8192 + group - 1) / group);
  return n + (groups + 1) * kNR <= w.n ? groups * group : 0;
}

// acc + the quad sums of u (unsigned bytes) times x (signed bytes).
template <bool kVnni>
HWY_INLINE __m512i Dot4(__m512i acc, __m512i u, __m512i x) {
  if constexpr (kVnni) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(x));
    return acc;
  } else {
    const __m512i pairs = _mm512_maddubs_epi16(u, x);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
  }
}

// Lanes 0-7 = v[0], lanes 8-15 = v[1] (the two blocks of a span).
HWY_INLINE __m512 Halves(__m128 v) {
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}
// Two fp16 scales at p0 and p1 (p1 null: 0) as Halves.
HWY_INLINE __m512 HalfScales(const uint8_t* p0, const uint8_t* p1) {
  const uint32_t h = quant::load_u16(p0) | (p1 ? uint32_t{quant::load_u16(p1)} << 16 : 0u);
  return Halves(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h))));
}
// 32 bytes at p and 32 at q (q null: zeros) as one vector.
HWY_INLINE __m512i Load2x32(const uint8_t* p, const uint8_t* q) {
  const __m512i lo =
      _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return q ? _mm512_inserti64x4(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), 1)
           : lo;
}
// Low nibbles of the bytes in 128-bit parts 0 and 2, high nibbles in 1 and 3.
HWY_INLINE __m512i NibblesByPart(__m512i v) {
  const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                         0x0004000400040004, 0x0004000400040004, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0F));
}
// Low nibbles of the bytes in the lower 256 bits, high nibbles in the upper.
HWY_INLINE __m512i NibblesByHalf(__m256i v) {
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1);
  const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004,
                                         0x0004000400040004, 0, 0, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi16(both, shift), _mm512_set1_epi8(0x0F));
}

// The codes u of a span of two 32-weight blocks (b1 null: the upper half 0);
// Q4_0 / Q5_0 / Q4_1 nibbles (Q5_0 with bit 4 from qh); Q8_0 q + 128 with
// VNNI, else |q| (x then takes q's sign: vpmaddubsw's pairs of 255 * 127
// would saturate, 128 * 127 do not).
template <QuantType t, bool kVnni>
HWY_INLINE __m512i SpanCodes(const uint8_t* b0, const uint8_t* b1) {
  if constexpr (t == QuantType::Q8_0) {
    const __m512i q = Load2x32(b0 + 2, b1 ? b1 + 2 : nullptr);
    return kVnni ? _mm512_xor_si512(q, _mm512_set1_epi8(-128)) : _mm512_abs_epi8(q);
  } else {
    constexpr int kQs = t == QuantType::Q4_1 ? 4 : t == QuantType::Q5_0 ? 6 : 2;
    const auto load16 = [](const uint8_t* p) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    };
    const __m256i qs = _mm256_inserti128_si256(_mm256_castsi128_si256(load16(b0 + kQs)),
                                               b1 ? load16(b1 + kQs) : _mm_setzero_si128(), 1);
    // 128-bit parts [qs0, qs0, qs1, qs1]: elements 0-15 / 16-31 of each block.
    const __m512i z = _mm512_castsi256_si512(qs);
    __m512i u = NibblesByPart(_mm512_shuffle_i64x2(z, z, 0x50));
    if constexpr (t == QuantType::Q5_0) {  // bit l of qh (b + 2) is element l's bit 4
      uint32_t h0, h1 = 0;
      std::memcpy(&h0, b0 + 2, 4);
      if (b1) std::memcpy(&h1, b1 + 2, 4);
      const __mmask64 high = _cvtu64_mask64(h0 | (uint64_t{h1} << 32));
      u = _mm512_mask_add_epi8(u, high, u, _mm512_set1_epi8(16));
    }
    return u;
  }
}

// The quad sums of x's 64 bytes.
template <bool kVnni>
HWY_INLINE __m512i QuadSums(__m512i x) {
  return Dot4<kVnni>(_mm512_setzero_si512(), _mm512_set1_epi8(1), x);
}

constexpr int kFusedRowGroup = 4;  // rows of x sharing each decoded span

// One span (blocks b and b + 1, or b alone where !kTwo) of kNR weight rows
// against R rows of x, into the lane accumulators acc[r][j]: each weight
// row's codes and scales are read once for the R rows.
template <QuantType t, bool kVnni, bool kTwo, bool kPrefetch, int R>
HWY_INLINE void Int8Span(const uint8_t* const* rows, int64_t b, int64_t ahead,
                         const quant::Int8Row* x, __m512 (&acc)[R][kNR]) {
  constexpr bool kMin = t == QuantType::Q4_1;
  constexpr bool kSigned = t == QuantType::Q8_0 && !kVnni;  // |q| against x with q's sign
  // log2 z of w = u - z (Q4_1: none; Q8_0 without VNNI: none, the sign trick).
  constexpr int kZShift = t == QuantType::Q4_0   ? 3
                          : t == QuantType::Q5_0 ? 4
                          : t == QuantType::Q8_0 ? (kVnni ? 7 : 0)
                                                 : 0;
  constexpr int64_t kBytes = kTraitsOf<t>.block_bytes;
  __m512i xv[R], corr[R];
  __m512 dxv[R];
  [[maybe_unused]] __m512 jf[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    xv[r] = kTwo ? _mm512_loadu_si512(x[r].qx + b * 32)
                 : _mm512_zextsi256_si512(
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].qx + b * 32)));
    const __m128 dx2 =
        kTwo ? _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(x[r].dx + b)))
             : _mm_load_ss(x[r].dx + b);
    dxv[r] = Halves(dx2);
    const __m512i sums = kZShift || kMin ? QuadSums<kVnni>(xv[r]) : _mm512_setzero_si512();
    // -z * sums (Q8_0's codes are q + 128); Q4_1: J = sums (mn16 = 1).
    corr[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, kZShift));
    if constexpr (kMin) jf[r] = _mm512_cvtepi32_ps(sums);
  }
#pragma GCC unroll 16
  for (int j = 0; j < kNR; ++j) {
    const uint8_t* blk = rows[j] + b * kBytes;
    const uint8_t* blk1 = kTwo ? blk + kBytes : nullptr;
    // The rows a group or more ahead: kNR short interleaved streams are more
    // than the hardware prefetcher follows. A span is up to 68 bytes.
    if constexpr (kPrefetch) {
      hwy::Prefetch(blk + ahead);
      hwy::Prefetch(blk + ahead + 64);
    }
    const __m512i u = SpanCodes<t, kVnni>(blk, blk1);
    [[maybe_unused]] __mmask64 negative = 0;
    if constexpr (kSigned)
      negative = _mm512_movepi8_mask(Load2x32(blk + 2, blk1 ? blk1 + 2 : nullptr));
    const __m512 a2 = HalfScales(blk, blk1);
    [[maybe_unused]] __m512 c2;
    if constexpr (kMin) c2 = HalfScales(blk + 2, blk1 ? blk1 + 2 : nullptr);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m512i xs = xv[r];
      if constexpr (kSigned) xs = _mm512_mask_sub_epi8(xs, negative, _mm512_setzero_si512(), xs);
      const __m512i i = Dot4<kVnni>(kZShift ? corr[r] : _mm512_setzero_si512(), u, xs);
      acc[r][j] = _mm512_fmadd_ps(_mm512_mul_ps(a2, dxv[r]), _mm512_cvtepi32_ps(i), acc[r][j]);
      if constexpr (kMin) acc[r][j] = _mm512_fmadd_ps(_mm512_mul_ps(c2, dxv[r]), jf[r], acc[r][j]);
    }
  }
}

// The lanes of acc reduced by the tree (+ bias) into y[n .. n + nr).
HWY_INLINE void StoreRows(const __m512 (&acc)[kNR], const QuantMatmulArgs& a, int64_t r, int64_t n,
                          int64_t nr) {
  for (int64_t j = 0; j < nr; ++j) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[j]);
    const float s = quant::lane_tree(lanes);
    a.y[r * a.ldy + n + j] = a.bias ? s + a.bias[n + j] : s;
  }
}

// R rows of x from r against weight rows rows[] (a group of kNR at n).
template <QuantType t, bool kVnni, int R>
HWY_INLINE void Int8FusedRows(const QuantMatmulArgs& a, quant::Int8Acts& acts,
                              const uint8_t* const* rows, int64_t ahead, bool prefetch, int64_t r,
                              int64_t n, int64_t nr) {
  const int64_t nb = a.w->k / 32;
  quant::Int8Row x[R];
  for (int i = 0; i < R; ++i) x[i] = acts.row(r + i);
  __m512 acc[R][kNR];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t b = 0;
  if (prefetch && ahead) {
    for (; b + 1 < nb; b += 2) Int8Span<t, kVnni, true, true, R>(rows, b, ahead, x, acc);
  } else {
    for (; b + 1 < nb; b += 2) Int8Span<t, kVnni, true, false, R>(rows, b, ahead, x, acc);
  }
  if (b < nb) Int8Span<t, kVnni, false, false, R>(rows, b, ahead, x, acc);
  for (int i = 0; i < R; ++i) StoreRows(acc[i], a, r + i, n, nr);
}

// Rows [r0, r1) x weight rows [n0, n1), the 32-weight block types: kNR
// weight rows per pass over k share each span of x, up to kFusedRowGroup
// rows of x each decoded span.
template <QuantType t, bool kVnni>
HWY_NOINLINE void Int8Fused(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0, int64_t r1,
                            int64_t n0, int64_t n1) {
  const QuantMatrix& w = *a.w;
  for (int64_t n = n0; n < n1; n += kNR) {
    const int64_t nr = std::min<int64_t>(kNR, n1 - n);
    const uint8_t* rows[kNR];
    for (int64_t j = 0; j < kNR; ++j) rows[j] = w.row(n + std::min(j, nr - 1));
    const int64_t ahead = PrefetchAhead(w, n);
    for (int64_t r = r0; r < r1;) {
      const bool first = r == r0;
      switch (std::min<int64_t>(kFusedRowGroup, r1 - r)) {
        case 1:
          Int8FusedRows<t, kVnni, 1>(a, acts, rows, ahead, first, r, n, nr);
          r += 1;
          break;
        case 2:
          Int8FusedRows<t, kVnni, 2>(a, acts, rows, ahead, first, r, n, nr);
          r += 2;
          break;
        case 3:
          Int8FusedRows<t, kVnni, 3>(a, acts, rows, ahead, first, r, n, nr);
          r += 3;
          break;
        default:
          Int8FusedRows<t, kVnni, 4>(a, acts, rows, ahead, first, r, n, nr);
          r += 4;
      }
    }
  }
}

// The codes u of span c (64 columns) of a Q4_K / Q6_K block.
template <QuantType t>
HWY_INLINE __m512i KSpanCodes(const uint8_t* b, int c) {
  const auto load32 = [](const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  };
  if constexpr (t == QuantType::Q4_K) {  // qs[32c ..]: low nibbles 64c + 0..31, high 64c + 32..63
    return NibblesByHalf(load32(b + 16 + 32 * c));
  } else {  // Q6_K: ql bits 0-3 (64 bytes, high nibbles for odd c), qh bits 4-5
    const int h = c / 2, odd = c % 2;
    const __m512i ql = _mm512_loadu_si512(b + 64 * h);
    const __m512i low =
        _mm512_and_si512(odd ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(0x0F));
    const __m256i qh = load32(b + 128 + 32 * h);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
    const __m512i shift =
        _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(4 * odd)),
                           _mm256_set1_epi16(static_cast<int16_t>(4 * odd + 2)), 1);
    const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(both, shift), _mm512_set1_epi8(3));
    return _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
  }
}

// UnpackK4 in registers: bytes 0-7 the 6-bit scales, 8-15 the mins (bytes
// stored one by one and read back as a vector would stall store forwarding).
HWY_INLINE __m128i K4ScaleBytes(const uint8_t* s) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, s, 4);
  std::memcpy(&u1, s + 4, 4);
  std::memcpy(&u2, s + 8, 4);
  constexpr uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t sc_hi = (u2 & k4) | (((u0 >> 6) & k2) << 4);
  const uint32_t m_hi = ((u2 >> 4) & k4) | (((u1 >> 6) & k2) << 4);
  return _mm_set_epi32(static_cast<int>(m_hi), static_cast<int>(u1 & k6), static_cast<int>(sc_hi),
                       static_cast<int>(u0 & k6));
}

// The K types (256-weight blocks), R rows of x from r against the weight
// rows rows[] (a group of kNR at n): per block and weight row, I (and J)
// summed over the 4 spans in registers, then the two fmas of the order; each
// span's codes are decoded once for the R rows.
template <QuantType t, bool kVnni, int R>
HWY_INLINE void Int8FusedKRows(const QuantMatmulArgs& a, quant::Int8Acts& acts,
                               const __m512i (&group)[4], const uint8_t* const* rows, int64_t ahead,
                               bool prefetch, int64_t r, int64_t n, int64_t nr) {
  constexpr bool kMin = t == QuantType::Q4_K;
  constexpr int64_t kBytes = kTraitsOf<t>.block_bytes;
  const int64_t nb = a.w->k / 256;
  quant::Int8Row x[R];
  __m512 acc[R][kNR];
  for (int i = 0; i < R; ++i) {
    x[i] = acts.row(r + i);
    for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m512i xv[R][4], sums[R][4];
    __m512 dxv[R];
    for (int i = 0; i < R; ++i) {
      for (int c = 0; c < 4; ++c) {
        xv[i][c] = _mm512_loadu_si512(x[i].qx + b * 256 + 64 * c);
        sums[i][c] = QuadSums<kVnni>(xv[i][c]);
        // Q6_K: w = u - 32, so -32 * sums starts each span's quad sums.
        if (!kMin)
          sums[i][c] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums[i][c], 5));
      }
      dxv[i] = _mm512_set1_ps(x[i].dx[b]);
    }
#pragma GCC unroll 16
    for (int j = 0; j < kNR; ++j) {
      const uint8_t* blk = rows[j] + b * kBytes;
      if (prefetch && ahead) {
        for (int64_t p = 0; p < kBytes; p += 64) hwy::Prefetch(blk + ahead + p);
      }
      __m512i sc, mn = _mm512_setzero_si512();
      if constexpr (kMin) {
        const __m128i k4 = K4ScaleBytes(blk + 4);
        sc = _mm512_cvtepu8_epi32(k4);
        mn = _mm512_cvtepu8_epi32(_mm_srli_si128(k4, 8));
      } else {
        sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
      }
      __m512i ii[R], jj[R];
      for (int i = 0; i < R; ++i) ii[i] = jj[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i u = KSpanCodes<t>(blk, c);
        const __m512i scc = _mm512_permutexvar_epi32(group[c], sc);
        [[maybe_unused]] __m512i mnc;
        if constexpr (kMin) mnc = _mm512_permutexvar_epi32(group[c], mn);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const __m512i p = Dot4<kVnni>(kMin ? _mm512_setzero_si512() : sums[i][c], u, xv[i][c]);
          ii[i] = _mm512_add_epi32(ii[i], _mm512_mullo_epi32(p, scc));
          if constexpr (kMin) jj[i] = _mm512_add_epi32(jj[i], _mm512_mullo_epi32(sums[i][c], mnc));
        }
      }
      const __m512 av = _mm512_set1_ps(Fp16(blk + (kMin ? 0 : 208)));
      [[maybe_unused]] __m512 cv;
      if constexpr (kMin) cv = _mm512_set1_ps(-Fp16(blk + 2));
      for (int i = 0; i < R; ++i) {
        acc[i][j] =
            _mm512_fmadd_ps(_mm512_mul_ps(av, dxv[i]), _mm512_cvtepi32_ps(ii[i]), acc[i][j]);
        if constexpr (kMin) {
          acc[i][j] =
              _mm512_fmadd_ps(_mm512_mul_ps(cv, dxv[i]), _mm512_cvtepi32_ps(jj[i]), acc[i][j]);
        }
      }
    }
  }
  for (int i = 0; i < R; ++i) StoreRows(acc[i], a, r + i, n, nr);
}

template <QuantType t, bool kVnni>
HWY_NOINLINE void Int8FusedK(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0,
                             int64_t r1, int64_t n0, int64_t n1) {
  // Per-lane group of span c: Q4_K 32-column groups (2c + L / 8), Q6_K
  // 16-column groups (4c + L / 4).
  __m512i group[4];
  for (int c = 0; c < 4; ++c) {
    alignas(64) int32_t g[16];
    for (int l = 0; l < 16; ++l) g[l] = t == QuantType::Q4_K ? 2 * c + l / 8 : 4 * c + l / 4;
    group[c] = _mm512_load_si512(g);
  }
  const QuantMatrix& w = *a.w;
  for (int64_t n = n0; n < n1; n += kNR) {
    const int64_t nr = std::min<int64_t>(kNR, n1 - n);
    const uint8_t* rows[kNR];
    for (int64_t j = 0; j < kNR; ++j) rows[j] = w.row(n + std::min(j, nr - 1));
    const int64_t ahead = PrefetchAhead(w, n);
    for (int64_t r = r0; r < r1;) {
      if (r1 - r >= 2) {
        Int8FusedKRows<t, kVnni, 2>(a, acts, group, rows, ahead, r == r0, r, n, nr);
        r += 2;
      } else {
        Int8FusedKRows<t, kVnni, 1>(a, acts, group, rows, ahead, r == r0, r, n, nr);
        r += 1;
      }
    }
  }
}

// Whether the fused path took the range.
template <bool kVnni>
bool Int8FusedRange(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0, int64_t r1,
                    int64_t n0, int64_t n1) {
  if (r1 - r0 > kFusedRows || !quant::int8_fused_allowed()) return false;
  switch (a.w->type) {
    case QuantType::Q8_0:
      return Int8Fused<QuantType::Q8_0, kVnni>(a, acts, r0, r1, n0, n1), true;
    case QuantType::Q4_0:
      return Int8Fused<QuantType::Q4_0, kVnni>(a, acts, r0, r1, n0, n1), true;
    case QuantType::Q4_1:
      return Int8Fused<QuantType::Q4_1, kVnni>(a, acts, r0, r1, n0, n1), true;
    case QuantType::Q5_0:
      return Int8Fused<QuantType::Q5_0, kVnni>(a, acts, r0, r1, n0, n1), true;
    case QuantType::Q4_K:
      return Int8FusedK<QuantType::Q4_K, kVnni>(a, acts, r0, r1, n0, n1), true;
    case QuantType::Q6_K:
      return Int8FusedK<QuantType::Q6_K, kVnni>(a, acts, r0, r1, n0, n1), true;
    default:
      return false;
  }
}
HWY_DIAGNOSTICS(pop)
#endif

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
