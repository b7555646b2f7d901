// Per-target part of ops/quant_matmul.cc: the int8 mode of the 32-weight
// block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_G, Q8_G). Their order
// (quant.h) is one float chain per output over its blocks, so a vector lane is
// one weight row: per call, 16 weight rows are packed into a panel whose
// vector for column quad q holds the 16 rows' four codes of that quad, and a
// row of x meets it with one broadcast of its own four bytes. With
// AVX512-VNNI that is one vpdpbusd per 64 products and, per block and row of
// x, two conversions, a multiply and two fmas for 16 outputs (one integer
// sum and activation scale per half block; llama.cpp's repacked Q4_0 GEMM
// has the same shape with one per block). Elsewhere the panel holds the
// signed int16 weights in column pairs (vpmaddwd). Integer sums are exact,
// so both equal quant::int8_block_dot bit for bit. The kernels over
// QuantMatrix::panels, the quad tile and the dispatch of a range are in
// ops/quant_int8_panels-inl.h and ops/quant_int8_panels256-inl.h. Included
// by ops/quant_matmul.cc only, after
// ops/quant_int8_fused-inl.h.
#if defined(HUBZOO_OPS_QUANT_INT8_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_ROWS_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_ROWS_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_ROWS_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "hwy/aligned_allocator.h"
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
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

constexpr int64_t kPanelRows = quant::kPanelRows;  // one weight row per lane of the order's 16
constexpr int64_t kTokenChunk = 128;  // rows of x per pass over the panels (kept in L2)

// A decode step's panels [n0, n1) (n0 on a panel) as up to `streams` runs
// read at once, whose lengths differ by one panel at most:
// call(s, first, stop, count) reads `count` panels of each of s runs, run p
// from row first[p] (its prefetches stop at row stop[p]); every run's first
// `count` panels, then the last one of the longer runs, each continuing
// its stream.
template <class Call>
HWY_INLINE void ForDecodeStreams(int64_t n0, int64_t n1, int streams, const Call& call) {
  const int64_t panels = (n1 - n0 + kPanelRows - 1) / kPanelRows;
  const int64_t s = std::min<int64_t>(streams, panels), count = panels / s, rest = panels % s;
  int64_t first[quant::kMaxDecodeStreams], stop[quant::kMaxDecodeStreams];
  for (int64_t p = 0; p < s; ++p) {
    first[p] = n0 + (p * count + std::min(p, rest)) * kPanelRows;
    stop[p] = first[p] + (count + (p < rest ? 1 : 0)) * kPanelRows;
  }
  call(s, first, stop, count);
  if (rest > 0) {
    for (int64_t p = 0; p < rest; ++p) first[p] += count * kPanelRows;
    call(rest, first, stop, int64_t{1});
  }
}

// Per row of x and block: what the kernels start each half block's integer
// sum from, and the min term's factor. With x's codes summed per half
// (S0, S1), that factor is fma(dx1, float(S1), dx0 * float(S0)): J's part of
// the order (quant.h), since the 32-weight types with a min (Q4_1, Q5_1) have
// mn16 = 1.
struct BlockSums {
  std::vector<int32_t> start;  // [rows][nb][2]: -z * S_h (a common offset z), or -S_h (per row)
  std::vector<float> sum;      // [rows][nb]: the min term's factor
  // What they were summed from: rows [r0, r1) of the activations of that
  // version, offset z. A decode step's product calls the kernel once per
  // piece of its columns (ThreadPool::parallel_for_balanced), and redoing
  // the sums per piece kept Int8QuadsRange at 1.2% of a SmolLM2 Q8_0 decode's
  // perf samples (0.5% with them kept).
  uint64_t version = 0;
  int64_t r0 = 0, r1 = 0;
  int z = 0;
};

