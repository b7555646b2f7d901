// Per-target part of ops/quant_matmul.cc, split off ops/quant_int8_rows-inl.h
// for size: the 32-weight block types' int8 kernels over QuantMatrix::panels
// with AVX512-VNNI (the same vectors as the quad panel, one sequential
// stream) and the quad tile (many rows of x against a quad panel). Their
// 256-bit kernels and Int8Rows32Range, which picks a kernel for a range, are
// in ops/quant_int8_panels256-inl.h. Included by ops/quant_matmul.cc only,
// after ops/quant_int8_rows-inl.h.
#if defined(HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_PANELS_INL_H_
#endif

#include <algorithm>
#include <array>
#include <bit>
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
// Q4_G / Q8_G: fp32 scales, and a zero per block and row (w16 = u - z).
template <QuantType t>
constexpr bool kPanelG = t == QuantType::Q4_G || t == QuantType::Q8_G;
// Byte offsets in a panel block: the Q5 bit planes, the codes (d at 0, m at
// 32; Q4_G / Q8_G: scales at 0, zeros at 64, codes at 128).
template <QuantType t>
constexpr int64_t kPanelPlanesAt = kPanelMin<t> ? 64 : 32;
template <QuantType t>
constexpr int64_t kPanelCodesAt = kPanelG<t> ? 128 : kPanelPlanesAt<t> + (kPanelQ5<t> ? 64 : 0);
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
  if constexpr (kPanelG<t>) {
    a = _mm512_loadu_ps(reinterpret_cast<const float*>(blk));
  } else {
    // F16C: the same floats as PanelScales (and quant::load_fp16).
    a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  }
  if constexpr (kPanelMin<t>)
    c = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
  const uint8_t* codes = blk + kPanelCodesAt<t>;
  if constexpr (t == QuantType::Q8_0 || t == QuantType::Q8_G) {
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

// A Q4_G / Q8_G panel block's 16 zeros z as PanelScales has them (Q8_G's
// plus 128, its codes' offset); 0 for the other types.
template <QuantType t>
HWY_INLINE __m512i PanelZeros(const uint8_t* blk) {
  if constexpr (!kPanelG<t>) {
    (void)blk;
    return _mm512_setzero_si512();
  } else {
    const __m512i z =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64)));
    return t == QuantType::Q8_G ? _mm512_add_epi32(z, _mm512_set1_epi32(128)) : z;
  }
}

// A row of x's block b as the panel kernels meet it: its 32 codes, each
// half's integer start and scale broadcast, and the min term's factor.
struct XBlock {
  const int8_t* x;
  __m512i s0, s1;
  __m512 d0, d1, j;
  HWY_INLINE XBlock(const int8_t* qx, const float* dx, const int32_t* start, const float* jsum,
                    int64_t b)
      : x(qx + b * 32),
        s0(_mm512_set1_epi32(start[2 * b])),
        s1(_mm512_set1_epi32(start[2 * b + 1])),
        d0(_mm512_set1_ps(dx[2 * b])),
        d1(_mm512_set1_ps(dx[2 * b + 1])),
        j(_mm512_set1_ps(jsum[b])) {}
};

// acc + a row of x's block xb against a panel block's quads u, scales a (and
// mins c, or Q4_G / Q8_G's zeros z): the order of quant.h, quads 0-3 the
// first half block, 4-7 the second.
template <QuantType t>
HWY_INLINE __m512 PanelBlockDot(const __m512i (&u)[8], __m512 a, __m512 c, __m512i z,
                                const XBlock& xb, __m512 acc) {
  // Two integer chains, one per half (exact: the order of an int32 sum does
  // not matter), from -z * S_h (BlockSums' start: -z * S_h for a common
  // offset, -S_h for zeros per row).
  __m512i i0 = xb.s0, i1 = xb.s1;
  if constexpr (kPanelG<t>) {
    i0 = _mm512_mullo_epi32(z, i0);
    i1 = _mm512_mullo_epi32(z, i1);
  } else {
    (void)z;
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    i0 = Dot4Broadcast(i0, u[q], xb.x + 4 * q);
    i1 = Dot4Broadcast(i1, u[q + 4], xb.x + 16 + 4 * q);
  }
  const __m512 halves =
      _mm512_fmadd_ps(xb.d1, _mm512_cvtepi32_ps(i1), _mm512_mul_ps(xb.d0, _mm512_cvtepi32_ps(i0)));
  acc = _mm512_fmadd_ps(a, halves, acc);
  if constexpr (kPanelMin<t>) acc = _mm512_fmadd_ps(c, xb.j, acc);
  return acc;
}

