// Per-target part of ops/quant_matmul.cc: the K types' int8 kernels over
// their panels without AVX512-VNNI (256 bits at a time), and
// Int8KPanelsRange, which picks the VNNI or the 256-bit kernel for a range.
// Split off ops/quant_int8_kpanels-inl.h for size; included by
// ops/quant_matmul.cc only, after it.
#if defined(HUBZOO_OPS_QUANT_INT8_KPANELS256_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_KPANELS256_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_KPANELS256_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_KPANELS256_INL_H_
#endif

#include <algorithm>
#include <cstring>

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

// ---- Without AVX512-VNNI: the same K panels, 256 bits at a time. A
// 64-byte vector's first 32 bytes are rows 0 .. 7, its last 32 rows 8 .. 15
// (fp16 fields: the first 16 bytes, then the next 16), so half h of a block
// is the VNNI kernel's vectors with 8 lanes. vpmaddubsw sums code pairs into
// int16, which stay exact (|x| <= 127) over a run of quads: 8 for Q4_K's
// 4-bit codes (16 * 15 * 127 = 30480), 4 for Q5_K's 5-bit (31496), 2 for
// Q6_K's 6-bit (32004), a group's 4 for Q2_K's and Q3_K's (8 * 7 * 127);
// vpmaddwd then multiplies a run's int16 sums by the group's scale, held in
// both halves of each dword, into the int32 sums. Q6_K's offset of 32 (Q3_K's
// 4) enters as -32 (-4) * sum over groups of scale * (x's group sum). The
// integers are those of quant.h's order: the same I, J and fmas as the VNNI
// kernel and the reference.

// Byte j of every dword of v in both int16 halves of the dword, zero-extended.
HWY_INLINE __m256i DwordBytePair(__m256i v, int j) {
  const auto b = [&](int at) { return static_cast<char>(at + j); };
  const __m256i c = _mm256_setr_epi8(b(0), -1, b(0), -1, b(4), -1, b(4), -1, b(8), -1, b(8), -1,
                                     b(12), -1, b(12), -1, b(0), -1, b(0), -1, b(4), -1, b(4), -1,
                                     b(8), -1, b(8), -1, b(12), -1, b(12), -1);
  return _mm256_shuffle_epi8(v, c);
}

// Byte j of every dword of v, zero-extended to the dword.
HWY_INLINE __m256i DwordByte256(__m256i v, int j) {
  const auto b = [&](int at) { return static_cast<char>(at + j); };
  const __m256i c =
      _mm256_setr_epi8(b(0), -1, -1, -1, b(4), -1, -1, -1, b(8), -1, -1, -1, b(12), -1, -1, -1,
                       b(0), -1, -1, -1, b(4), -1, -1, -1, b(8), -1, -1, -1, b(12), -1, -1, -1);
  return _mm256_shuffle_epi8(v, c);
}

// Byte j of every dword of v, as the high byte of both its int16 halves
// (the low bytes zero): an arithmetic shift right by 8 then sign-extends it.
HWY_INLINE __m256i DwordByteHigh(__m256i v, int j) {
  const auto b = [&](int at) { return static_cast<char>(at + j); };
  const __m256i c = _mm256_setr_epi8(-1, b(0), -1, b(0), -1, b(4), -1, b(4), -1, b(8), -1, b(8), -1,
                                     b(12), -1, b(12), -1, b(0), -1, b(0), -1, b(4), -1, b(4), -1,
                                     b(8), -1, b(8), -1, b(12), -1, b(12));
  return _mm256_shuffle_epi8(v, c);
}

// Bytes j and j + 1 of every dword of v as the high bytes of its two int16
// halves (the low bytes zero): an arithmetic shift right by 8 then
// sign-extends them.
HWY_INLINE __m256i DwordBytesHigh(__m256i v, int j) {
  const auto b = [&](int at) { return static_cast<char>(at + j); };
  const __m256i c = _mm256_setr_epi8(-1, b(0), -1, b(1), -1, b(4), -1, b(5), -1, b(8), -1, b(9), -1,
                                     b(12), -1, b(13), -1, b(0), -1, b(1), -1, b(4), -1, b(5), -1,
                                     b(8), -1, b(9), -1, b(12), -1, b(13));
  return _mm256_shuffle_epi8(v, c);
}