// A common offset z of w16 = u - z (u the unsigned code of the quad
// kernels), or -1 where z is per block and row (Q4_G / Q8_G).
constexpr int CommonOffset(QuantType t) {
  switch (t) {
    case QuantType::Q4_0:
      return 8;
    case QuantType::Q5_0:
      return 16;
    case QuantType::Q8_0:
      return 128;
    case QuantType::Q4_1:
    case QuantType::Q5_1:
      return 0;
    default:
      return -1;
  }
}

inline void SumBlocks(const quant::Int8Acts& acts, int64_t r0, int64_t r1, int z, BlockSums& out) {
  if (acts.version != 0 && out.version == acts.version && out.r0 == r0 && out.r1 == r1 &&
      out.z == z) {
    return;
  }
  out.version = acts.version;
  out.r0 = r0;
  out.r1 = r1;
  out.z = z;
  const int64_t nb = acts.k / 32;
  out.start.resize((r1 - r0) * nb * 2);
  out.sum.resize((r1 - r0) * nb);
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* qx = acts.qx_row(r);
    const float* dx = acts.dx_row(r);
    for (int64_t b = 0; b < nb; ++b) {
      int32_t s[2];
      for (int h = 0; h < 2; ++h) {
        int32_t sum = 0;
        for (int e = 0; e < 16; ++e) sum += qx[b * 32 + 16 * h + e];
        s[h] = sum;
      }
      for (int h = 0; h < 2; ++h)
        out.start[((r - r0) * nb + b) * 2 + h] = z >= 0 ? -z * s[h] : -s[h];
      out.sum[(r - r0) * nb + b] =
          std::fma(dx[2 * b + 1], static_cast<float>(s[1]), dx[2 * b] * static_cast<float>(s[0]));
    }
  }
}

// y[r, n + l] = out[l] (+ bias) for the valid lanes.
HWY_INLINE void StorePanelRow(const float* out, const QuantMatmulArgs& a, int64_t r, int64_t n,
                              int64_t valid) {
  float* y = a.y + r * a.ldy + n;
  for (int64_t l = 0; l < valid; ++l) y[l] = a.bias ? out[l] + a.bias[n + l] : out[l];
}

// ---- Any target: int16 pairs (vpmaddwd) ----

// 16 weight rows, whole k: w[p][l] = row l's columns (2p, 2p + 1) as two
// int16 in one int32; a, c per block and row.
struct PairPanel {
  std::vector<int32_t> w;
  std::vector<float> a, c;
};

inline void PackPairs(const QuantMatrix& w, int64_t n, int64_t n1, quant::Int8Weights& wd,
                      PairPanel& p) {
  const int64_t k = w.k, nb = k / 32;
  p.w.resize(k / 2 * kPanelRows);
  p.a.resize(nb * kPanelRows);
  p.c.resize(nb * kPanelRows);
  const bool has_min = quant::int8_has_min(w.type);
  for (int64_t g = 0; g < kPanelRows; g += quant::kNR) {
    DecodeRowsInt8(w, n + g, n1, 0, k, wd);  // rows past n1: zeros
    for (int64_t j = 0; j < quant::kNR; ++j) {
      const int64_t l = g + j;
      const int16_t* src = wd.w16.data() + j * k;
      for (int64_t q = 0; q < k / 2; ++q) {
        uint32_t pair;
        std::memcpy(&pair, src + 2 * q, 4);
        p.w[q * kPanelRows + l] = static_cast<int32_t>(pair);
      }
      for (int64_t b = 0; b < nb; ++b) {
        p.a[b * kPanelRows + l] = wd.a[j * nb + b];
        p.c[b * kPanelRows + l] = has_min ? wd.c[j * nb + b] : 0.0f;
      }
    }
  }
}

#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kMRPairs = 2;  // AVX2: 16 vector registers
#else
constexpr int kMRPairs = 8;
#endif

