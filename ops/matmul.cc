// Packed-panel fp32 matmul: the scalar reference and a register-tiled Highway
// kernel compiled once per SIMD target and dispatched at run time (packing:
// ops/matmul_pack.cc; bf16 dot products: ops/matmul_bf16_dot-inl.h; coded
// bf16 weights on them: ops/matmul_bf16_coded-inl.h).
//
// Every output element is reduced in the fixed order of matmul.h (one FMA chain
// per block of kKBlock k's, block sums added in k order, then + bias), so all
// targets, tilings and thread counts agree bit for bit. Work is split over rows
// and column panels only; K is never split across threads.
#include "ops/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "hwy/aligned_allocator.h"
#include "hwy/base.h"
#include "ops/bf16.h"
#include "ops/cpu_amx.h"
#include "ops/flush_denormals.h"
#include "ops/scratch.h"
#include "tensor/dtype.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // MXCSR, _mm512_permutex2var_ps
#endif

#ifndef HUBZOO_OPS_BLOCKED_DOT
#define HUBZOO_OPS_BLOCKED_DOT
namespace hubzoo {

// fp16 panels as Highway's binary16 type (the same bits), and one element
// widened (exactly).
inline const hwy::float16_t* F16Panels(const PackedMatrix& w) {
  return reinterpret_cast<const hwy::float16_t*>(w.half.get());
}
inline float widen(hwy::float16_t w) {
  uint16_t bits;
  std::memcpy(&bits, &w, sizeof bits);
  return f16_to_f32(bits);
}

// The reduction order of one output element (matmul.h), written out in scalar
// code: x[0..K) against a packed weight column (stride kPanel).
template <typename WT>
float blocked_dot(const float* x, const WT* w, int64_t K) {
  float total = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
    const int64_t k1 = std::min(K, k0 + kKBlock);
    float acc = 0.0f;
    for (int64_t kk = k0; kk < k1; ++kk) acc = std::fma(x[kk], widen(w[kk * kPanel]), acc);
    total += acc;
  }
  return total;
}

// blocked_dot for bf16_activations (matmul.h): x rounded to bf16, every
// operand and result flushed.
inline float blocked_dot_flushed(const float* x, const uint16_t* w, int64_t K) {
  float total = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
    const int64_t k1 = std::min(K, k0 + kKBlock);
    float acc = 0.0f;
    for (int64_t kk = k0; kk < k1; ++kk) {
      const float xv = flush_denormal(round_bf16(x[kk]));
      const float wv = flush_denormal(bf16_to_float(w[kk * kPanel]));
      acc = flush_denormal(std::fma(xv, wv, acc));
    }
    total = flush_denormal(total + acc);
  }
  return total;
}
inline float add_bias_flushed(float acc, const float* bias, int64_t n) {
  return bias ? flush_denormal(acc + flush_denormal(bias[n])) : acc;
}

// The tile chain (matmul.h) of x (rounded to bf16 and flushed, zero from K
// to tile_k()) against column c of a bf16_tiles panel: per kTileK block,
// the even and the odd k's chains, then their sum.
inline float tile_chain_dot(const float* x, int64_t kp, const uint16_t* panel, int64_t c) {
  float total = 0.0f;
  for (int64_t k0 = 0; k0 < kp; k0 += kTileK) {
    float even = 0.0f, odd = 0.0f;
    for (int64_t k = k0; k < k0 + kTileK; k += 2) {
      const uint16_t* pair = panel + (k / 2) * 2 * kPanel + c * 2;
      even = flush_denormal(std::fma(x[k], flush_denormal(bf16_to_float(pair[0])), even));
      odd = flush_denormal(std::fma(x[k + 1], flush_denormal(bf16_to_float(pair[1])), odd));
    }
    total = flush_denormal(total + flush_denormal(even + odd));
  }
  return total;
}

// Rows [r0, r1) x panels [p0, p1) of a bf16_tiles product in that scalar
// code (a CPU without AMX-BF16 runs tile-layout matrices only in tests).
inline void tile_chain_rows(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const PackedMatrix& w = *a.w;
  const int64_t n_end = std::min(w.n, p1 * kPanel);
  std::vector<float> x(static_cast<size_t>(w.tile_k()), 0.0f);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t k = 0; k < w.k; ++k) {
      x[k] = flush_denormal(round_bf16(flush_denormal(a.x[r * a.ldx + k])));
    }
    for (int64_t n = p0 * kPanel; n < n_end; ++n) {
      const float acc = tile_chain_dot(
          x.data(), w.tile_k(), w.half.get() + (n / kPanel) * w.panel_elements(), n % kPanel);
      a.y[r * a.ldy + n] = add_bias_flushed(acc, a.bias, n);
    }
  }
}