HWY_INLINE __m256i Broadcast4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof(v));
  return _mm256_set1_epi32(v);
}

// KGroupScales (quant_int8_kpanels-inl.h) for half h of a panel block, 256
// bits at a time (`load` reads the half's 32 bytes of a 64-byte vector).
template <QuantType t, typename Load>
HWY_INLINE void KGroupScales256(const Load& load, __m256i (&out)[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (t == QuantType::Q2_K) {
    for (int v = 0; v < 4; ++v) {
      const __m256i s = load(64 + 64 * v);
      out[v] = _mm256_and_si256(s, low4);
      out[4 + v] = _mm256_and_si256(_mm256_srli_epi16(s, 4), low4);
    }
  } else {
    const __m256i s0 = load(32), s1 = load(96), s2 = load(160);
    const __m256i top = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
    const __m256i low[4] = {_mm256_and_si256(s0, low4), _mm256_and_si256(s1, low4),
                            _mm256_and_si256(_mm256_srli_epi16(s0, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(s1, 4), low4)};
    const __m256i high[4] = {_mm256_slli_epi16(s2, 4), _mm256_slli_epi16(s2, 2), s2,
                             _mm256_srli_epi16(s2, 2)};
    for (int v = 0; v < 4; ++v) {
      out[v] = _mm256_sub_epi8(_mm256_or_si256(low[v], _mm256_and_si256(high[v], top)), bias);
      out[4 + v] = _mm256_setzero_si256();
    }
  }
}

// KGroupCodes (quant_int8_kpanels-inl.h), 256 bits at a time and one u[s]
// per call: with 16 registers, four codes vectors held at once beside the
// sums spilled (Q2_K / Q3_K prefill 0.9x). Q6_K's three loads are the same
// for every s (the compiler reads them once).
template <QuantType t, typename Load>
HWY_INLINE __m256i KGroupCode256(const Load& load, int k, int q, int s) {
  if constexpr (t == QuantType::Q6_K) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    const int64_t at = 288 + 768 * (2 * k + q / 4) + 64 * (q % 4);
    const __m256i qh = load(at), lo = load(at + 256), hi = load(at + 512);
    switch (s) {
      case 0:
        return _mm256_or_si256(_mm256_and_si256(lo, low4),
                               _mm256_and_si256(_mm256_slli_epi16(qh, 4), top));
      case 1:
        return _mm256_or_si256(_mm256_and_si256(hi, low4),
                               _mm256_and_si256(_mm256_slli_epi16(qh, 2), top));
      case 2:
        return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), low4),
                               _mm256_and_si256(qh, top));
      default:
        return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(hi, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), top));
    }
  } else {
    const __m256i codes = load((t == QuantType::Q2_K ? 320 : 736) + 64 * (8 * k + q));
    __m256i u = _mm256_and_si256(_mm256_srli_epi16(codes, 2 * s), _mm256_set1_epi8(3));
    if constexpr (t == QuantType::Q3_K) {
      u = _mm256_or_si256(u, _mm256_and_si256(ShiftBits256(load(224 + 64 * q), 2 - (4 * k + s)),
                                              _mm256_set1_epi8(4)));
    }
    return u;
  }
}

