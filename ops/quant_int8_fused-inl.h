// Per-target part of ops/quant_matmul.cc, split off for size: the int8
// mode's pair sums and its fused kernels for few rows of x (decode) of the
// K types (Q4_K, Q5_K, Q6_K), which read the weight blocks straight into
// registers. The 32-weight block types have their own (quant_int8_rows-inl.h). Included by
// ops/quant_matmul.cc only, after ops/quant_decode-inl.h, once per target.
#if defined(HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_FUSED_INL_H_
#endif

#include <algorithm>
#include <cmath>
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

// ---- int8 mode, few rows of x (decode), AVX-512, K types whose matrix has
// no panels (a CPU without AVX512-VNNI; with panels,
// ops/quant_int8_kpanels-inl.h runs): the weight blocks read straight into
// byte registers, no buffer. One 64-byte vector is one 64-column span: its
// weights as unsigned codes u (0..255) against the activations' int8, so
// each lane's quad sums are one vpdpbusd (AVX512-VNNI) or vpmaddubsw +
// vpmaddwd (AVX512BW; no pair of products here exceeds int16), and a block's
// lanes are added up before quant.h's two fmas. Integer sums are exact, so
// the results equal the reference bit for bit; offsets (w = u - z) come in
// as -z * (the quad sums of x), computed once per span and row of x.
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

// Low nibbles of the bytes in the lower 256 bits, high nibbles in the upper.
HWY_INLINE __m512i NibblesByHalf(__m256i v) {
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1);
  const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004,
                                         0x0004000400040004, 0, 0, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi16(both, shift), _mm512_set1_epi8(0x0F));
}

// acc + a * b lane by lane, where every lane of a and b holds an int16 value
// with a high half of sign (a) or zero (b): PairSums, whose second pair's
// product is then 0. The same exact integers as vpmulld + vpaddd.
template <bool kVnni>
HWY_INLINE __m512i MulAdd16(__m512i acc, __m512i a, __m512i b) {
  return PairSums<kVnni>(hn::Vec<DI16>{a}, hn::Vec<DI16>{b}, hn::Vec<DI32>{acc}).raw;
}

// The quad sums of x's 64 bytes.
template <bool kVnni>
HWY_INLINE __m512i QuadSums(__m512i x) {
  return Dot4<kVnni>(_mm512_setzero_si512(), _mm512_set1_epi8(1), x);
}

// The sums of an int32 vector's lanes 0-7 and 8-15 (exact).
HWY_INLINE void SumHalves(__m512i v, int32_t& lo, int32_t& hi) {
  __m512i s = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(0x4E)));
  s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, static_cast<_MM_PERM_ENUM>(0xB1)));
  s = _mm512_add_epi32(s, _mm512_shuffle_i32x4(s, s, 0xB1));  // 128-bit lanes 1, 0, 3, 2
  lo = _mm_cvtsi128_si32(_mm512_castsi512_si128(s));
  hi = _mm_cvtsi128_si32(_mm512_extracti32x4_epi32(s, 2));
}

// The codes u of span c (64 columns) of a Q4_K / Q5_K / Q6_K block.
template <QuantType t>
HWY_INLINE __m512i KSpanCodes(const uint8_t* b, int c) {
  const auto load32 = [](const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  };
  if constexpr (t == QuantType::Q4_K) {  // qs[32c ..]: low nibbles 64c + 0..31, high 64c + 32..63
    return NibblesByHalf(load32(b + 16 + 32 * c));
  } else if constexpr (t == QuantType::Q5_K) {  // Q4_K's nibbles from qs, bit 4 from qh
    // Column 64c + l takes bit 2c of qh[l] (l < 32), 64c + 32 + l bit 2c + 1.
    const __m256i qh = load32(b + 16);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * c)),
                                             _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
    const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(both, shift), _mm512_set1_epi8(1));
    return _mm512_or_si512(NibblesByHalf(load32(b + 48 + 32 * c)), _mm512_slli_epi16(high, 4));
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

// UnpackK4 in registers: bytes 0-7 the 6-bit scales, 8-15 the mins, from the
// 12 scale bytes at s (s[0..3]: scales 0-3, their top bits those of scales
// 4-7; s[4..7] the same for the mins; s[8..11]: the low 4 bits of scales 4-7
// and, above them, of mins 4-7). Reads 16 bytes (a block has 128 more after).
// Byte shuffles and masks: the scalar form with four inserts from
// general-purpose registers was half of Q4_K's decode time.
HWY_INLINE __m128i K4ScaleBytes(const uint8_t* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  // Bytes: s0-3 | s8-11 | s4-7 | s8-11 (the low 6 bits or the nibbles)...
  const __m128i a =
      _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  // ... and nothing | s0-3 | nothing | s4-7 (their top 2 bits).
  const __m128i b =
      _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  // Bytes 12-15 take the high nibbles of s8-11 (a 16-bit shift: each byte's
  // bits 4-7 come down, the masks below drop what crosses from its neighbour).
  const __m128i low = _mm_and_si128(_mm_mask_blend_epi8(0xF000, a, _mm_srli_epi16(a, 4)),
                                    _mm_setr_epi8(0x3F, 0x3F, 0x3F, 0x3F, 0x0F, 0x0F, 0x0F, 0x0F,
                                                  0x3F, 0x3F, 0x3F, 0x3F, 0x0F, 0x0F, 0x0F, 0x0F));
  // The top 2 bits (6-7) of s0-7 as bits 4-5.
  const __m128i high = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30));
  return _mm_or_si128(low, high);
}