std::atomic<bool> g_bf16_dot_allowed{true};
std::atomic<bool> g_bf16_coded_allowed{true};
std::atomic<bool> g_bf16_tiles_allowed{true};
std::atomic<int64_t> g_amx_products{0};

}  // namespace hubzoo
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t DispatchedTarget() { return HWY_TARGET; }

// Whether this target runs the register-tiled kernel below (else the scalar chain).
bool HasVectorKernel() { return HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE; }

// The SIMD path needs a true fused multiply-add (SSSE3/SSE4/EMU128 emulate
// MulAdd as mul + add, which rounds twice) and a fixed vector length that divides kPanel.
#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

using DF = hn::ScalableTag<float>;
using V = hn::Vec<DF>;
constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(DF()));
static_assert(kPanel % kLanes == 0, "a panel must be whole vectors");
constexpr int kVecsPerPanel = static_cast<int>(kPanel / kLanes);

// Accumulator registers: all but ~4 of the register file (x86 before AVX-512 has 16).
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kAccBudget = 12;
#else
constexpr int kAccBudget = 28;
#endif
// Rows per register tile: 14 on AVX-512 (28 zmm accumulators), 3 on AVX2 (12 ymm).
constexpr int kMR = std::max(1, kAccBudget / kVecsPerPanel);

// Panels per tile for an MR-row tile: few rows (decode) need several panels in
// flight to hide FMA latency and to keep several weight streams open.
constexpr int PanelsPerTile(int mr) { return std::clamp(kAccBudget / (mr * kVecsPerPanel), 1, 4); }

// kLanes weights as float32 vector: loaded, or widened exactly from bf16 or
// from fp16 (vcvtph2ps on x86).
HWY_INLINE V LoadWeights(DF d, const float* HWY_RESTRICT p) { return hn::Load(d, p); }
HWY_INLINE V LoadWeights(DF d, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}
HWY_INLINE V LoadWeights(DF d, const hwy::float16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}

// Tile of y[0..MR, 0..NP*kPanel) over k in [k0, k1) (k0 a multiple of
// kKBlock). x: row 0 of the block at k0, rows ldx apart (x is read in place:
// see MatmulTile); w: first panel at k0.
// n_valid: columns of y that exist from the tile's first column on.
// The running total of each element starts at 0 (first) or at the partial
// total left in y by the previous k range, and k blocks are added to it in
// order, so splitting K into ranges leaves every bit as the one chain of
// matmul.h; the last range adds bias and leaves the result.
template <int MR, int NP, typename WT>
HWY_INLINE void Tile(const float* HWY_RESTRICT x, int64_t ldx, const WT* HWY_RESTRICT w,
                     int64_t k_len, int64_t panel_stride, bool first, bool last,
                     const float* HWY_RESTRICT bias, float* HWY_RESTRICT y, int64_t ldy,
                     int64_t n_valid) {
  constexpr int C = NP * kVecsPerPanel;
  const DF d;
  // Block sums are added into `total` (on the stack, in L1) in k order.
  V total[MR][C];
  V acc[MR][C];
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 64
    for (int c = 0; c < C; ++c) {
      const int64_t col = c * kLanes;
      if (first || col >= n_valid) {
        total[r][c] = hn::Zero(d);
      } else if (col + kLanes <= n_valid) {
        total[r][c] = hn::LoadU(d, y + r * ldy + col);
      } else {
        alignas(64) float tmp[kLanes] = {};
        for (int64_t i = 0; i < n_valid - col; ++i) tmp[i] = y[r * ldy + col + i];
        total[r][c] = hn::Load(d, tmp);
      }
    }
  }
  for (int64_t k0 = 0; k0 < k_len; k0 += kKBlock) {
    const int64_t k1 = std::min(k_len, k0 + kKBlock);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 64
      for (int c = 0; c < C; ++c) acc[r][c] = hn::Zero(d);
    }
    for (int64_t kk = k0; kk < k1; ++kk) {
      V wv[C];
#pragma GCC unroll 64
      for (int c = 0; c < C; ++c) {
        wv[c] = LoadWeights(
            d, w + (c / kVecsPerPanel) * panel_stride + kk * kPanel + (c % kVecsPerPanel) * kLanes);
      }
#pragma GCC unroll 64
      for (int r = 0; r < MR; ++r) {
        const V xb = hn::Set(d, x[r * ldx + kk]);
#pragma GCC unroll 64
        for (int c = 0; c < C; ++c) acc[r][c] = hn::MulAdd(xb, wv[c], acc[r][c]);
      }
    }
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 64
      for (int c = 0; c < C; ++c) total[r][c] = hn::Add(total[r][c], acc[r][c]);
    }
  }
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
    float* out_row = y + r * ldy;