// Half h (weight rows 8h .. 8h + 7) of one K panel block against one row
// of x's 256 activations of that block: qx its codes, dx its 8 chunks'
// scales, xs its group sums; acc += the 8 rows' products.
template <QuantType t>
HWY_INLINE void KBlockHalf256(const uint8_t* blk, int h, const int8_t* qx, const float* dx,
                              const int32_t* xs, const int32_t* xs_pairs, __m256& acc) {
  constexpr bool kSix = t == QuantType::Q6_K;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const auto load = [&](int64_t at) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + at + 32 * h));
  };
  const auto half = [&](int64_t at) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + at + 16 * h)));
  };
  const __m256 d = half(0);
  // Chunk `at` (0 .. 7, kXBlock columns): acc += (d * dx) I, then (c * dx) J.
  const auto chunk = [&](int at, __m256i I, const __m256& c, const __m256i* J) {
    const __m256 dxv = _mm256_set1_ps(dx[at]);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, dxv), _mm256_cvtepi32_ps(I), acc);
    if (J) acc = _mm256_fmadd_ps(_mm256_mul_ps(c, dxv), _mm256_cvtepi32_ps(*J), acc);
  };
  if constexpr (kGroupsOf<t> == 8) {
    const __m256 neg_dmin = _mm256_xor_ps(half(32), _mm256_set1_ps(-0.0f));
    const __m256i s0 = load(64), s1 = load(128), s2 = load(192);
    const __m256i six = _mm256_set1_epi8(0x3F), top = _mm256_set1_epi8(0x30);
    const __m256i sc03 = _mm256_and_si256(s0, six), mn03 = _mm256_and_si256(s1, six);
    const __m256i sc47 = _mm256_or_si256(_mm256_and_si256(s2, low4),
                                         _mm256_and_si256(_mm256_srli_epi16(s0, 2), top));
    const __m256i mn47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s2, 4), low4),
                                         _mm256_and_si256(_mm256_srli_epi16(s1, 2), top));
    constexpr int64_t kCodes = t == QuantType::Q5_K ? 768 : 256;
    constexpr int kRun = t == QuantType::Q5_K ? 4 : 8;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      // Chunks 2c (low nibbles) and 2c + 1 (high), a 32-column group each.
      const __m256i sc_lo = DwordBytePair(c < 2 ? sc03 : sc47, (2 * c) % 4);
      const __m256i sc_hi = DwordBytePair(c < 2 ? sc03 : sc47, (2 * c + 1) % 4);
      __m256i lo16 = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
      __m256i i_lo = _mm256_setzero_si256(), i_hi = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i codes = load(kCodes + 64 * (8 * c + v));
        __m256i lo = _mm256_and_si256(codes, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(codes, 4), low4);
        if constexpr (t == QuantType::Q5_K) {
          const __m256i qh = load(256 + 64 * v), bit4 = _mm256_set1_epi8(0x10);
          lo = _mm256_or_si256(lo, _mm256_and_si256(ShiftBits256(qh, 4 - 2 * c), bit4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(ShiftBits256(qh, 3 - 2 * c), bit4));
        }
        const int8_t* x = qx + 64 * c + 4 * v;
        lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(lo, Broadcast4(x)));
        hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(hi, Broadcast4(x + 32)));
        if (v % kRun == kRun - 1) {
          i_lo = _mm256_add_epi32(i_lo, _mm256_madd_epi16(lo16, sc_lo));
          i_hi = _mm256_add_epi32(i_hi, _mm256_madd_epi16(hi16, sc_hi));
          lo16 = hi16 = _mm256_setzero_si256();
        }
      }
      // J = min * (x's group sum), |sum| < 2^15: the min zero-extended in
      // each dword meets the sum's low int16 (its high half, the sign, meets zero).
      const __m256i j_lo = _mm256_madd_epi16(DwordByte256(c < 2 ? mn03 : mn47, (2 * c) % 4),
                                             _mm256_set1_epi32(xs[2 * c]));
      const __m256i j_hi = _mm256_madd_epi16(DwordByte256(c < 2 ? mn03 : mn47, (2 * c + 1) % 4),
                                             _mm256_set1_epi32(xs[2 * c + 1]));
      chunk(2 * c, i_lo, neg_dmin, &j_lo);
      chunk(2 * c + 1, i_hi, neg_dmin, &j_hi);
    }
  } else {
    // The 16-column group types (Q2_K, Q3_K, Q6_K) as the VNNI kernel reads
    // them (column half k, quads q, groups 8k + 2s + qq, w = sc (u - o)).
    // vpmaddubsw's pair sums stay exact in int16 over a run of kRun quads:
    // two of Q6_K's 6-bit codes (4 * 63 * 127), a whole group of four of
    // Q2_K's and Q3_K's (8 * 7 * 127); then one vpmaddwd by the group's
    // scale in both int16 halves of each dword. Each chunk starts at -o
    // times the sum over its two groups of scale * x's group sum (o = 32 or
    // 4 by a shift; Q2_K's mins enter as J): the chunk's two scales
    // sign-extended into the int16 halves of each dword meet the pair
    // GroupSums::pairs holds.
    constexpr int kRun = kSix ? 2 : 4;
    constexpr int kOffsetShift = kSix ? 5 : 2;
    __m256i decoded[8];
    if constexpr (!kSix) KGroupScales256<t>(load, decoded);
    const auto scales = [&](int v) {  // vector v of the scales (Q2_K's mins: 4 + v)
      if constexpr (kSix) return load(32 + 64 * v);
      return decoded[v];
    };
    __m256 neg_dmin = d;  // Q2_K's c = -dmin
    if constexpr (t == QuantType::Q2_K) neg_dmin = _mm256_xor_ps(half(32), _mm256_set1_ps(-0.0f));
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k) {
      __m256i I[4];
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int m = 4 * k + s;
        I[s] = _mm256_setzero_si256();
        if constexpr (t != QuantType::Q2_K) {
          const __m256i sc = _mm256_srai_epi16(DwordBytesHigh(scales(m / 2), 2 * (m % 2)), 8);
          I[s] = _mm256_sub_epi32(
              I[s], _mm256_slli_epi32(_mm256_madd_epi16(sc, _mm256_set1_epi32(xs_pairs[m])),
                                      kOffsetShift));
        }
      }