// MR rows of x against a pair panel: out[r][16].
template <int MR, bool kMin>
HWY_NOINLINE void PairRowsTile(const int8_t* const* qx, const float* const* dx,
                               const float* const* jsum, const PairPanel& p, int64_t nb,
                               float (*out)[kPanelRows]) {
  const DF df;
  const DI16 d16;
  const DI32 d32;
  V acc[MR][kV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < kV; ++v) acc[r][v] = hn::Zero(df);
  }
  for (int64_t b = 0; b < nb; ++b) {
    // t = fma(dx1, float(I1), dx0 * float(I0)) per half block's integers.
    V t[MR][kV];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      hn::Vec<DI32> I[MR][kV];
      for (int r = 0; r < MR; ++r) {
        for (int v = 0; v < kV; ++v) I[r][v] = hn::Zero(d32);
      }
      for (int64_t q = b * 16 + 8 * h; q < b * 16 + 8 * h + 8; ++q) {
        hn::Vec<DI16> wv[kV];
        for (int v = 0; v < kV; ++v)
          wv[v] = hn::BitCast(d16, hn::LoadU(d32, p.w.data() + q * kPanelRows + v * kN));
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const int32_t pair = static_cast<int32_t>(
              static_cast<uint16_t>(qx[r][2 * q]) |
              (static_cast<uint32_t>(static_cast<uint16_t>(qx[r][2 * q + 1])) << 16));
          const auto xv = hn::BitCast(d16, hn::Set(d32, pair));
          for (int v = 0; v < kV; ++v) I[r][v] = PairSums<false>(wv[v], xv, I[r][v]);
        }
      }
      for (int r = 0; r < MR; ++r) {
        const V d = hn::Set(df, dx[r][2 * b + h]);
        for (int v = 0; v < kV; ++v) {
          const V f = hn::ConvertTo(df, I[r][v]);
          t[r][v] = h == 0 ? hn::Mul(d, f) : hn::MulAdd(d, f, t[r][v]);
        }
      }
    }
    for (int v = 0; v < kV; ++v) {
      const V av = hn::LoadU(df, p.a.data() + b * kPanelRows + v * kN);
      [[maybe_unused]] V cv;
      if constexpr (kMin) cv = hn::LoadU(df, p.c.data() + b * kPanelRows + v * kN);
      for (int r = 0; r < MR; ++r) {
        acc[r][v] = hn::MulAdd(av, t[r][v], acc[r][v]);
        if constexpr (kMin) acc[r][v] = hn::MulAdd(cv, hn::Set(df, jsum[r][b]), acc[r][v]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < kV; ++v) hn::StoreU(acc[r][v], df, out[r] + v * kN);
  }
}

using PairTileFn = void (*)(const int8_t* const*, const float* const*, const float* const*,
                            const PairPanel&, int64_t, float (*)[kPanelRows]);
template <bool kMin, size_t... I>
constexpr std::array<PairTileFn, sizeof...(I)> MakePairTiles(std::index_sequence<I...>) {
  return {&PairRowsTile<static_cast<int>(I) + 1, kMin>...};
}
constexpr std::array<std::array<PairTileFn, kMRPairs>, 2> kPairTiles = {
    MakePairTiles<false>(std::make_index_sequence<kMRPairs>()),
    MakePairTiles<true>(std::make_index_sequence<kMRPairs>())};

// The R rows of x from r a decode kernel meets: codes, half-block scales
// (dx[2b + h]), and the block sums of a chunk of rows from rc (start[2b + h],
// jsum[b]).
template <int R>
struct XRows {
  const int8_t* qx[R];
  const float* dx[R];
  const int32_t* start[R];
  const float* jsum[R];
  XRows(quant::Int8Acts& acts, const BlockSums& sums, int64_t rc, int64_t r, int64_t nb) {
    for (int i = 0; i < R; ++i) {
      const quant::Int8Row row = acts.row(r + i);
      qx[i] = row.qx;
      dx[i] = row.dx;
      start[i] = sums.start.data() + (r + i - rc) * nb * 2;
      jsum[i] = sums.sum.data() + (r + i - rc) * nb;
    }
  }
};