#pragma GCC unroll 64
    for (int c = 0; c < C; ++c) {
      const int64_t col = c * kLanes;
      const float* b = last ? bias : nullptr;
      if (col + kLanes <= n_valid) {
        V v = total[r][c];
        if (b) v = hn::Add(v, hn::LoadU(d, b + col));
        hn::StoreU(v, d, out_row + col);
      } else if (col < n_valid) {  // last, partial panel
        alignas(64) float tmp[kLanes];
        hn::Store(total[r][c], d, tmp);
        for (int64_t i = 0; i < n_valid - col; ++i) {
          out_row[col + i] = b ? tmp[i] + b[col + i] : tmp[i];
        }
      }
    }
  }
}

// Panels [p0, p1) of a row block, NP at a time, then one at a time:
// tile(p, np) with np an std::integral_constant (the tile's panel count).
template <int NP, typename TileAt>
HWY_INLINE void ForEachPanelTile(int64_t p0, int64_t p1, TileAt tile) {
  int64_t p = p0;
  for (; p + NP <= p1; p += NP) tile(p, std::integral_constant<int, NP>());
  for (; p < p1; ++p) tile(p, std::integral_constant<int, 1>());
}

// MR rows of y over panels [p0, p1) of weights `panels` (float, bf16 or fp16), k in [k0, k1).
// x: row 0 of the block at k = 0.
template <int MR, typename WT>
HWY_NOINLINE void RowBlock(const float* x, int64_t ldx, const WT* panels, const PackedMatrix& w,
                           int64_t p0, int64_t p1, int64_t k0, int64_t k1, const float* bias,
                           float* y, int64_t ldy) {
  const int64_t K = w.k;
  ForEachPanelTile<PanelsPerTile(MR)>(p0, p1, [&](int64_t p, auto np) {
    Tile<MR, decltype(np)::value>(x + k0, ldx, panels + p * K * kPanel + k0 * kPanel, k1 - k0,
                                  K * kPanel, k0 == 0, k1 == K, bias ? bias + p * kPanel : nullptr,
                                  y + p * kPanel, ldy, w.n - p * kPanel);
  });
}

template <int MR>
void RowBlockAny(const float* x, int64_t ldx, const PackedMatrix& w, int64_t p0, int64_t p1,
                 int64_t k0, int64_t k1, const float* bias, float* y, int64_t ldy) {
  if (w.is_f16()) {
    RowBlock<MR>(x, ldx, F16Panels(w), w, p0, p1, k0, k1, bias, y, ldy);
  } else if (w.is_bf16()) {
    RowBlock<MR>(x, ldx, w.half.get(), w, p0, p1, k0, k1, bias, y, ldy);
  } else {
    RowBlock<MR>(x, ldx, w.data.get(), w, p0, p1, k0, k1, bias, y, ldy);
  }
}

