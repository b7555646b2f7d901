// Per-target part of ops/quant_matmul.cc, split off ops/quant_int8_rows-inl.h
// for size: the 32-weight block types' int8 kernels over QuantMatrix::panels
// (AVX512-VNNI int8 loads keep those: the same vectors as the quad panel,
// one sequential stream), the quad tile (many rows of x against a quad
// panel), and Int8Rows32Range, which picks a kernel for a range. Included by
// ops/quant_matmul.cc only, after ops/quant_int8_rows-inl.h.
#if defined(HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
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

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

// ---- QuantMatrix::panels (quant.h): the same blocks with 16 rows
// interleaved, read as one stream: per block the 16 rows' scales are one
// load and each column quad's codes one vector, as the quad panel holds them.

template <QuantType t>
constexpr bool kHasPanels = quant_has_panel_layout(t);
template <QuantType t>
constexpr bool kPanelMin = t == QuantType::Q4_1 || t == QuantType::Q5_1;
template <QuantType t>
constexpr bool kPanelQ5 = t == QuantType::Q5_0 || t == QuantType::Q5_1;
// Byte offsets in a panel block: the Q5 bit planes, the codes (d at 0, m at 32).
template <QuantType t>
constexpr int64_t kPanelPlanesAt = kPanelMin<t> ? 64 : 32;
template <QuantType t>
constexpr int64_t kPanelCodesAt = kPanelPlanesAt<t> + (kPanelQ5<t> ? 64 : 0);
template <QuantType t>
constexpr int64_t kPanelBlock = kPanelRows* kTraitsOf<t>.block_bytes;

// A range's panels are one stream, prefetched kPanelAhead blocks (~4.5 KiB)
// ahead up to its end: the hardware prefetcher alone stops at every 4 KiB
// page (SmolLM2 Q4_0 decode: 309 -> 363 tok/s). For Q4_0 that is 16 blocks;
// 2, 8 and 16 KiB were slower. Q8_0 took 16 blocks too (8.5 KiB) until its
// 8 decoded the SmolLM2 Q8_0 file 1.06-1.12x as fast (AVX2, 4 of 4 pairs).
template <QuantType t>
constexpr int64_t kPanelAhead = std::max<int64_t>(1, 4608 / kPanelBlock<t>);
template <QuantType t>
HWY_INLINE const uint8_t* PanelsEnd(const QuantMatrix& w, int64_t n1) {
  return w.panels.get() + (n1 + kPanelRows - 1) / kPanelRows * (w.k / 32) * kPanelBlock<t>;
}
template <QuantType t>
HWY_INLINE void PrefetchAhead(const uint8_t* blk, const uint8_t* end) {
  const uint8_t* ahead = blk + kPanelAhead<t> * kPanelBlock<t>;
  if (ahead >= end) return;
#pragma GCC unroll 9
  for (int64_t o = 0; o < kPanelBlock<t>; o += 64) hwy::Prefetch(ahead + o);
}

// How many streams a decode step (one row of x) reads panels [n0, n1) of a
// k-column matrix as, and whether as a long piece (seven streams, no
// software prefetch: quant::int8_long_piece_bytes()) where `long_pieces`.
// The types with a min hold two more vectors per stream: on AVX2 three
// streams spill (Q4_1, 49152x576 on 2 threads: 20 GB/s with three, 24 with
// two), so they take two at most and no long pieces.
struct DecodeStreams {
  int streams;
  bool long_piece;
};
template <QuantType t>
HWY_INLINE DecodeStreams DecodeStreamsOf(int64_t n0, int64_t n1, int64_t k, bool long_pieces) {
  const bool long_piece = long_pieces && !kPanelMin<t> &&
                          (n1 - n0 + kPanelRows - 1) / kPanelRows * (k / 32) * kPanelBlock<t> >=
                              quant::int8_long_piece_bytes();
  const int streams = long_piece     ? quant::kLongPieceStreams
                      : kPanelMin<t> ? std::min(2, quant::int8_decode_streams())
                                     : quant::int8_decode_streams();
  return {streams, long_piece};
}