// ---- AVX512-VNNI: unsigned code quads (vpdpbusd) ----
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_DIAGNOSTICS(push)
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wmaybe-uninitialized")
HWY_DIAGNOSTICS_OFF(disable : 4700, ignored "-Wuninitialized")

// 16 weight rows, whole k: u[b][q] = the 16 rows' codes of column quad q of
// block b (64 bytes; u = w16 + z, 0..255); a, c and (Q4_G / Q8_G) z per
// block and row.
struct QuadPanel {
  hwy::AlignedFreeUniquePtr<uint8_t[]> u;
  int64_t capacity = 0;
  std::vector<float> a, c;
  std::vector<int32_t> z;
  uint8_t* codes(int64_t bytes) {
    if (bytes > capacity) {
      u = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(bytes));
      capacity = bytes;
    }
    return u.get();
  }
};

// 16 bytes at each of p[0..3] as the four 128-bit parts of one vector.
HWY_INLINE __m512i Load4x16(const uint8_t* const* p, int64_t off) {
  const auto l = [&](int i) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[i] + off));
  };
  const __m512i v = _mm512_castsi128_si512(l(0));
  return _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(v, l(1), 1), l(2), 2), l(3), 3);
}

// Per block, the 16 rows' first dword (scale, and Q4_1 / Q5_1's min) and,
// where the type has one, a second (Q5: qh; Q4_G / Q8_G: the zero), by gathers.
struct Heads {
  __m512i first, second;
};
template <QuantType t>
constexpr int64_t kSecondAt =
    t == QuantType::Q5_0                                                   ? 2
    : t == QuantType::Q5_1 || t == QuantType::Q4_G || t == QuantType::Q8_G ? 4
                                                                           : -1;
template <QuantType t>
HWY_INLINE Heads GatherHeads(const uint8_t* blk0, __m512i vidx) {
  Heads h{_mm512_i32gather_epi32(vidx, blk0, 1), _mm512_setzero_si512()};
  if constexpr (kSecondAt<t> >= 0) h.second = _mm512_i32gather_epi32(vidx, blk0 + kSecondAt<t>, 1);
  return h;
}

// Codes of block columns 0-15 (lo[g]) and 16-31 (hi[g]) of the panel's 16
// rows, rows 4g .. 4g + 3 in the four 128-bit parts of vector g: the block at
// byte `at` of each row (Q5's high bits from its heads).
template <QuantType t>
HWY_INLINE void BlockCodes(const uint8_t* const* rows, int64_t at, const Heads& heads,
                           __m512i (&lo)[4], __m512i (&hi)[4]) {
  if constexpr (t == QuantType::Q8_0 || t == QuantType::Q8_G) {
    constexpr int64_t kQs = t == QuantType::Q8_0 ? 2 : 8;
    const __m512i flip = _mm512_set1_epi8(-128);  // q + 128
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      lo[g] = _mm512_xor_si512(Load4x16(rows + 4 * g, at + kQs), flip);
      hi[g] = _mm512_xor_si512(Load4x16(rows + 4 * g, at + kQs + 16), flip);
    }
  } else {
    constexpr int64_t kQs = t == QuantType::Q4_0   ? 2
                            : t == QuantType::Q4_1 ? 4
                            : t == QuantType::Q5_0 ? 6
                            : t == QuantType::Q5_1 ? 8
                                                   : 8;  // Q4_G
    const __m512i nib = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i v = Load4x16(rows + 4 * g, at + kQs);
      lo[g] = _mm512_and_si512(v, nib);
      hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
    }
    if constexpr (t == QuantType::Q5_0 || t == QuantType::Q5_1) {
      // qh (bit l: element l's bit 4) of the 16 rows: its low and high halves
      // as words are, per group of four rows, the byte masks of lo and hi
      // (row i's 16 bits at bits 16i ..).
      const __m512i qh = heads.second;
      alignas(64) uint64_t masks[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(masks), _mm512_cvtepi32_epi16(qh));
      _mm256_store_si256(reinterpret_cast<__m256i*>(masks + 4),
                         _mm512_cvtepi32_epi16(_mm512_srli_epi32(qh, 16)));
      const __m512i bit4 = _mm512_set1_epi8(16);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        lo[g] = _mm512_or_si512(lo[g], _mm512_maskz_mov_epi8(_cvtu64_mask64(masks[g]), bit4));
        hi[g] = _mm512_or_si512(hi[g], _mm512_maskz_mov_epi8(_cvtu64_mask64(masks[4 + g]), bit4));
      }
    }
  }
}