// As RowBlock, over panels [pg, pe) widened to float32 in `wide` (panel pg
// first, each holding k in [k0, k1), panel_stride floats apart): the same
// tiles, reading float weights.
template <int MR>
HWY_NOINLINE void RowBlockWide(const float* x, int64_t ldx, const float* wide, int64_t panel_stride,
                               const PackedMatrix& w, int64_t pg, int64_t pe, int64_t k0,
                               int64_t k1, const float* bias, float* y, int64_t ldy) {
  ForEachPanelTile<PanelsPerTile(MR)>(pg, pe, [&](int64_t p, auto np) {
    Tile<MR, decltype(np)::value>(
        x + k0, ldx, wide + (p - pg) * panel_stride, k1 - k0, panel_stride, k0 == 0, k1 == w.k,
        bias ? bias + p * kPanel : nullptr, y + p * kPanel, ldy, w.n - p * kPanel);
  });
}
using RowBlockWideFn = void (*)(const float*, int64_t, const float*, int64_t, const PackedMatrix&,
                                int64_t, int64_t, int64_t, int64_t, const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockWideFn, sizeof...(I)> MakeRowBlockWideTable(
    std::index_sequence<I...>) {
  return {&RowBlockWide<static_cast<int>(I) + 1>...};
}
constexpr auto kRowBlocksWide = MakeRowBlockWideTable(std::make_index_sequence<kMR>());

// 16-bit panels [pg, pe) over k in [k0, k1) widened (exactly) into `wide`,
// (k1 - k0) * kPanel floats per panel: each panel's k range is contiguous.
template <typename WT>
void WidenPanelsOf(const WT* panels, const PackedMatrix& w, int64_t pg, int64_t pe, int64_t k0,
                   int64_t k1, float* HWY_RESTRICT wide) {
  const DF d;
  const int64_t len = (k1 - k0) * kPanel;  // a multiple of kLanes
  for (int64_t p = pg; p < pe; ++p) {
    const WT* src = panels + p * w.k * kPanel + k0 * kPanel;
    float* dst = wide + (p - pg) * len;
    for (int64_t i = 0; i < len; i += kLanes) hn::Store(LoadWeights(d, src + i), d, dst + i);
  }
}
void WidenPanels(const PackedMatrix& w, int64_t pg, int64_t pe, int64_t k0, int64_t k1,
                 float* HWY_RESTRICT wide) {
  if (w.is_f16()) return WidenPanelsOf(F16Panels(w), w, pg, pe, k0, k1, wide);
  WidenPanelsOf(w.half.get(), w, pg, pe, k0, k1, wide);
}

// Whether a tile of `rows` rows reads 16-bit panels widened once per panel
// group and k range (WidenPanels) rather than widening every weight for
// every row block. Without AVX-512 a row block is 3 rows, and widening 4
// vectors per k took a third of the FMA kernel's issue slots: SmolLM2 bf16
// prefill 512 ran at 344 tok/s against 538 in float32 (bench/results/
// bench_avx2.md). From 4 row blocks on, the copy is read at least 4 times.
// The tiles' arithmetic is the same either way (widening is exact), so the
// choice changes no bit. AVX-512's 14-row blocks widen 2 vectors per 28 FMAs;
// they keep reading bf16 (unmeasured there). fp16 panels (vcvtph2ps) take
// the same path.
bool WidensPanels(const PackedMatrix& w, int64_t rows) {
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
  return w.is_half() && rows >= 4 * kMR;
#else
  (void)w;
  (void)rows;
  return false;
#endif
}

using RowBlockFn = void (*)(const float*, int64_t, const PackedMatrix&, int64_t, int64_t, int64_t,
                            int64_t, const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockFn, sizeof...(I)> MakeRowBlockTable(std::index_sequence<I...>) {
  return {&RowBlockAny<static_cast<int>(I) + 1>...};
}
// kRowBlocks[mr - 1] handles an mr-row block, mr = 1..kMR.
constexpr auto kRowBlocks = MakeRowBlockTable(std::make_index_sequence<kMR>());

// x is read in place: a tile broadcasts x[r * ldx + k] straight from the rows
// of x, and nothing is packed. Packing x into [K][kMR] blocks (scalar
// transposition) was ~9% of the time of a 512-row prefill matmul on one
// thread, and with columns split over threads every thread packed all rows;
// reading in place measured 0.96 -> 1.01x oneDNN (q_proj, M = 512, 1 thread)
// and 0.88 -> 1.01x (k_proj). The rows of a block are kMR streams of x; they
// stay in L1 as long as they do not pile up in a few L1 sets (64 sets of 64-byte
// lines): a row stride of a multiple of 4 KiB (K = 1024, 2048, 4096) puts all
// kMR rows in one 8-way set, and each broadcast would miss. Such x is copied
// to a stride of an odd number of cache lines, which spreads the rows over
// kMR sets (a memcpy per row, far cheaper than the transposition was).
constexpr int64_t kL1Sets = 64, kL1Ways = 8, kLineFloats = 16;

bool RowsShareL1Sets(int64_t ldx) {
  std::array<int, kL1Sets> rows_in_set{};
  int worst = 0;
  for (int64_t r = 0; r < kMR; ++r) {
    worst = std::max(worst, ++rows_in_set[(r * ldx / kLineFloats) % kL1Sets]);
  }
  // K = 1536 (6 KiB rows, 7 rows per set) read in place measured ~3% faster
  // than a copy; K = 1024 and 2048 (14 rows per set) 20% slower.
  return worst >= kL1Ways;
}

// Cache blocking for many rows (GotoBLAS order): a row chunk of x over one k
// range (<= kRowChunkBytes) stays in L2 (1 MiB per core on Zen 4) while every
// panel group passes over it, and a group of kPanelGroup weight panels over the
// k range stays in L2 while every row block of the chunk passes over it.
//
// K is cut into ranges of whole k blocks only when it is long: a tile over a
// k range after the first loads its partial totals back from y (see Tile),
// and that round trip cost more than the k range saves in cache. Measured on
// one thread, M = 512 (bench/matmul_bench, GFLOP/s): K = 576 in ranges of 256
// (then 3 x 192) vs all of K: q_proj 107 -> 111, gate_up_proj 99 -> 107,
// lm_head 93-96 -> 106; down_proj (K = 1536) ranges of 256 / 768 / all of K:
// 105 / 108 / 110. At K = 2048 and 4096 (x copied, see above) ranges of 1024,
// 2048 or all of K measured the same within noise. The ranges hold equal
// numbers of k blocks (no short last range paying the set-up for little work).
// kRowChunkBytes 256 KiB .. 4 MiB and kPanelGroup 2 .. 8 measured within 3%;
// 1 panel per group lost 5% (gate_up_proj).
constexpr int64_t kKChunk = 24 * kKBlock;  // the longest k range (1536)
static_assert(kKChunk % kKBlock == 0, "k ranges must be whole k blocks");
constexpr int64_t kRowChunkBytes = 1024 * 1024;
constexpr int64_t kPanelGroup = 4;  // panels a row block visits before the next row block

constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t KRangeLength(int64_t K) {
  const int64_t ranges = CeilDiv(K, kKChunk);
  return CeilDiv(CeilDiv(K, kKBlock), ranges) * kKBlock;
}

// The cache blocking of MatmulTile over rows [r0, r1) x panels [p0, p1):
// x_chunk(b, e) gives rows [b, e) of x (relative to r0) as the kernel reads
// them, rows `ld` elements of x_bytes bytes per k apart; block(mr, x, pg, pe,
// k0, k1, r) runs an mr-row block at row r0 + r over panels [pg, pe), k in [k0, k1).
template <typename XChunk, typename Block>
void ForEachRowBlock(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                     int64_t x_bytes, int64_t ld, XChunk x_chunk, Block block) {
  const int64_t K = a.w->k;
  const int64_t rows = r1 - r0;
  if (rows <= kMR) {  // one row block (decode): stream the panels once, all of K
    block(rows, x_chunk(0, rows), p0, p1, 0, K, 0);
    return;
  }
  const int64_t k_range = KRangeLength(K);
  // Rows per chunk: whole row blocks, the chunks of equal size.
  const int64_t max_chunk = std::max<int64_t>(1, kRowChunkBytes / (k_range * x_bytes) / kMR) * kMR;
  const int64_t chunk = CeilDiv(CeilDiv(rows, CeilDiv(rows, max_chunk)), kMR) * kMR;
  for (int64_t rc = 0; rc < rows; rc += chunk) {
    const int64_t rc_end = std::min(rows, rc + chunk);
    const auto* xc = x_chunk(rc, rc_end);
    for (int64_t k0 = 0; k0 < K; k0 += k_range) {
      const int64_t k1 = std::min(K, k0 + k_range);
      for (int64_t pg = p0; pg < p1; pg += kPanelGroup) {
        const int64_t pe = std::min(p1, pg + kPanelGroup);
        for (int64_t rb = rc; rb < rc_end; rb += kMR) {
          block(std::min<int64_t>(kMR, rc_end - rb), xc + (rb - rc) * ld, pg, pe, k0, k1, rb);
        }
      }
    }
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // MatmulTileDot, MatmulTileAmx
#include "ops/matmul_bf16_amx-inl.h"
#include "ops/matmul_bf16_dot-inl.h"
// After the bf16 dot product kernel, whose tiles it shares.
#include "ops/matmul_bf16_coded-inl.h"
#endif

// dst = round_bf16(flush_denormal(src)) over k floats (the copy of x the FMA
// kernel multiplies under bf16_activations), vectorised: a scalar loop cost
// as much as the matmul itself at K = 576.
void RoundBf16Flushed(const float* HWY_RESTRICT src, int64_t k, float* HWY_RESTRICT dst) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const auto sign = hn::Set(du, 0x80000000u), high = hn::Set(du, 0xFFFF0000u);
  int64_t c = 0;
  for (; c + kLanes <= k; c += kLanes) {
    const V v = hn::LoadU(d, src + c);
    auto u = hn::BitCast(du, v);
    u = hn::IfThenElse(hn::RebindMask(du, hn::Lt(hn::Abs(v), hn::Set(d, 0x1p-126f))),
                       hn::And(u, sign), u);
    const auto nan = hn::Gt(hn::AndNot(sign, u), hn::Set(du, 0x7F800000u));
    const auto rounded =
        hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u))));
    u = hn::IfThenElse(nan, hn::Or(u, hn::Set(du, 0x00400000u)), rounded);
    hn::StoreU(hn::BitCast(d, hn::And(u, high)), d, dst + c);
  }
  for (; c < k; ++c) dst[c] = round_bf16(flush_denormal(src[c]));
}

