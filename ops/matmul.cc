// Packed-panel fp32 matmul: packing, the scalar reference, and a register-tiled
// Highway kernel compiled once per SIMD target and dispatched at run time.
//
// Every output element is reduced in the fixed order of matmul.h (one FMA chain
// per block of kKBlock k's, block sums added in k order, then + bias), so all
// targets, tilings and thread counts agree bit for bit. Work is split over rows
// and column panels only; K is never split across threads.
#include "ops/matmul.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/mman.h>

#include "base/error.h"
#include "ops/bf16.h"

#ifndef HUBZOO_OPS_BLOCKED_DOT
#define HUBZOO_OPS_BLOCKED_DOT
namespace hubzoo {
inline float widen(float w) { return w; }
inline float widen(uint16_t w) { return bf16_to_float(w); }

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

// kLanes weights as float32 vector: loaded, or widened exactly from bf16.
HWY_INLINE V LoadWeights(DF d, const float* HWY_RESTRICT p) { return hn::Load(d, p); }
HWY_INLINE V LoadWeights(DF d, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}

// Tile of y[0..MR, 0..NP*kPanel) over k in [k0, k1) (k0 a multiple of
// kKBlock). xp: packed x block [K][MR] at k0; w: first panel at k0.
// n_valid: columns of y that exist from the tile's first column on.
// The running total of each element starts at 0 (first) or at the partial
// total left in y by the previous k range, and k blocks are added to it in
// order, so splitting K into ranges leaves every bit as the one chain of
// matmul.h; the last range adds bias and leaves the result.
template <int MR, int NP, typename WT>
HWY_INLINE void Tile(const float* HWY_RESTRICT xp, const WT* HWY_RESTRICT w, int64_t k_len,
                     int64_t panel_stride, bool first, bool last, const float* HWY_RESTRICT bias,
                     float* HWY_RESTRICT y, int64_t ldy, int64_t n_valid) {
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
        const V xb = hn::Set(d, xp[kk * MR + r]);
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

// MR rows of y over panels [p0, p1) of weights `panels` (float or bf16), k in [k0, k1).
template <int MR, typename WT>
HWY_NOINLINE void RowBlock(const float* xp, const WT* panels, const PackedMatrix& w, int64_t p0,
                           int64_t p1, int64_t k0, int64_t k1, const float* bias, float* y,
                           int64_t ldy) {
  constexpr int NP = PanelsPerTile(MR);
  const int64_t K = w.k;
  const bool first = k0 == 0, last = k1 == K;
  const float* xk = xp + k0 * MR;
  const auto tile_args = [&](int64_t p) {
    return std::make_tuple(panels + p * K * kPanel + k0 * kPanel,
                           bias ? bias + p * kPanel : nullptr, y + p * kPanel, w.n - p * kPanel);
  };
  int64_t p = p0;
  for (; p + NP <= p1; p += NP) {
    const auto [wp, bp, yp, n_valid] = tile_args(p);
    Tile<MR, NP>(xk, wp, k1 - k0, K * kPanel, first, last, bp, yp, ldy, n_valid);
  }
  for (; p < p1; ++p) {
    const auto [wp, bp, yp, n_valid] = tile_args(p);
    Tile<MR, 1>(xk, wp, k1 - k0, K * kPanel, first, last, bp, yp, ldy, n_valid);
  }
}

template <int MR>
void RowBlockAny(const float* xp, const PackedMatrix& w, int64_t p0, int64_t p1, int64_t k0,
                 int64_t k1, const float* bias, float* y, int64_t ldy) {
  if (w.is_bf16()) {
    RowBlock<MR>(xp, w.bf16.get(), w, p0, p1, k0, k1, bias, y, ldy);
  } else {
    RowBlock<MR>(xp, w.data.get(), w, p0, p1, k0, k1, bias, y, ldy);
  }
}

using RowBlockFn = void (*)(const float*, const PackedMatrix&, int64_t, int64_t, int64_t, int64_t,
                            const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockFn, sizeof...(I)> MakeRowBlockTable(std::index_sequence<I...>) {
  return {&RowBlockAny<static_cast<int>(I) + 1>...};
}
// kRowBlocks[mr - 1] handles an mr-row block, mr = 1..kMR.
constexpr auto kRowBlocks = MakeRowBlockTable(std::make_index_sequence<kMR>());

// Cache blocking for many rows (GotoBLAS order): K is cut into ranges of
// kKChunk (whole k blocks; the partial totals wait in y, see Tile), so a
// k range of a row block of x (14 x 256 floats, 14 KiB) and of a few weight
// panels (32 KiB each) sit in L1/L2 while the tiles run, and a row chunk of x
// over one k range (<= kRowChunkBytes) stays in L2 while every panel passes.
constexpr int64_t kKChunk = 4 * kKBlock;
static_assert(kKChunk % kKBlock == 0, "k ranges must be whole k blocks");
constexpr int64_t kRowChunkBytes = 512 * 1024;
constexpr int64_t kPanelGroup = 4;  // panels a row block visits before the next row block

// Rows [r0, r1) x panels [p0, p1) of the output.
void MatmulTile(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t K = a.w->k;
  const int64_t rows = r1 - r0;
  // Pack x rows into blocks of kMR rows, each [K][mr], so a tile broadcasts
  // from one pointer; a row chunk at a time, so the buffer (kept per thread)
  // stays at most a chunk (3 MiB at K = 1536) whatever M is. A single row is
  // already in that layout.
  thread_local std::vector<float> packed;
  const auto pack = [&](int64_t b, int64_t e) {
    packed.resize((e - b) * K);
    for (int64_t rb = b; rb < e; rb += kMR) {
      const int64_t mr = std::min<int64_t>(kMR, e - rb);
      float* dst = packed.data() + (rb - b) * K;
      for (int64_t r = 0; r < mr; ++r) {
        const float* src = a.x + (r0 + rb + r) * a.ldx;
        for (int64_t kk = 0; kk < K; ++kk) dst[kk * mr + r] = src[kk];
      }
    }
    return static_cast<const float*>(packed.data());
  };
  if (rows <= kMR) {  // one row block (decode): stream the panels once, all of K
    const float* xp = rows > 1 ? pack(0, rows) : a.x + r0 * a.ldx;
    kRowBlocks[rows - 1](xp, *a.w, p0, p1, 0, K, a.bias, a.y + r0 * a.ldy, a.ldy);
    return;
  }
  const int64_t chunk =
      std::max<int64_t>(1, kRowChunkBytes / (kKChunk * 4) / kMR) * kMR;  // rows per chunk
  for (int64_t rc = 0; rc < rows; rc += chunk) {
    const int64_t rc_end = std::min(rows, rc + chunk);
    const float* xc = pack(rc, rc_end);
    for (int64_t k0 = 0; k0 < K; k0 += kKChunk) {
      const int64_t k1 = std::min(K, k0 + kKChunk);
      for (int64_t pg = p0; pg < p1; pg += kPanelGroup) {
        const int64_t pe = std::min(p1, pg + kPanelGroup);
        for (int64_t rb = rc; rb < rc_end; rb += kMR) {
          const int64_t mr = std::min<int64_t>(kMR, rc_end - rb);
          kRowBlocks[mr - 1](xc + (rb - rc) * K, *a.w, pg, pe, k0, k1, a.bias,
                             a.y + (r0 + rb) * a.ldy, a.ldy);
        }
      }
    }
  }
}

#else  // no native FMA: the scalar chain, correctly rounded by std::fma

constexpr int kMR = 1;

void MatmulTile(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t K = a.w->k;
  const int64_t n_end = std::min(a.w->n, p1 * kPanel);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = a.x + r * a.ldx;
    for (int64_t n = p0 * kPanel; n < n_end; ++n) {
      const int64_t at = (n / kPanel) * K * kPanel + n % kPanel;
      const float acc = a.w->is_bf16() ? blocked_dot(x, a.w->bf16.get() + at, K)
                                       : blocked_dot(x, a.w->data.get() + at, K);
      a.y[r * a.ldy + n] = a.bias ? acc + a.bias[n] : acc;
    }
  }
}

#endif

constexpr int64_t kMinDecodeBytesPerThread = 160 * 1024;

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

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(Matmul);
HWY_EXPORT(DispatchedTarget);

namespace {

void free_aligned(float* p) { std::free(p); }
void free_aligned16(uint16_t* p) { std::free(p); }

// Panels of `panels` x k x kPanel elements, 64-byte aligned; only the last
// panel (whose rows past n are padding) is zeroed, the packing writes the
// rest. Large matrices are 2 MiB aligned and asked for transparent huge pages:
// loading then faults a page per 2 MiB instead of per 4 KiB (a fifth of the
// fp32 load time of SmolLM2-135M went to page faults).
template <typename T>
T* alloc_panels(int64_t panels, int64_t k) {
  const int64_t elements = panels * k * kPanel;
  const size_t bytes = (std::max<int64_t>(elements, 32) * sizeof(T) + 63) / 64 * 64;
  constexpr size_t kHuge = 2 << 20;
  const bool huge = bytes >= 2 * kHuge;
  const size_t alloc_bytes = huge ? (bytes + kHuge - 1) / kHuge * kHuge : bytes;
  T* data = static_cast<T*>(std::aligned_alloc(huge ? kHuge : 64, alloc_bytes));
  if (!data) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (huge) madvise(data, alloc_bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  const int64_t last = panels > 0 ? (panels - 1) * k * kPanel : 0;
  std::memset(data + last, 0, bytes - last * sizeof(T));
  return data;
}

// Row-major W [n, k] into panels, a 32-row x 64-k block at a time (both sides
// in L1) instead of one row at a time with 128-byte strided writes.
template <typename T, typename Convert>
void pack_into(const float* w, int64_t n, int64_t k, T* data, Convert convert) {
  constexpr int64_t kKStep = 64;
  for (int64_t r0 = 0; r0 < n; r0 += kPanel) {
    const int64_t rows = std::min(kPanel, n - r0);
    T* panel = data + (r0 / kPanel) * k * kPanel;
    for (int64_t c0 = 0; c0 < k; c0 += kKStep) {
      const int64_t c1 = std::min(k, c0 + kKStep);
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = w + (r0 + r) * k;
        T* dst = panel + r;
        for (int64_t c = c0; c < c1; ++c) dst[c * kPanel] = convert(src[c]);
      }
    }
  }
}

void check_args(const MatmulArgs& a) {
  if (!a.w || (a.w->n > 0 && a.w->k > 0 && !a.w->data && !a.w->bf16))
    throw InvalidArgument("matmul: weights are not packed");
  if (a.m < 0) throw InvalidArgument("matmul: negative row count");
  if (a.m > 0 && a.w->n > 0 && (!a.y || (a.w->k > 0 && !a.x)))
    throw InvalidArgument("matmul: null input or output");
  if (a.m > 0 && (a.ldx < a.w->k || a.ldy < a.w->n))
    throw InvalidArgument("matmul: row stride smaller than the row (ldx " + std::to_string(a.ldx) +
                          " < k " + std::to_string(a.w->k) + " or ldy " + std::to_string(a.ldy) +
                          " < n " + std::to_string(a.w->n) + ")");
}

}  // namespace

float PackedMatrix::at(int64_t row, int64_t col) const {
  const int64_t i = ((row / kPanel) * k + col) * kPanel + row % kPanel;
  return is_bf16() ? bf16_to_float(bf16[i]) : data[i];
}

void PackedMatrix::copy_row(int64_t row, float* out) const {
  const int64_t first = (row / kPanel) * k * kPanel + row % kPanel;
  if (is_bf16()) {
    for (int64_t c = 0; c < k; ++c) out[c] = bf16_to_float(bf16[first + c * kPanel]);
  } else {
    for (int64_t c = 0; c < k; ++c) out[c] = data[first + c * kPanel];
  }
}

PackedMatrix pack_weights(const float* w, int64_t n, int64_t k) {
  if (n < 0 || k < 0) throw InvalidArgument("pack_weights: negative shape");
  PackedMatrix p;
  p.n = n;
  p.k = k;
  p.data = {alloc_panels<float>(p.num_panels(), k), &free_aligned};
  pack_into(w, n, k, p.data.get(), [](float v) { return v; });
  return p;
}

PackedMatrix pack_weights_bf16(const float* w, int64_t n, int64_t k) {
  if (n < 0 || k < 0) throw InvalidArgument("pack_weights_bf16: negative shape");
  PackedMatrix p;
  p.n = n;
  p.k = k;
  p.bf16 = {alloc_panels<uint16_t>(p.num_panels(), k), &free_aligned16};
  pack_into(w, n, k, p.bf16.get(), [](float v) { return bf16_bits(v); });
  return p;
}

void matmul_reference(const MatmulArgs& a) {
  check_args(a);
  const PackedMatrix& w = *a.w;
  for (int64_t m = 0; m < a.m; ++m) {
    for (int64_t n = 0; n < w.n; ++n) {
      const int64_t at = (n / kPanel) * w.k * kPanel + n % kPanel;
      const float* x = a.x + m * a.ldx;
      const float acc = w.is_bf16() ? blocked_dot(x, w.bf16.get() + at, w.k)
                                    : blocked_dot(x, w.data.get() + at, w.k);
      a.y[m * a.ldy + n] = a.bias ? acc + a.bias[n] : acc;
    }
  }
}

void matmul(const MatmulArgs& a, ThreadPool& pool) {
  check_args(a);
  if (a.m == 0 || a.w->n == 0) return;
  HWY_DYNAMIC_DISPATCH(Matmul)(a, pool);
}

const char* matmul_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(DispatchedTarget)());
}

}  // namespace hubzoo
#endif  // HWY_ONCE