#pragma GCC unroll 2
      for (int qq = 0; qq < 2; ++qq) {
        // The scales of groups 8k + 2s + qq, sign-extended into both int16
        // halves of each dword.
        __m256i sc2[4], dot16[4];
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {
          const int g = 8 * k + 2 * s + qq;
          sc2[s] = t == QuantType::Q2_K  // unsigned
                       ? DwordBytePair(scales(g / 4), g % 4)
                       : _mm256_srai_epi16(DwordByteHigh(scales(g / 4), g % 4), 8);
          dot16[s] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int q = 4 * qq; q < 4 * qq + 4; ++q) {
          const int8_t* x = qx + 128 * k + 4 * q;
#pragma GCC unroll 4
          for (int s = 0; s < 4; ++s) {
            dot16[s] = _mm256_add_epi16(
                dot16[s],
                _mm256_maddubs_epi16(KGroupCode256<t>(load, k, q, s), Broadcast4(x + 32 * s)));
          }
          if ((q + 1) % kRun == 0) {
            for (int s = 0; s < 4; ++s) {
              I[s] = _mm256_add_epi32(I[s], _mm256_madd_epi16(dot16[s], sc2[s]));
              dot16[s] = _mm256_setzero_si256();
            }
          }
        }
      }
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int m = 4 * k + s;
        if constexpr (t == QuantType::Q2_K) {
          // J: the chunk's two mins zero-extended into the int16 halves of
          // each dword meet the pair of x's group sums.
          const __m256i mn = _mm256_srli_epi16(DwordBytesHigh(scales(4 + m / 2), 2 * (m % 2)), 8);
          const __m256i J = _mm256_madd_epi16(mn, _mm256_set1_epi32(xs_pairs[m]));
          chunk(m, I[s], neg_dmin, &J);
        } else {
          chunk(m, I[s], d, nullptr);
        }
      }
    }
  }
}