// Rows [r0, r1) x panels [p0, p1) of the output.
void MatmulTile(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const bool flushed = a.w->bf16_activations;
  FlushDenormals guard(flushed);
  bool widen_coded = false;  // many rows of fp32 x on a coded matrix: widened below
  if (a.w->is_coded()) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // the coded kernels
    if (flushed && UseBf16Dot()) return MatmulTileCoded(a, r0, r1, p0, p1);
    if (!flushed && r1 - r0 <= kDirectRows) return MatmulTileCodedFma(a, r0, r1, p0, p1);
    widen_coded = !flushed;
#endif
    if (!widen_coded) return coded_through_plain(a, r0, r1, p0, p1, &MatmulTile);
  }
  if (a.w->bf16_tiles) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // AMX tiles
    if (amx_bf16_ready()) return MatmulTileAmx(a, r0, r1, p0, p1);
#endif
    return tile_chain_rows(a, r0, r1, p0, p1);
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // the bf16 dot product kernel
  if (flushed && UseBf16Dot()) return MatmulTileDot(a, r0, r1, p0, p1);
#endif
  const int64_t K = a.w->k;
  const int64_t rows = r1 - r0;
  // Rows [b, e) of this tile's x and their stride: x itself, or (rows that
  // share L1 sets, see above) a copy kept per thread at a stride of an odd
  // number of cache lines. The copy is bounded by the tiling, not the batch:
  // one row chunk (kRowChunkBytes per K range, so about ceil(K / kKChunk)
  // MiB) or one row block of kMR rows, so keeping it per thread is cheap.
  // bf16_activations: x rounded to bf16 in the copy (DAZ first, as the dot product kernel).
  const bool copy = flushed || (rows > 1 && RowsShareL1Sets(a.ldx));
  const int64_t ld = copy ? (CeilDiv(K, kLineFloats) | 1) * kLineFloats : a.ldx;
  thread_local std::vector<float> copied;
  const auto x_rows = [&](int64_t b, int64_t e) {
    if (!copy) return a.x + (r0 + b) * a.ldx;
    copied.resize((e - b) * ld);
    // K == 0: nothing to copy, and a.x may be null (memcpy from null is undefined even
    // for 0 bytes; UBSan reported it for Matmul.EmptyAndDegenerateShapes).
    for (int64_t r = b; r < e && K > 0; ++r) {
      float* dst = copied.data() + (r - b) * ld;
      const float* src = a.x + (r0 + r) * a.ldx;
      if (flushed) {
        RoundBf16Flushed(src, K, dst);
      } else {
        std::memcpy(dst, src, K * sizeof(float));
      }
    }
    return static_cast<const float*>(copied.data());
  };
  if (widen_coded || WidensPanels(*a.w, rows)) {
    // ForEachRowBlock passes every row block of a chunk over one panel group
    // and k range in a row: widened when the group or range changes.
    // (The group and range fix its panels: pe and k1 follow from pg and k0.)
    // Bounded by the tiling (kPanelGroup panels of one k range), kept per thread.
    thread_local hwy::AlignedFreeUniquePtr<float[]> wide;
    thread_local int64_t wide_capacity = 0;
    int64_t wide_pg = -1, wide_k0 = -1;
    ForEachRowBlock(
        a, r0, r1, p0, p1, 4, ld, x_rows,
        [&](int64_t mr, const float* x, int64_t pg, int64_t pe, int64_t k0, int64_t k1, int64_t r) {
          if (pg != wide_pg || k0 != wide_k0) {
            const int64_t floats = (pe - pg) * (k1 - k0) * kPanel;
            if (floats > wide_capacity) {
              wide = hwy::AllocateAligned<float>(static_cast<size_t>(floats));
              if (!wide) throw std::bad_alloc();
              wide_capacity = floats;
            }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
            if (widen_coded) {
              WidenCodedPanels(*a.w, pg, pe, k0, k1, wide.get());
            } else {
              WidenPanels(*a.w, pg, pe, k0, k1, wide.get());
            }
#else
            WidenPanels(*a.w, pg, pe, k0, k1, wide.get());
#endif
            wide_pg = pg;
            wide_k0 = k0;
          }
          kRowBlocksWide[mr - 1](x, ld, wide.get(), (k1 - k0) * kPanel, *a.w, pg, pe, k0, k1,
                                 a.bias, a.y + (r0 + r) * a.ldy, a.ldy);
        });
    return;
  }
  ForEachRowBlock(
      a, r0, r1, p0, p1, 4, ld, x_rows,
      [&](int64_t mr, const float* x, int64_t pg, int64_t pe, int64_t k0, int64_t k1, int64_t r) {
        kRowBlocks[mr - 1](x, ld, *a.w, pg, pe, k0, k1, a.bias, a.y + (r0 + r) * a.ldy, a.ldy);
      });
}