// Where each of S decode streams (ForDecodeStreams) starts reading panels:
// at row first[p]; it prefetches up to its own end, row stop[p] (the next
// stream's start was read long ago), or, without `prefetch`, nothing (an end
// at its start).
template <QuantType t, int S>
HWY_INLINE void StreamStarts(const QuantMatrix& w, const int64_t* first, const int64_t* stop,
                             int64_t n1, bool prefetch, const uint8_t* (&blk)[S],
                             const uint8_t* (&end)[S]) {
  const uint8_t* const all_end = PanelsEnd<t>(w, n1);
  const auto at = [&](int64_t row) {
    return w.panels.get() + row / kPanelRows * (w.k / 32) * kPanelBlock<t>;
  };
  for (int p = 0; p < S; ++p) {
    blk[p] = at(first[p]);
    end[p] = prefetch ? std::min(at(stop[p]), all_end) : blk[p];
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_DIAGNOSTICS(push)
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wmaybe-uninitialized")
HWY_DIAGNOSTICS_OFF(disable : 4700, ignored "-Wuninitialized")

// Bytes shifted by s bits within each 16-bit lane (left for s > 0): for
// |s| <= 4, bit 4 of each byte then comes from that byte, never from its
// neighbour. Also used by the K panel kernels (quant_int8_kpanels-inl.h).
HWY_INLINE __m512i ShiftBits(__m512i v, int s) {
  return s >= 0 ? _mm512_sll_epi16(v, _mm_cvtsi32_si128(s))
                : _mm512_srl_epi16(v, _mm_cvtsi32_si128(-s));
}

// The block's eight column-quad vectors (quad q: columns 4q .. 4q + 3 of the
// 16 rows, unsigned codes) and its scales a (and mins c).
template <QuantType t>
HWY_INLINE void PanelBlock(const uint8_t* blk, __m512i (&u)[8], __m512& a, __m512& c) {
  // F16C: the same floats as PanelScales (and quant::load_fp16).
  a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  if constexpr (kPanelMin<t>)
    c = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
  const uint8_t* codes = blk + kPanelCodesAt<t>;
  if constexpr (t == QuantType::Q8_0) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) u[q] = _mm512_loadu_si512(codes + 64 * q);
  } else {
    const __m512i nib = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i x = _mm512_loadu_si512(codes + 64 * v);
      u[v] = _mm512_and_si512(x, nib);
      u[4 + v] = _mm512_and_si512(_mm512_srli_epi16(x, 4), nib);
    }
    if constexpr (kPanelQ5<t>) {
      // Quad q's fifth bits are bit q of the planes' bytes, shifted to bit 4.
      const __m512i planes = _mm512_loadu_si512(blk + kPanelPlanesAt<t>);
      const __m512i bit4 = _mm512_set1_epi8(16);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q)
        u[q] = _mm512_or_si512(u[q], _mm512_and_si512(ShiftBits(planes, 4 - q), bit4));
    }
  }
}

// DirectRows over panels: R rows of x against the panel of rows n .. n + 15.
template <QuantType t, int R>
HWY_NOINLINE void DirectPanel(const QuantMatmulArgs& a, quant::Int8Acts& acts,
                              const BlockSums& sums, int64_t rc, int64_t r, int64_t n, int64_t n1) {
  constexpr bool kMin = kPanelMin<t>;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  const uint8_t* blk = w.panels.get() + n / kPanelRows * nb * kPanelBlock<t>;
  const DirectX<R> xs(acts, sums, rc, r, nb);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  const uint8_t* const end = PanelsEnd<t>(w, n1);
  for (int64_t b = 0; b < nb; ++b, blk += kPanelBlock<t>) {
    PrefetchAhead<t>(blk, end);
    __m512i u[8];
    __m512 av, cv = _mm512_setzero_ps();
    PanelBlock<t>(blk, u, av, cv);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int8_t* x = xs.qx[i] + b * 32;
      // Two integer chains (exact: the order of an int32 sum does not matter).
      __m512i i0 = _mm512_set1_epi32(xs.start[i][b]), i1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int q = 0; q < 8; q += 2) {
        i0 = Dot4Broadcast(i0, u[q], x + 4 * q);
        i1 = Dot4Broadcast(i1, u[q + 1], x + 4 * q + 4);
      }
      const __m512 d = _mm512_set1_ps(xs.dx[i][b]);
      acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(av, d), _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)),
                               acc[i]);
      if constexpr (kMin)
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(cv, d), _mm512_set1_ps(xs.jsum[i][b]), acc[i]);
    }
  }
  xs.Store(acc, a, r, n, n1);
}