// One row of x against S streams of K panels: stream sp is `count` panels
// of 16 weight rows from row first[sp] on, read front to back, prefetched up
// to row stop[sp] (as Panel256Streams: one stream per thread left the memory
// idle between the prefetcher's requests). The streams take turns block by
// block, each in its own pass of the loop: unrolled over the streams, the
// compiler interleaved them and spilled (1 thread, cache-resident Q4_K
// 896x4864: 205 us with three streams against 130 us with one).
template <QuantType t, int S>
HWY_NOINLINE void KPanel256(const QuantMatmulArgs& a, quant::Int8Acts& acts, const GroupSums& sums,
                            int64_t rc, int64_t r, const int64_t* first, const int64_t* stop,
                            int64_t count, int64_t n1) {
  constexpr int64_t kBlock = kKPanelBlock<t>;
  constexpr int64_t kGroups = kGroupsOf<t>;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 256;
  const auto panel_at = [&](int64_t row) {
    return w.panels.get() + row / kPanelRows * nb * kBlock;
  };
  const uint8_t* const all_end = panel_at(n1 + kPanelRows - 1);
  const uint8_t *blks[S], *ends[S];
  for (int sp = 0; sp < S; ++sp) {
    blks[sp] = panel_at(first[sp]);
    ends[sp] = std::min(panel_at(stop[sp]), all_end);
  }
  const quant::Int8Row row = acts.row(r);
  const int32_t* const row_sums = sums.sum.data() + (r - rc) * (w.k / sums.group);
  const int32_t* const row_pairs = sums.pairs.data() + (r - rc) * (w.k / sums.group / 2);
  for (int64_t panel = 0; panel < count; ++panel) {
    __m256 accs[S][2];
    for (int sp = 0; sp < S; ++sp) accs[sp][0] = accs[sp][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 1
      for (int sp = 0; sp < S; ++sp) {
        const uint8_t* const blk = blks[sp];
        const uint8_t* const ahead =
            blk + kKPanelAhead<t> * kBlock < ends[sp] ? blk + kKPanelAhead<t> * kBlock : nullptr;
        // Not unrolled either: with both halves in view GCC computed a block's
        // 64 broadcasts of x once and spilled them (cache-resident Q6_K
        // 896x4864, 1 thread: 233 us unrolled, 210 not, with the offset
        // below taken two groups at a time; Q4_K and Q5_K the same).
#pragma GCC unroll 1
        for (int h = 0; h < 2; ++h) {
          if (ahead) {  // half the block kKPanelAhead ahead per half of this one
            for (int64_t o = h * kBlock / 2 / 64 * 64; o < (h + 1) * kBlock / 2; o += 64)
              hwy::Prefetch(ahead + o);
          }
          KBlockHalf256<t>(blk, h, row.qx + b * 256, row.dx + b * 8, row_sums + b * kGroups,
                           row_pairs + b * 8, accs[sp][h]);
        }
        blks[sp] += kBlock;
      }
    }
    for (int sp = 0; sp < S; ++sp) {
      const int64_t first_row = first[sp] + panel * kPanelRows;
      alignas(32) float out[kPanelRows];
      _mm256_store_ps(out, accs[sp][0]);
      _mm256_store_ps(out + 8, accs[sp][1]);
      StorePanelRow(out, a, r, first_row, std::min(kPanelRows, n1 - first_row));
    }
  }
}

// One row of x per call, as up to kMaxDecodeStreams streams (below).
using KStreamsFn = void (*)(const QuantMatmulArgs&, quant::Int8Acts&, const GroupSums&, int64_t,
                            int64_t, const int64_t*, const int64_t*, int64_t, int64_t);
template <QuantType t>
constexpr KStreamsFn kKPanel256Of[quant::kMaxDecodeStreams] = {
    &KPanel256<t, 1>, &KPanel256<t, 2>, &KPanel256<t, 3>, &KPanel256<t, 4>,
    &KPanel256<t, 5>, &KPanel256<t, 6>, &KPanel256<t, 7>, &KPanel256<t, 8>};