#else  // no native FMA: the scalar chain, correctly rounded by std::fma

constexpr int kMR = 1;

void MatmulTile(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  if (a.w->is_coded()) return coded_through_plain(a, r0, r1, p0, p1, &MatmulTile);
  if (a.w->bf16_tiles) return tile_chain_rows(a, r0, r1, p0, p1);
  const int64_t K = a.w->k;
  const int64_t n_end = std::min(a.w->n, p1 * kPanel);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = a.x + r * a.ldx;
    for (int64_t n = p0 * kPanel; n < n_end; ++n) {
      const int64_t at = (n / kPanel) * K * kPanel + n % kPanel;
      if (a.w->bf16_activations) {
        a.y[r * a.ldy + n] =
            add_bias_flushed(blocked_dot_flushed(x, a.w->half.get() + at, K), a.bias, n);
        continue;
      }
      const float acc = a.w->is_f16()    ? blocked_dot(x, F16Panels(*a.w) + at, K)
                        : a.w->is_bf16() ? blocked_dot(x, a.w->half.get() + at, K)
                                         : blocked_dot(x, a.w->data.get() + at, K);
      a.y[r * a.ldy + n] = a.bias ? acc + a.bias[n] : acc;
    }
  }
}

#endif

constexpr int64_t kMinDecodeBytesPerThread = 160 * 1024;