// One row of x (a decode step) against S streams of panels, as
// Panel256Streams (below) does on AVX2: stream p is `count` panels from row
// first[p] on, prefetched up to row stop[p]. Each output's chain is
// DirectPanel<t, 1>'s.
template <QuantType t, int S>
HWY_NOINLINE void DirectPanelStreams(const QuantMatmulArgs& a, quant::Int8Acts& acts,
                                     const BlockSums& sums, int64_t rc, int64_t r,
                                     const int64_t* first, const int64_t* stop, int64_t count,
                                     int64_t n1) {
  constexpr bool kMin = kPanelMin<t>;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  const uint8_t *blk[S], *end[S];
  StreamStarts<t, S>(w, first, stop, n1, true, blk, end);
  const DirectX<1> xs(acts, sums, rc, r, nb);
  for (int64_t i = 0; i < count; ++i) {
    __m512 acc[S];
    for (int p = 0; p < S; ++p) acc[p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* x = xs.qx[0] + b * 32;
      const __m512 d = _mm512_set1_ps(xs.dx[0][b]);
#pragma GCC unroll 8
      for (int p = 0; p < S; ++p) {
        PrefetchAhead<t>(blk[p], end[p]);
        __m512i u[8];
        __m512 av, cv = _mm512_setzero_ps();
        PanelBlock<t>(blk[p], u, av, cv);
        __m512i i0 = _mm512_set1_epi32(xs.start[0][b]), i1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int q = 0; q < 8; q += 2) {
          i0 = Dot4Broadcast(i0, u[q], x + 4 * q);
          i1 = Dot4Broadcast(i1, u[q + 1], x + 4 * q + 4);
        }
        acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(av, d), _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)),
                                 acc[p]);
        if constexpr (kMin)
          acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(cv, d), _mm512_set1_ps(xs.jsum[0][b]), acc[p]);
        blk[p] += kPanelBlock<t>;
      }
    }
    for (int p = 0; p < S; ++p) {
      const __m512 one[1] = {acc[p]};
      xs.Store(one, a, r, first[p] + i * kPanelRows, n1);
    }
  }
}

using DirectStreamsFn = void (*)(const QuantMatmulArgs&, quant::Int8Acts&, const BlockSums&,
                                 int64_t, int64_t, const int64_t*, const int64_t*, int64_t,
                                 int64_t);
template <QuantType t>
constexpr DirectStreamsFn kDirectStreamsOf[quant::kMaxDecodeStreams] = {
    &DirectPanelStreams<t, 1>, &DirectPanelStreams<t, 2>, &DirectPanelStreams<t, 3>,
    &DirectPanelStreams<t, 4>, &DirectPanelStreams<t, 5>, &DirectPanelStreams<t, 6>,
    &DirectPanelStreams<t, 7>, &DirectPanelStreams<t, 8>};

// The quad panel of rows n .. n + 15 from panels: the same vectors PackQuads
// makes from the rows, without gathers or transpositions.
template <QuantType t>
HWY_NOINLINE void PackQuadsFromPanels(const QuantMatrix& w, int64_t n, int64_t n1, QuadPanel& p) {
  const int64_t nb = w.k / 32;
  uint8_t* u = p.codes(nb * 512);
  p.a.resize(nb * kPanelRows);
  p.c.resize(nb * kPanelRows);
  p.z.assign(nb * kPanelRows, 0);
  const uint8_t* blk = w.panels.get() + n / kPanelRows * nb * kPanelBlock<t>;
  const uint8_t* const end = PanelsEnd<t>(w, n1);
  for (int64_t b = 0; b < nb; ++b, blk += kPanelBlock<t>) {
    PrefetchAhead<t>(blk, end);
    __m512i q[8];
    __m512 a, c = _mm512_setzero_ps();
    PanelBlock<t>(blk, q, a, c);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) _mm512_store_si512(u + b * 512 + 64 * j, q[j]);
    _mm512_storeu_ps(p.a.data() + b * kPanelRows, a);
    _mm512_storeu_ps(p.c.data() + b * kPanelRows, c);
  }
}