// DirectRows over panels: R rows of x against the panel of rows n .. n + 15.
template <QuantType t, int R>
HWY_NOINLINE void DirectPanel(const QuantMatmulArgs& a, quant::Int8Acts& acts,
                              const BlockSums& sums, int64_t rc, int64_t r, int64_t n, int64_t n1) {
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  const uint8_t* blk = w.panels.get() + n / kPanelRows * nb * kPanelBlock<t>;
  const DirectX<R> xs(acts, sums, rc, r, nb);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  // (An end at the start: no software prefetch. With more rows of x, more
  // work per block and the prefetch: without it, decode at batch 4 lost 2-7%
  // on SmolLM2's 4-bit files on Zen 4.)
  const uint8_t* const end = R > 1 || quant::int8_decode_prefetch() ? PanelsEnd<t>(w, n1) : blk;
  for (int64_t b = 0; b < nb; ++b, blk += kPanelBlock<t>) {
    PrefetchAhead<t>(blk, end);
    __m512i u[8];
    __m512 av, cv = _mm512_setzero_ps();
    PanelBlock<t>(blk, u, av, cv);
    const __m512i zv = PanelZeros<t>(blk);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc[i] = PanelBlockDot<t>(u, av, cv, zv,
                                XBlock(xs.qx[i], xs.dx[i], xs.start[i], xs.jsum[i], b), acc[i]);
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
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  const uint8_t *blk[S], *end[S];
  StreamStarts<t, S>(w, first, stop, n1, quant::int8_decode_prefetch(), blk, end);
  const DirectX<1> xs(acts, sums, rc, r, nb);
  for (int64_t i = 0; i < count; ++i) {
    __m512 acc[S];
    for (int p = 0; p < S; ++p) acc[p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const XBlock xb(xs.qx[0], xs.dx[0], xs.start[0], xs.jsum[0], b);  // shared by the streams
#pragma GCC unroll 8
      for (int p = 0; p < S; ++p) {
        PrefetchAhead<t>(blk[p], end[p]);
        __m512i u[8];
        __m512 av, cv = _mm512_setzero_ps();
        PanelBlock<t>(blk[p], u, av, cv);
        acc[p] = PanelBlockDot<t>(u, av, cv, PanelZeros<t>(blk[p]), xb, acc[p]);
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
  p.z.resize(nb * kPanelRows);
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
    _mm512_storeu_si512(p.z.data() + b * kPanelRows, PanelZeros<t>(blk));
  }
}

constexpr int kMRQuads = 8;

// A chunk's rows of x as QuadRowsTile reads them: groups of kMRQuads rows
// (the last one may be short), each block-major, so that a tile finds a
// block's codes and sums at fixed offsets from one pointer (with a pointer
// per row, eight rows' codes, scales and starts took more registers than
// x86 has, and the spills cost the tile a fifth of its speed).
struct QuadTileX {
  std::vector<int8_t> x;    // [group][b][kMRQuads][32]: the codes
  std::vector<float> meta;  // [group][b][kMRQuads][4]: bits of start0, start1; dx0, dx1
  std::vector<float> jsum;  // [group][b][kMRQuads]: BlockSums::sum
  int64_t nb = 0;
  const int8_t* codes(int64_t g) const { return x.data() + g * nb * kMRQuads * 32; }
  const float* sums(int64_t g) const { return meta.data() + g * nb * kMRQuads * 4; }
  const float* mins(int64_t g) const { return jsum.data() + g * nb * kMRQuads; }
};

// Rows [rc, rc_end) of acts (their BlockSums in sums) into t.
inline void PackQuadTileX(const quant::Int8Acts& acts, const BlockSums& sums, int64_t rc,
                          int64_t rc_end, QuadTileX& t) {
  const int64_t nb = acts.k / 32, groups = (rc_end - rc + kMRQuads - 1) / kMRQuads;
  t.nb = nb;
  t.x.resize(groups * nb * kMRQuads * 32);
  t.meta.resize(groups * nb * kMRQuads * 4);
  t.jsum.resize(groups * nb * kMRQuads);
  for (int64_t row = rc; row < rc_end; ++row) {
    const int64_t g = (row - rc) / kMRQuads, r = (row - rc) % kMRQuads;
    const int8_t* qx = acts.qx_row(row);
    const float* dx = acts.dx_row(row);
    const int32_t* start = sums.start.data() + (row - rc) * nb * 2;
    const float* jsum = sums.sum.data() + (row - rc) * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = (g * nb + b) * kMRQuads + r;
      std::memcpy(t.x.data() + at * 32, qx + b * 32, 32);
      float* m = t.meta.data() + at * 4;
      m[0] = std::bit_cast<float>(start[2 * b]);
      m[1] = std::bit_cast<float>(start[2 * b + 1]);
      m[2] = dx[2 * b];
      m[3] = dx[2 * b + 1];
      t.jsum[at] = jsum[b];
    }
  }
}

// MR rows of x (one group of a QuadTileX: codes x, sums meta, jsum) against
// a quad panel: out[r][16]. A block's integers per half start from its
// start, times the per-row z where kRowZ.
template <int MR, bool kMin, bool kRowZ>
HWY_NOINLINE void QuadRowsTile(const int8_t* x, const float* meta, const float* jsum,
                               const QuadPanel& p, int64_t nb, float (*out)[kPanelRows]) {
  __m512 acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* u = p.u.get() + b * 512;
    const int8_t* xb = x + b * kMRQuads * 32;
    const float* mb = meta + b * kMRQuads * 4;
    [[maybe_unused]] __m512i z;
    if constexpr (kRowZ) z = _mm512_loadu_si512(p.z.data() + b * kPanelRows);
    // Per half block h (quads 4h .. 4h + 3): its integers, then
    // t = fma(dx1, float(I1), dx0 * float(I0)).
    __m512 t[MR];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i I[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512i s = _mm512_castps_si512(_mm512_set1_ps(mb[4 * r + h]));
        I[r] = kRowZ ? _mm512_mullo_epi32(z, s) : s;
      }
#pragma GCC unroll 4
      for (int q = 4 * h; q < 4 * h + 4; ++q) {
        const __m512i wq = _mm512_load_si512(u + 64 * q);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) I[r] = Dot4Broadcast(I[r], wq, xb + 32 * r + 4 * q);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512 d = _mm512_set1_ps(mb[4 * r + 2 + h]), f = _mm512_cvtepi32_ps(I[r]);
        t[r] = h == 0 ? _mm512_mul_ps(d, f) : _mm512_fmadd_ps(d, f, t[r]);
      }
    }
    const __m512 av = _mm512_loadu_ps(p.a.data() + b * kPanelRows);
    [[maybe_unused]] __m512 cv;
    if constexpr (kMin) cv = _mm512_loadu_ps(p.c.data() + b * kPanelRows);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      acc[r] = _mm512_fmadd_ps(av, t[r], acc[r]);
      if constexpr (kMin)
        acc[r] = _mm512_fmadd_ps(cv, _mm512_set1_ps(jsum[b * kMRQuads + r]), acc[r]);
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

using QuadTileFn = void (*)(const int8_t*, const float*, const float*, const QuadPanel&, int64_t,
                            float (*)[kPanelRows]);
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
  thread_local QuadTileX tx;
  if (amx) AmxConfigure();
  for (int64_t rc = r0; rc < r1; rc += kTokenChunk) {
    const int64_t rc_end = std::min(r1, rc + kTokenChunk);
    SumBlocks(acts, rc, rc_end, CommonOffset(t), sums);
    PackQuadTileX(acts, sums, rc, rc_end, tx);
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
                                   acts.row(rb).dx, sums.start.data() + (rb - rc) * nb * 2,
                                   sums.sum.data() + (rb - rc) * nb, panel, nb, out);
          quant::count_int8_amx_tile();
          for (int64_t r = 0; r < kAmxRows; ++r)
            StorePanelRow(out[r], a, rb + r, n, std::min(kPanelRows, n1 - n));
          rb += kAmxRows;
          continue;
        }
        // (rb - rc is a multiple of kMRQuads: AMX takes whole groups of 16.)
        const int64_t mr = std::min<int64_t>(kMRQuads, rc_end - rb), g = (rb - rc) / kMRQuads;
        alignas(64) float out[kMRQuads][kPanelRows];
        kTiles[mr - 1](tx.codes(g), tx.sums(g), tx.mins(g), panel, nb, out);
        for (int64_t r = 0; r < mr; ++r)
          StorePanelRow(out[r], a, rb + r, n, std::min(kPanelRows, n1 - n));
        rb += mr;
      }
    }
  }
  if (amx) AmxRelease();
  if (r1 - r0 > 64) {
    sums = BlockSums{};
    tx = QuadTileX{};
  }
}

HWY_DIAGNOSTICS(pop)
#endif  // AVX-512

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