// What panel p of a PackedMatrix (ctx) reads first: its K x kPanel weights
// and those after it.
ThreadPool::Region PanelStart(const void* ctx, int64_t p) {
  const PackedMatrix& w = *static_cast<const PackedMatrix*>(ctx);
  if (w.is_coded()) {
    if (p >= w.num_panels()) return {};
    return {w.coded->panel(p), (w.num_panels() - p) * w.coded->panel_bytes};
  }
  const int64_t panel_bytes = w.panel_elements() * (w.is_half() ? 2 : 4);
  const char* base = w.is_half() ? reinterpret_cast<const char*>(w.half.get())
                                 : reinterpret_cast<const char*>(w.data.get());
  if (!base || p >= w.num_panels()) return {};
  return {base + p * panel_bytes, (w.num_panels() - p) * panel_bytes};
}

// Splits the output into at most num_threads tiles of whole row blocks and
// whole panels, minimising the largest tile (prefer splitting columns: each
// thread then streams only its own weights).
void Matmul(const MatmulArgs& a, ThreadPool& pool) {
  const int64_t panels = a.w->num_panels();
  const int64_t row_blocks = (a.m + kMR - 1) / kMR;
  int64_t threads = pool.num_threads();
  if (a.m <= kMR) {
    // One row block streams the weights once: a thread needs enough of them to
    // pay for the hand-off (bench/matmul_bench --bf16 --m 1: a 221 KiB bf16
    // k_proj ran ~15% faster on 1 thread than on 2; 442 KiB fp32 gained from 2).
    const int64_t bytes = a.w->bytes();
    threads = std::clamp<int64_t>(bytes / kMinDecodeBytesPerThread, 1, threads);
  }
  int64_t col_groups = 1, row_groups = 1, best = -1;
  for (int64_t cg = std::min(panels, threads); cg >= 1; --cg) {
    const int64_t rg = std::min(row_blocks, threads / cg);
    const int64_t cost = ((panels + cg - 1) / cg) * ((row_blocks + rg - 1) / rg);
    if (best < 0 || cost < best) best = cost, col_groups = cg, row_groups = rg;
  }
  if (a.m <= kMR && row_groups == 1 && col_groups > 1 && col_groups == pool.num_threads()) {
    // A decode step's columns: the panels handed out by
    // parallel_for_balanced, so a thread slowed down on a shared machine
    // leaves the back of its share to the other (ops/quant_matmul.cc).
    // The pool fetches the start of a worker's share of the product after
    // this one while it waits (ThreadPool::StreamHint, ops/quant_matmul.cc).
    const int64_t r1 = a.m;
    pool.parallel_for_balanced(
        panels, 1, [&](int64_t p0, int64_t p1) HWY_ATTR { MatmulTile(a, 0, r1, p0, p1); },
        {.key = a.w, .ctx = a.w, .where = &PanelStart});
    return;
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // AMX tiles
  if (a.w->bf16_tiles && row_groups == 1 && col_groups > 1 && a.m > kMR && amx_bf16_ready()) {
    return MatmulAmxColumns(a, col_groups, pool);
  }
#endif
  pool.parallel_for(col_groups * row_groups, 1, [&](int64_t begin, int64_t end) HWY_ATTR {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t rg = t / col_groups, cg = t % col_groups;
      const int64_t r0 = std::min(a.m, rg * row_blocks / row_groups * kMR);
      const int64_t r1 = std::min(a.m, (rg + 1) * row_blocks / row_groups * kMR);
      const int64_t p0 = cg * panels / col_groups, p1 = (cg + 1) * panels / col_groups;
      if (r0 < r1 && p0 < p1) MatmulTile(a, r0, r1, p0, p1);
    }
  });
}

// Whether this target multiplies coded matrices of fp32 x on their own kernel
// (MatmulTileCodedFma, WidenCodedPanels).
bool HasCodedFma() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return true;
#else
  return false;
#endif
}

bool UsesBf16Dot() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // the bf16 dot product kernel
  return UseBf16Dot();
#else
  return false;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(Matmul);
HWY_EXPORT(DispatchedTarget);
HWY_EXPORT(HasVectorKernel);
HWY_EXPORT(UsesBf16Dot);
HWY_EXPORT(HasCodedFma);