constexpr int kMRQuads = 8;

// MR rows of x against a quad panel: out[r][16]. start: each block's integer
// start (BlockSums), times the per-row z where kRowZ.
template <int MR, bool kMin, bool kRowZ>
HWY_NOINLINE void QuadRowsTile(const int8_t* const* qx, const float* const* dx,
                               const int32_t* const* start, const float* const* jsum,
                               const QuadPanel& p, int64_t nb, float (*out)[kPanelRows]) {
  __m512 acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* u = p.u.get() + b * 512;
    __m512i I[MR];
    [[maybe_unused]] __m512i z;
    if constexpr (kRowZ) z = _mm512_loadu_si512(p.z.data() + b * kPanelRows);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512i s = _mm512_set1_epi32(start[r][b]);
      I[r] = kRowZ ? _mm512_mullo_epi32(z, s) : s;
    }
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const __m512i wq = _mm512_load_si512(u + 64 * q);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) I[r] = Dot4Broadcast(I[r], wq, qx[r] + b * 32 + 4 * q);
    }
    const __m512 av = _mm512_loadu_ps(p.a.data() + b * kPanelRows);
    [[maybe_unused]] __m512 cv;
    if constexpr (kMin) cv = _mm512_loadu_ps(p.c.data() + b * kPanelRows);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 d = _mm512_set1_ps(dx[r][b]);
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(av, d), _mm512_cvtepi32_ps(I[r]), acc[r]);
      if constexpr (kMin)
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(cv, d), _mm512_set1_ps(jsum[r][b]), acc[r]);
    }
  }
  for (int r = 0; r < MR; ++r) _mm512_storeu_ps(out[r], acc[r]);
}

using DirectFn = void (*)(const QuantMatmulArgs&, quant::Int8Acts&, const BlockSums&, int64_t,
                          int64_t, int64_t, int64_t);
template <QuantType t>
constexpr DirectFn kDirectRowsOf[4] = {&DirectRows<t, 1>, &DirectRows<t, 2>, &DirectRows<t, 3>,
                                       &DirectRows<t, 4>};
template <QuantType t>
constexpr DirectFn kDirectPanels[4] = {&DirectPanel<t, 1>, &DirectPanel<t, 2>, &DirectPanel<t, 3>,
                                       &DirectPanel<t, 4>};

using QuadTileFn = void (*)(const int8_t* const*, const float* const*, const int32_t* const*,
                            const float* const*, const QuadPanel&, int64_t, float (*)[kPanelRows]);
template <bool kMin, bool kRowZ, size_t... I>
constexpr std::array<QuadTileFn, sizeof...(I)> MakeQuadTiles(std::index_sequence<I...>) {
  return {&QuadRowsTile<static_cast<int>(I) + 1, kMin, kRowZ>...};
}