// Whether the K panel kernels took rows [r0, r1) x weight rows [n0, n1): a
// K type with panels, the range on panel boundaries; the VNNI kernels where
// `vnni`, else the 256-bit ones. Rows of x go in chunks of kTokenChunk
// (their bytes stay in L2 while each panel of the range meets them), four
// at a time per panel (its blocks then come from L1 / L2).
inline bool Int8KPanelsRange(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0,
                             int64_t r1, int64_t n0, int64_t n1, bool vnni) {
  const QuantMatrix& w = *a.w;
  if (!w.panels || n0 % kPanelRows != 0 || !quant::int8_fused_allowed()) return false;
  // The 256-bit kernels take one row of x per call: more rows' int16 sums
  // spill (quant_matmul_bench --type Q4_K --m 512, 2 threads: 91 GFLOP/s with
  // four, 135 with one). Q6_K's kernel, heavier per block, lost to the tiled
  // path past 16 rows while a K block had one activation scale; with one per
  // 32 columns the tiled path reduces its lanes 8 times as often and Q6_K's
  // kernel takes every row count (Xeon, --target AVX2, 2 threads: 59.5
  // against 39.8 GFLOP/s at 32 and 512 rows).
  // VNNI: up to four rows of x per call; 256-bit: one, over streams.
  [[maybe_unused]] const KPanelFn* rows_fns = nullptr;
  const KStreamsFn* streams_fns;
  switch (w.type) {
#if HWY_TARGET <= HWY_AVX3
#define HUBZOO_KPANEL_FNS(T) (rows_fns = kKPanelRows<T>, streams_fns = kKPanel256Of<T>)
#else
#define HUBZOO_KPANEL_FNS(T) (streams_fns = kKPanel256Of<T>)
#endif
    case QuantType::Q2_K:
      HUBZOO_KPANEL_FNS(QuantType::Q2_K);
      break;
    case QuantType::Q3_K:
      HUBZOO_KPANEL_FNS(QuantType::Q3_K);
      break;
    case QuantType::Q4_K:
      HUBZOO_KPANEL_FNS(QuantType::Q4_K);
      break;
    case QuantType::Q5_K:
      HUBZOO_KPANEL_FNS(QuantType::Q5_K);
      break;
    case QuantType::Q6_K:
      HUBZOO_KPANEL_FNS(QuantType::Q6_K);
      break;
#undef HUBZOO_KPANEL_FNS
    default:
      return false;
  }
  thread_local GroupSums sums;
  SumGroups(acts, r0, r1, 256 / KGroupsOf(w.type), sums);
  if (const int streams = quant::int8_decode_streams();
      !vnni && r1 - r0 == 1 && streams > 1 && n1 > n0) {
    ForDecodeStreams(n0, n1, streams,
                     [&](int64_t s, const int64_t* first, const int64_t* stop, int64_t count) {
                       streams_fns[s - 1](a, acts, sums, r0, r0, first, stop, count, n1);
                     });
    return true;
  }
  for (int64_t rc = r0; rc < r1; rc += kTokenChunk) {
    const int64_t rc_end = std::min(r1, rc + kTokenChunk);
    for (int64_t n = n0; n < n1; n += kPanelRows) {
      for (int64_t r = rc; r < rc_end;) {
#if HWY_TARGET <= HWY_AVX3
        if (vnni) {
          const int rows = static_cast<int>(std::min<int64_t>(rc_end - r, 4));
          rows_fns[rows - 1](a, acts, sums, r0, r, n, n1);
          r += rows;
          continue;
        }
#endif
        const int64_t first = n, stop = n + kPanelRows;
        streams_fns[0](a, acts, sums, r0, r, &first, &stop, 1, n1);
        ++r;
      }
    }
  }
  if (r1 - r0 > 64) sums = GroupSums{};
  return true;
}

#endif  // AVX2 and up

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