// Indices (vpermt2d over two vectors of four rows x four dwords, dword
// 4 * row + slot) of slots 0 and 1, and of slots 2 and 3, of the eight rows.
alignas(64) constexpr int32_t kQuads01[16] = {0, 4, 8, 12, 16, 20, 24, 28,
                                              1, 5, 9, 13, 17, 21, 25, 29};
alignas(64) constexpr int32_t kQuads23[16] = {2, 6, 10, 14, 18, 22, 26, 30,
                                              3, 7, 11, 15, 19, 23, 27, 31};

// Four vectors of four rows x four quads (dword 4 * row + quad) as four
// vectors of 16 rows, one per quad.
HWY_INLINE void TransposeQuads(const __m512i (&g)[4], uint8_t* dst) {
  const __m512i ie = _mm512_load_si512(kQuads01), io = _mm512_load_si512(kQuads23);
  // [quad 0 | quad 1] and [quad 2 | quad 3] of rows 0-7, then of rows 8-15.
  const __m512i a01 = _mm512_permutex2var_epi32(g[0], ie, g[1]);
  const __m512i b01 = _mm512_permutex2var_epi32(g[0], io, g[1]);
  const __m512i a23 = _mm512_permutex2var_epi32(g[2], ie, g[3]);
  const __m512i b23 = _mm512_permutex2var_epi32(g[2], io, g[3]);
  _mm512_store_si512(dst + 0, _mm512_shuffle_i64x2(a01, a23, 0x44));
  _mm512_store_si512(dst + 64, _mm512_shuffle_i64x2(a01, a23, 0xEE));
  _mm512_store_si512(dst + 128, _mm512_shuffle_i64x2(b01, b23, 0x44));
  _mm512_store_si512(dst + 192, _mm512_shuffle_i64x2(b01, b23, 0xEE));
}

// The 16 rows of the panel at n (rows past n1 repeat the last; not stored)
// and their int32 offsets from the first.
HWY_INLINE __m512i PanelRows(const QuantMatrix& w, int64_t n, int64_t n1, const uint8_t** rows) {
  alignas(64) int32_t offsets[kPanelRows];
  for (int64_t l = 0; l < kPanelRows; ++l) {
    rows[l] = w.row(std::min(n + l, n1 - 1));
    offsets[l] = static_cast<int32_t>(rows[l] - rows[0]);
  }
  return _mm512_load_si512(offsets);
}

// The 16 rows' scales a (and c, or z) of a block from its heads.
template <QuantType t>
HWY_INLINE void PanelScales(const Heads& h, __m512& a, __m512& c, __m512i& z) {
  if constexpr (t != QuantType::Q4_G && t != QuantType::Q8_G) {
    // F16C: the same floats as quant::load_fp16 (a NaN only meets products, quiet in both).
    a = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h.first));
    if constexpr (t == QuantType::Q4_1 || t == QuantType::Q5_1)
      c = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h.first, 16)));
  } else {  // f32 scale, then the int8 zero
    a = _mm512_castsi512_ps(h.first);
    z = _mm512_srai_epi32(_mm512_slli_epi32(h.second, 24), 24);
    if constexpr (t == QuantType::Q8_G) z = _mm512_add_epi32(z, _mm512_set1_epi32(128));
  }
}