template <QuantType t>
HWY_NOINLINE void Int8QuadsRange(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0,
                                 int64_t r1, int64_t n0, int64_t n1) {
  constexpr bool kMin = t == QuantType::Q4_1 || t == QuantType::Q5_1;
  constexpr bool kRowZ = CommonOffset(t) < 0;
  static constexpr auto kTiles = MakeQuadTiles<kMin, kRowZ>(std::make_index_sequence<kMRQuads>());
  const int64_t nb = a.w->k / 32;
  thread_local QuadPanel panel;
  thread_local BlockSums sums;
  // Panels where the matrix has them and the range starts on one (the
  // tiling cuts such matrices at multiples of 16 rows).
  const bool panels = kHasPanels<t> && a.w->panels && n0 % kPanelRows == 0;
  // (Tests turn the direct path off to cover the panel with few rows.)
  if (r1 - r0 <= kDirectRows && quant::int8_fused_allowed()) {
    SumBlocks(acts, r0, r1, CommonOffset(t), sums);
    if constexpr (kHasPanels<t>) {
      // A decode step reads its panels as several streams at once, but no
      // long pieces: on the Xeon measured, Gemma 3's 262144x640 Q8_0 lm_head
      // took 3.29-3.41 ms as seven unprefetched streams against 3.17 as one,
      // and its decode fell from 147-155 to 123-145 tok/s.
      const DecodeStreams ds = DecodeStreamsOf<t>(n0, n1, a.w->k, false);
      if (panels && r1 - r0 == 1 && ds.streams > 1 && n1 > n0) {
        ForDecodeStreams(n0, n1, ds.streams,
                         [&](int64_t s, const int64_t* first, const int64_t* stop, int64_t count) {
                           kDirectStreamsOf<t>[s - 1](a, acts, sums, r0, r0, first, stop, count,
                                                      n1);
                         });
        return;
      }
    }
    for (int64_t n = n0; n < n1; n += kPanelRows) {
      for (int64_t r = r0; r < r1;) {
        const int rows = static_cast<int>(std::min<int64_t>(r1 - r, 4));
        if constexpr (kHasPanels<t>) {
          if (panels) {
            kDirectPanels<t>[rows - 1](a, acts, sums, r0, r, n, n1);
            r += rows;
            continue;
          }
        }
        kDirectRowsOf<t>[rows - 1](a, acts, sums, r0, r, n, n1);
        r += rows;
      }
    }
    return;
  }
  // Where enabled and the CPU has AMX, groups of 16 rows of x take their
  // block integers from tiles, the rest the vpdpbusd tile: the same bits.
  const bool amx = r1 - r0 >= kAmxRows && quant::int8_amx_enabled() && amx_int8_ready();
  thread_local std::vector<int8_t> amx_rows;
  if (amx) AmxConfigure();
  for (int64_t rc = r0; rc < r1; rc += kTokenChunk) {
    const int64_t rc_end = std::min(r1, rc + kTokenChunk);
    SumBlocks(acts, rc, rc_end, CommonOffset(t), sums);
    if (amx) PackAmxRows(acts.row(rc).qx, acts.k, (rc_end - rc) / kAmxRows, amx_rows);
    for (int64_t n = n0; n < n1; n += kPanelRows) {
      if constexpr (kHasPanels<t>) {
        if (panels) {
          PackQuadsFromPanels<t>(*a.w, n, n1, panel);
        } else {
          PackQuads<t>(*a.w, n, n1, panel);
        }
      } else {
        PackQuads<t>(*a.w, n, n1, panel);
      }
      for (int64_t rb = rc; rb < rc_end;) {
        if (amx && rc_end - rb >= kAmxRows) {
          alignas(64) float out[kAmxRows][kPanelRows];
          QuadRowsAmx<kMin, kRowZ>(amx_rows.data() + (rb - rc) / kAmxRows * nb * 512,
                                   acts.row(rb).dx, sums.start.data() + (rb - rc) * nb,
                                   sums.sum.data() + (rb - rc) * nb, panel, nb, out);
          quant::count_int8_amx_tile();
          for (int64_t r = 0; r < kAmxRows; ++r)
            StorePanelRow(out[r], a, rb + r, n, std::min(kPanelRows, n1 - n));
          rb += kAmxRows;
          continue;
        }
        const int64_t mr = std::min<int64_t>(kMRQuads, rc_end - rb);
        const int8_t* qx[kMRQuads];
        const float* dx[kMRQuads];
        const int32_t* start[kMRQuads];
        const float* jsum[kMRQuads];
        for (int64_t r = 0; r < mr; ++r) {
          const quant::Int8Row row = acts.row(rb + r);
          qx[r] = row.qx;
          dx[r] = row.dx;
          start[r] = sums.start.data() + (rb + r - rc) * nb;
          jsum[r] = sums.sum.data() + (rb + r - rc) * nb;
        }
        alignas(64) float out[kMRQuads][kPanelRows];
        kTiles[mr - 1](qx, dx, start, jsum, panel, nb, out);
        for (int64_t r = 0; r < mr; ++r)
          StorePanelRow(out[r], a, rb + r, n, std::min(kPanelRows, n1 - n));
        rb += mr;
      }
    }
  }
  if (amx) AmxRelease();
  if (r1 - r0 > 64) sums = BlockSums{};
}