namespace {

void check_args(const MatmulArgs& a) {
  if (!a.w ||
      (a.w->n > 0 && a.w->k > 0 && !a.w->data && !a.w->half && !a.w->coded && a.w->quant.empty()))
    throw InvalidArgument("matmul: weights are not packed");
  if (a.w && a.w->bf16_activations && (a.w->k > 0 && a.w->n > 0) && !a.w->is_bf16())
    throw InvalidArgument("matmul: bf16_activations on weights that are not bf16");
  if (a.w && a.w->bf16_tiles && (!a.w->is_bf16() || !a.w->bf16_activations))
    throw InvalidArgument("matmul: the tile layout on weights without bf16 activations");
  if (a.m < 0) throw InvalidArgument("matmul: negative row count");
  if (a.m > 0 && a.w->n > 0 && (!a.y || (a.w->k > 0 && !a.x)))
    throw InvalidArgument("matmul: null input or output");
  if (a.m > 0 && (a.ldx < a.w->k || a.ldy < a.w->n))
    throw InvalidArgument("matmul: row stride smaller than the row (ldx " + std::to_string(a.ldx) +
                          " < k " + std::to_string(a.w->k) + " or ldy " + std::to_string(a.ldy) +
                          " < n " + std::to_string(a.w->n) + ")");
}

// The quantized parts, each writing its own columns of y: one job for all of
// them (quant_matmul_parts), or part by part in the reference.
void matmul_quantized(const MatmulArgs& a, ThreadPool* pool) {
  const auto& quant = a.w->quant;
  std::array<QuantMatmulArgs, kMaxQuantParts> parts;
  int count = 0;
  int64_t row0 = 0;
  for (size_t i = 0; i < quant.size(); ++i) {
    QuantMatmulArgs& q = parts[count++];
    q.x = a.x;
    q.m = a.m;
    q.ldx = a.ldx;
    q.w = quant[i].get();
    q.bias = a.bias ? a.bias + row0 : nullptr;
    q.y = a.y + row0;
    q.ldy = a.ldy;
    q.mode = a.w->quant_mode;
    row0 += quant[i]->n;
    if (!pool) {
      quant_matmul_reference(q);
      count = 0;
    } else if (count == kMaxQuantParts || i + 1 == quant.size()) {
      quant_matmul_parts(parts.data(), count, *pool);
      count = 0;
    }
  }
}

}  // namespace

void matmul_reference(const MatmulArgs& a) {
  check_args(a);
  if (a.w->is_quantized()) return matmul_quantized(a, nullptr);
  if (a.w->is_coded()) {
    return coded_through_plain(
        a, 0, a.m, 0, a.w->num_panels(),
        [](const MatmulArgs& b, int64_t, int64_t, int64_t, int64_t) { matmul_reference(b); });
  }
  const PackedMatrix& w = *a.w;
  if (w.bf16_tiles) return tile_chain_rows(a, 0, a.m, 0, w.num_panels());
  for (int64_t m = 0; m < a.m; ++m) {
    for (int64_t n = 0; n < w.n; ++n) {
      const int64_t at = (n / kPanel) * w.k * kPanel + n % kPanel;
      const float* x = a.x + m * a.ldx;
      if (w.bf16_activations) {
        a.y[m * a.ldy + n] =
            add_bias_flushed(blocked_dot_flushed(x, w.half.get() + at, w.k), a.bias, n);
        continue;
      }
      const float acc = w.is_f16()    ? blocked_dot(x, F16Panels(w) + at, w.k)
                        : w.is_bf16() ? blocked_dot(x, w.half.get() + at, w.k)
                                      : blocked_dot(x, w.data.get() + at, w.k);
      a.y[m * a.ldy + n] = a.bias ? acc + a.bias[n] : acc;
    }
  }
}

void matmul(const MatmulArgs& a, ThreadPool& pool) {
  check_args(a);
  if (a.m == 0 || a.w->n == 0) return;
  if (a.w->is_quantized()) return matmul_quantized(a, &pool);
  HWY_DYNAMIC_DISPATCH(Matmul)(a, pool);
}

const char* matmul_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(DispatchedTarget)());
}

bool matmul_has_vector_kernel() { return HWY_DYNAMIC_DISPATCH(HasVectorKernel)(); }

bool matmul_bf16_dot() { return HWY_DYNAMIC_DISPATCH(UsesBf16Dot)(); }
void set_matmul_bf16_dot_allowed(bool allowed) { g_bf16_dot_allowed.store(allowed); }

bool matmul_bf16_coded(bool bf16_activations) {
  if (!g_bf16_coded_allowed.load()) return false;
  if (!bf16_activations) return HWY_DYNAMIC_DISPATCH(HasCodedFma)();
  return matmul_bf16_dot() && !matmul_bf16_tiles();
}
void set_matmul_bf16_coded_allowed(bool allowed) { g_bf16_coded_allowed.store(allowed); }

bool matmul_bf16_tiles() { return amx_bf16_ready() && g_bf16_tiles_allowed.load(); }
void set_matmul_bf16_tiles_allowed(bool allowed) { g_bf16_tiles_allowed.store(allowed); }
int64_t matmul_amx_products() { return g_amx_products.load(); }

}  // namespace hubzoo
#endif  // HWY_ONCE