// The K types (256-weight blocks), R rows of x from r against the weight
// rows rows[] (a group of kNR at n): per block, weight row and 64-column
// span, I (and J) in 16 lanes of registers, each half (a kXBlock chunk)
// added up (exact), then the chunk's fmas of the order; each span's codes
// are decoded once for the R rows.
template <QuantType t, bool kVnni, int R>
HWY_INLINE void Int8FusedKRows(const QuantMatmulArgs& a, quant::Int8Acts& acts,
                               const __m512i (&group)[4], const uint8_t* const* rows, int64_t ahead,
                               bool prefetch, int64_t r, int64_t n, int64_t nr) {
  constexpr bool kMin = t != QuantType::Q6_K;  // Q4_K, Q5_K: w = d sc u - dmin m
  constexpr int64_t kBytes = kTraitsOf<t>.block_bytes;
  const int64_t nb = a.w->k / 256;
  quant::Int8Row x[R];
  float acc[R][kNR] = {};
  for (int i = 0; i < R; ++i) x[i] = acts.row(r + i);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i xv[R][4], sums[R][4];
    for (int i = 0; i < R; ++i) {
      for (int c = 0; c < 4; ++c) {
        xv[i][c] = _mm512_loadu_si512(x[i].qx + b * 256 + 64 * c);
        sums[i][c] = QuadSums<kVnni>(xv[i][c]);
        // Q6_K: w = u - 32, so -32 * sums starts each span's quad sums.
        if (!kMin)
          sums[i][c] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums[i][c], 5));
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < kNR; ++j) {
      const uint8_t* blk = rows[j] + b * kBytes;
      if (prefetch && ahead) {
        for (int64_t p = 0; p < kBytes; p += 64) hwy::Prefetch(blk + ahead + p);
      }
      // Scales (and mins) one per int32 lane with a zero high half, for
      // MulAdd16: Q4_K's are 0..63; Q6_K's int8 sign-extended to 16 bits.
      __m512i sc, mn = _mm512_setzero_si512();
      if constexpr (kMin) {
        const __m128i k4 = K4ScaleBytes(blk + 4);
        sc = _mm512_cvtepu8_epi32(k4);
        mn = _mm512_cvtepu8_epi32(_mm_srli_si128(k4, 8));
      } else {
        sc = _mm512_cvtepu16_epi32(
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192))));
      }
      const float av = Fp16(blk + (kMin ? 0 : 208));
      [[maybe_unused]] float cv;
      if constexpr (kMin) cv = -Fp16(blk + 2);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i u = KSpanCodes<t>(blk, c);
        const __m512i scc = _mm512_permutexvar_epi32(group[c], sc);
        [[maybe_unused]] __m512i mnc;
        if constexpr (kMin) mnc = _mm512_permutexvar_epi32(group[c], mn);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          // p, a lane's 4 codes against x, is within int16 (|p| <= 4 * 15 * 127 on Q4_K,
          // 4 * 31 * 127 on Q5_K, 4 * 32 * 127 on Q6_K, whose w = u - 32), as are x's quad
          // sums (|.| <= 4 * 127). Lanes 0-7 hold chunk 2c, lanes 8-15 chunk 2c + 1.
          const __m512i p = Dot4<kVnni>(kMin ? _mm512_setzero_si512() : sums[i][c], u, xv[i][c]);
          int32_t I[2], J[2];
          SumHalves(MulAdd16<kVnni>(_mm512_setzero_si512(), p, scc), I[0], I[1]);
          if constexpr (kMin)
            SumHalves(MulAdd16<kVnni>(_mm512_setzero_si512(), sums[i][c], mnc), J[0], J[1]);
          for (int h = 0; h < 2; ++h) {
            const float dx = x[i].dx[b * 8 + 2 * c + h];
            acc[i][j] = std::fma(av * dx, static_cast<float>(I[h]), acc[i][j]);
            if constexpr (kMin) acc[i][j] = std::fma(cv * dx, static_cast<float>(J[h]), acc[i][j]);
          }
        }
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int64_t j = 0; j < nr; ++j)
      a.y[(r + i) * a.ldy + n + j] = a.bias ? acc[i][j] + a.bias[n + j] : acc[i][j];
  }
}

template <QuantType t, bool kVnni>
HWY_NOINLINE void Int8FusedK(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0,
                             int64_t r1, int64_t n0, int64_t n1) {
  // Per-lane group of span c: Q4_K / Q5_K 32-column groups (2c + L / 8),
  // Q6_K 16-column groups (4c + L / 4).
  __m512i group[4];
  for (int c = 0; c < 4; ++c) {
    alignas(64) int32_t g[16];
    for (int l = 0; l < 16; ++l) g[l] = t != QuantType::Q6_K ? 2 * c + l / 8 : 4 * c + l / 4;
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
    case QuantType::Q4_K:
      return Int8FusedK<QuantType::Q4_K, kVnni>(a, acts, r0, r1, n0, n1), true;
    case QuantType::Q5_K:
      return Int8FusedK<QuantType::Q5_K, kVnni>(a, acts, r0, r1, n0, n1), true;
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