// Prefetch distance for the panel at n: the next panel's rows (0 past the
// matrix). Decode reads each weight once, and 16 short interleaved streams
// are more than the hardware prefetcher follows.
HWY_INLINE int64_t PanelAhead(const QuantMatrix& w, int64_t n) {
  return n + 2 * kPanelRows <= w.n ? kPanelRows * w.row_bytes : 0;
}
// Block b of the next panel's rows (rows[] + ahead), every kStep-th block
// (so that each 64-byte line has at least one address).
template <QuantType t>
HWY_INLINE void PrefetchPanel(const uint8_t* const* rows, int64_t b, int64_t ahead) {
  constexpr int64_t kStep = std::max<int64_t>(1, 64 / kTraitsOf<t>.block_bytes);
  if (!ahead || b % kStep != 0) return;
  const int64_t at = b * kTraitsOf<t>.block_bytes + ahead;
#pragma GCC unroll 16
  for (int64_t l = 0; l < kPanelRows; ++l) hwy::Prefetch(rows[l] + at);
}

template <QuantType t>
HWY_NOINLINE void PackQuads(const QuantMatrix& w, int64_t n, int64_t n1, QuadPanel& p) {
  constexpr int64_t kBytes = kTraitsOf<t>.block_bytes;
  const int64_t nb = w.k / 32;
  uint8_t* u = p.codes(nb * 512);
  p.a.resize(nb * kPanelRows);
  p.c.resize(nb * kPanelRows);
  p.z.resize(nb * kPanelRows);
  const uint8_t* rows[kPanelRows];
  const __m512i vidx = PanelRows(w, n, n1, rows);
  const int64_t ahead = PanelAhead(w, n);
  for (int64_t b = 0; b < nb; ++b) {
    PrefetchPanel<t>(rows, b, ahead);
    __m512i lo[4], hi[4];
    const Heads heads = GatherHeads<t>(rows[0] + b * kBytes, vidx);
    BlockCodes<t>(rows, b * kBytes, heads, lo, hi);
    TransposeQuads(lo, u + b * 512);
    TransposeQuads(hi, u + b * 512 + 256);
    __m512 a, c = _mm512_setzero_ps();
    __m512i z = _mm512_setzero_si512();
    PanelScales<t>(heads, a, c, z);
    _mm512_storeu_ps(p.a.data() + b * kPanelRows, a);
    _mm512_storeu_ps(p.c.data() + b * kPanelRows, c);
    _mm512_storeu_si512(p.z.data() + b * kPanelRows, z);
  }
}

// ---- few rows of x (decode): the codes straight from the blocks, four
// weight rows per vector (one per 128-bit part), no panel. Per block and
// row of x, the quad sums of each part are reduced to the row's integer sum
// by a fixed transposition (Reduce4), so the order is the panel kernel's.

// Four vectors of four rows x four partial sums (dword 4 * row + slot) as
// one vector of the 16 rows' totals.
HWY_INLINE __m512i Reduce4(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
  const __m512i ie = _mm512_load_si512(kQuads01), io = _mm512_load_si512(kQuads23);
  const __m512i u01 = _mm512_add_epi32(_mm512_permutex2var_epi32(s0, ie, s1),
                                       _mm512_permutex2var_epi32(s0, io, s1));
  const __m512i u23 = _mm512_add_epi32(_mm512_permutex2var_epi32(s2, ie, s3),
                                       _mm512_permutex2var_epi32(s2, io, s3));
  return _mm512_add_epi32(_mm512_shuffle_i64x2(u01, u23, 0x44),
                          _mm512_shuffle_i64x2(u01, u23, 0xEE));
}

// The R rows of x a decode kernel meets (codes, scales, block sums), and
// the store of their 16 outputs. (The accumulators stay the kernel's own
// locals: as members they were kept in memory, at half the speed.)
template <int R>
struct DirectX : XRows<R> {
  using XRows<R>::XRows;
  void Store(const __m512 (&acc)[R], const QuantMatmulArgs& a, int64_t r, int64_t n,
             int64_t n1) const {
    for (int i = 0; i < R; ++i) {
      alignas(64) float out[kPanelRows];
      _mm512_store_ps(out, acc[i]);
      StorePanelRow(out, a, r + i, n, std::min(kPanelRows, n1 - n));
    }
  }
};