HWY_DIAGNOSTICS(pop)
#endif  // AVX-512

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
// llama.cpp's quantizer too) and, per int16 lane, a 4-bit type sums 16
// products of u <= 15 (at most 30480), a 5-bit type 8 of u <= 31 (31496).
// Q8_0's u = code + 128 would overflow a pair; it multiplies |code| by x
// with code's sign (vpsignb) instead, at most 2 * 128 * 127 = 32512 a pair.
// The integers are those of quant::int8_block_dot, and the floats the same
// fma chain per output: bit for bit the reference on any target.

// Half h of a block: quad q's eight rows' codes (unsigned; Q8_0: signed),
// and those rows' scales a (and mins c).
template <QuantType t>
HWY_INLINE void PanelHalf(const uint8_t* blk, int h, __m256i (&u)[8], __m256& a, __m256& c) {
  a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
  if constexpr (kPanelMin<t>)
    c = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)));
  const uint8_t* codes = blk + kPanelCodesAt<t> + 32 * h;
  if constexpr (t == QuantType::Q8_0) {
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

// The integer sum of a half block's eight rows against x's 32 codes, from
// `start` (BlockSums; Q8_0, whose codes are signed here, from 0).
template <QuantType t>
HWY_INLINE __m256i HalfDot(const __m256i (&u)[8], const int8_t* x, int32_t start) {
  const __m256i ones = _mm256_set1_epi16(1);
  const auto xq = [&](int q) {
    int32_t v;
    std::memcpy(&v, x + 4 * q, sizeof(v));
    return _mm256_set1_epi32(v);
  };
  if constexpr (t == QuantType::Q8_0) {
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int q = 0; q < 8; q += 2) {
      const __m256i p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(u[q]), _mm256_sign_epi8(xq(q), u[q]));
      const __m256i p1 =
          _mm256_maddubs_epi16(_mm256_abs_epi8(u[q + 1]), _mm256_sign_epi8(xq(q + 1), u[q + 1]));
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, ones));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, ones));
    }
    (void)start;
    return _mm256_add_epi32(s0, s1);
  } else {
    constexpr int kRun = kPanelQ5<t> ? 4 : 8;  // quads per exact int16 sum
    __m256i sum = _mm256_set1_epi32(start);
#pragma GCC unroll 2
    for (int q0 = 0; q0 < 8; q0 += kRun) {
      __m256i s = _mm256_maddubs_epi16(u[q0], xq(q0));
#pragma GCC unroll 8
      for (int q = q0 + 1; q < q0 + kRun; ++q)
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(u[q], xq(q)));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(s, ones));
    }
    return sum;
  }
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
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const __m256i I = HalfDot<t>(u, xs.qx[i] + b * 32, xs.start[i][b]);
        const __m256 d = _mm256_set1_ps(xs.dx[i][b]);
        acc[i][h] = _mm256_fmadd_ps(_mm256_mul_ps(av, d), _mm256_cvtepi32_ps(I), acc[i][h]);
        if constexpr (kMin)
          acc[i][h] =
              _mm256_fmadd_ps(_mm256_mul_ps(cv, d), _mm256_set1_ps(xs.jsum[i][b]), acc[i][h]);
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
      const __m256 d = _mm256_set1_ps(xs.dx[0][b]);
#pragma GCC unroll 4
      for (int p = 0; p < S; ++p) {
        PrefetchAhead<t>(blk[p], end[p]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i u[8];
          __m256 av, cv = _mm256_setzero_ps();
          PanelHalf<t>(blk[p], h, u, av, cv);
          const __m256i I = HalfDot<t>(u, xs.qx[0] + b * 32, xs.start[0][b]);
          acc[p][h] = _mm256_fmadd_ps(_mm256_mul_ps(av, d), _mm256_cvtepi32_ps(I), acc[p][h]);
          if constexpr (kMin)
            acc[p][h] =
                _mm256_fmadd_ps(_mm256_mul_ps(cv, d), _mm256_set1_ps(xs.jsum[0][b]), acc[p][h]);
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
                                              !ds.long_piece);
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