// Rows of x up to which the 32-weight types skip the quad panel (its
// repacking per 16 weight rows costs more than it saves for a decode
// batch): up to 16 rows read the panels directly, four rows of x per pass
// with the panel's blocks in L1 after the first (the K types always do).
// quant_matmul_bench --shape 3072x576 --threads 2, Zen 4, against 4: 8 rows
// 1.2-1.7x, 16 rows 1.0-1.5x (Q8_0, Q4_0, Q5_0, Q4_1); decode batch 8
// 1.15-1.30x and batch 16 0.98-1.21x (SmolLM2 Q8_0 / Q4_0, Gemma 3 Q4_K_M).
constexpr int kDirectRows = 16;

template <QuantType t, int R>
HWY_NOINLINE void DirectRows(const QuantMatmulArgs& a, quant::Int8Acts& acts, const BlockSums& sums,
                             int64_t rc, int64_t r, int64_t n, int64_t n1) {
  constexpr bool kMin = t == QuantType::Q4_1 || t == QuantType::Q5_1;
  constexpr bool kRowZ = CommonOffset(t) < 0;
  constexpr int64_t kBytes = kTraitsOf<t>.block_bytes;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  const uint8_t* rows[kPanelRows];
  const __m512i vidx = PanelRows(w, n, n1, rows);
  const int64_t ahead = r == rc ? PanelAhead(w, n) : 0;
  const DirectX<R> xs(acts, sums, rc, r, nb);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  // The gathers run a block ahead: their latency is most of a block's
  // dependency chain, longer than the out-of-order window covers.
  Heads heads = GatherHeads<t>(rows[0], vidx);
  for (int64_t b = 0; b < nb; ++b) {
    PrefetchPanel<t>(rows, b, ahead);
    const Heads next = b + 1 < nb ? GatherHeads<t>(rows[0] + (b + 1) * kBytes, vidx) : heads;
    __m512i lo[4], hi[4];
    BlockCodes<t>(rows, b * kBytes, heads, lo, hi);
    __m512 av, cv = _mm512_setzero_ps();
    __m512i z = _mm512_setzero_si512();
    PanelScales<t>(heads, av, cv, z);
    heads = next;
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const auto bcast = [&](int64_t off) {
        return _mm512_broadcast_i32x4(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(xs.qx[i] + off)));
      };
      // Each half block's integers (its start, times z where kRowZ, plus the dots).
      const auto half = [&](const __m512i(&codes)[4], int h) {
        const __m512i xv = bcast(b * 32 + 16 * h);
        __m512i s[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) s[g] = Dot4<true>(_mm512_setzero_si512(), codes[g], xv);
        const __m512i st = _mm512_set1_epi32(xs.start[i][2 * b + h]);
        return _mm512_cvtepi32_ps(_mm512_add_epi32(Reduce4(s[0], s[1], s[2], s[3]),
                                                   kRowZ ? _mm512_mullo_epi32(z, st) : st));
      };
      const __m512 tv =
          _mm512_fmadd_ps(_mm512_set1_ps(xs.dx[i][2 * b + 1]), half(hi, 1),
                          _mm512_mul_ps(_mm512_set1_ps(xs.dx[i][2 * b]), half(lo, 0)));
      acc[i] = _mm512_fmadd_ps(av, tv, acc[i]);
      if constexpr (kMin) acc[i] = _mm512_fmadd_ps(cv, _mm512_set1_ps(xs.jsum[i][b]), acc[i]);
    }
  }
  xs.Store(acc, a, r, n, n1);
}

// acc + the quad sums of w (unsigned) times the four signed bytes at x, broadcast.
HWY_INLINE __m512i Dot4Broadcast(__m512i acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

HWY_DIAGNOSTICS(pop)
#endif  // AVX-512

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
