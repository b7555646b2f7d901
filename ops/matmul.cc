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
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/mman.h>

#include "base/error.h"
#include "ops/bf16.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // MXCSR, _mm512_permutex2var_ps
#endif

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

// Denormals flushed to a zero of their sign (DAZ on operands, FTZ on results).
inline float flush_denormal(float v) {
  return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v;
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

std::atomic<bool> g_bf16_dot_allowed{true};

// MXCSR flush-to-zero and denormals-are-zero on this thread while alive
// (bf16_activations), restored after.
class FlushDenormals {
 public:
  explicit FlushDenormals(bool on) {
#if defined(__x86_64__) || defined(__i386__)
    if (on) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
      active_ = true;
    }
#else
    (void)on;
#endif
  }
  ~FlushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
    if (active_) _mm_setcsr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_ = 0;
  bool active_ = false;
};
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

// kLanes weights as float32 vector: loaded, or widened exactly from bf16.
HWY_INLINE V LoadWeights(DF d, const float* HWY_RESTRICT p) { return hn::Load(d, p); }
HWY_INLINE V LoadWeights(DF d, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
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

// MR rows of y over panels [p0, p1) of weights `panels` (float or bf16), k in [k0, k1).
// x: row 0 of the block at k = 0.
template <int MR, typename WT>
HWY_NOINLINE void RowBlock(const float* x, int64_t ldx, const WT* panels, const PackedMatrix& w,
                           int64_t p0, int64_t p1, int64_t k0, int64_t k1, const float* bias,
                           float* y, int64_t ldy) {
  constexpr int NP = PanelsPerTile(MR);
  const int64_t K = w.k;
  const bool first = k0 == 0, last = k1 == K;
  const float* xk = x + k0;
  const auto tile_args = [&](int64_t p) {
    return std::make_tuple(panels + p * K * kPanel + k0 * kPanel,
                           bias ? bias + p * kPanel : nullptr, y + p * kPanel, w.n - p * kPanel);
  };
  int64_t p = p0;
  for (; p + NP <= p1; p += NP) {
    const auto [wp, bp, yp, n_valid] = tile_args(p);
    Tile<MR, NP>(xk, ldx, wp, k1 - k0, K * kPanel, first, last, bp, yp, ldy, n_valid);
  }
  for (; p < p1; ++p) {
    const auto [wp, bp, yp, n_valid] = tile_args(p);
    Tile<MR, 1>(xk, ldx, wp, k1 - k0, K * kPanel, first, last, bp, yp, ldy, n_valid);
  }
}

template <int MR>
void RowBlockAny(const float* x, int64_t ldx, const PackedMatrix& w, int64_t p0, int64_t p1,
                 int64_t k0, int64_t k1, const float* bias, float* y, int64_t ldy) {
  if (w.is_bf16()) {
    RowBlock<MR>(x, ldx, w.bf16.get(), w, p0, p1, k0, k1, bias, y, ldy);
  } else {
    RowBlock<MR>(x, ldx, w.data.get(), w, p0, p1, k0, k1, bias, y, ldy);
  }
}

using RowBlockFn = void (*)(const float*, int64_t, const PackedMatrix&, int64_t, int64_t, int64_t,
                            int64_t, const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockFn, sizeof...(I)> MakeRowBlockTable(std::index_sequence<I...>) {
  return {&RowBlockAny<static_cast<int>(I) + 1>...};
}
// kRowBlocks[mr - 1] handles an mr-row block, mr = 1..kMR.
constexpr auto kRowBlocks = MakeRowBlockTable(std::make_index_sequence<kMR>());

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// bf16 dot products for bf16_activations (matmul.h). vdpbf16ps adds to each
// fp32 lane the product of the high bf16 halves of its two 32-bit operands,
// then that of the low halves: exact products, DAZ/FTZ, round to nearest even
// (measured against two std::fma on this code's CPUs; ops/matmul_test.cc). A
// lane whose high halves hold w[k], x[k] and low halves w[k+1], x[k+1] is thus
// two steps of the chain in k order. Inline assembly: Highway 1.0 has no
// bf16 dot product and the AVX3 target does not enable the instruction set.
// x pairs come from memory, broadcast to every lane ({1to16}), which keeps the
// register file for accumulators as the FMA kernel's folded broadcast does.
HWY_INLINE __m512 DotBf16(__m512 acc, __m512i w, const uint32_t* x_pair) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x_pair));
  return acc;
}

// A panel's k and k + 1 rows (32 columns each) as the two vectors of lane
// pairs: vpunpck{l,h}wd interleave within 128-bit lanes, so `lo` holds
// columns 8L + 0..3 and `hi` columns 8L + 4..7 of 128-bit lane L. Totals stay
// in that order and are permuted to columns only when they meet y.
alignas(64) constexpr int32_t kToLo[16] = {0,  1,  2,  3,  8,  9,  10, 11,
                                           16, 17, 18, 19, 24, 25, 26, 27};
alignas(64) constexpr int32_t kToHi[16] = {4,  5,  6,  7,  12, 13, 14, 15,
                                           20, 21, 22, 23, 28, 29, 30, 31};
alignas(64) constexpr int32_t kToCols0[16] = {0, 1, 2, 3, 16, 17, 18, 19,
                                              4, 5, 6, 7, 20, 21, 22, 23};
alignas(64) constexpr int32_t kToCols1[16] = {8,  9,  10, 11, 24, 25, 26, 27,
                                              12, 13, 14, 15, 28, 29, 30, 31};
HWY_INLINE __m512i Index(const int32_t (&i)[16]) { return _mm512_load_si512(i); }

// Tile's arithmetic (same totals, same k blocks, same stores) on x as bf16
// pairs: xp row 0 at the tile's first pair, rows ldxp pairs apart.
template <int MR, int NP>
HWY_INLINE void TileDot(const uint32_t* HWY_RESTRICT xp, int64_t ldxp,
                        const uint16_t* HWY_RESTRICT w, int64_t k_len, int64_t panel_stride,
                        bool first, bool last, const float* HWY_RESTRICT bias,
                        float* HWY_RESTRICT y, int64_t ldy, int64_t n_valid) {
  const DF d;
  __m512 total[MR][NP][2];
  __m512 acc[MR][NP][2];
  // y's columns -> (lo, hi) order, or back; partial panels through a buffer.
  const auto load_cols = [&](const float* row, int64_t col) {
    if (first || col >= n_valid) return _mm512_setzero_ps();
    if (col + 16 <= n_valid) return _mm512_loadu_ps(row + col);
    alignas(64) float tmp[16] = {};
    for (int64_t i = 0; i < n_valid - col; ++i) tmp[i] = row[col + i];
    return _mm512_load_ps(tmp);
  };
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      const __m512 c0 = load_cols(y + r * ldy, p * kPanel),
                   c1 = load_cols(y + r * ldy, p * kPanel + 16);
      total[r][p][0] = _mm512_permutex2var_ps(c0, Index(kToLo), c1);
      total[r][p][1] = _mm512_permutex2var_ps(c0, Index(kToHi), c1);
    }
  }
  for (int64_t k0 = 0; k0 < k_len; k0 += kKBlock) {
    const int64_t k1 = std::min(k_len, k0 + kKBlock);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[r][p][0] = acc[r][p][1] = _mm512_setzero_ps();
    }
    // k1 - k0 is odd only at the end of an odd K: the last pair's k + 1 is zero.
    for (int64_t kk = k0; kk < k1; kk += 2) {
      __m512i lo[NP], hi[NP];
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
        const uint16_t* wk = w + p * panel_stride + kk * kPanel;
        const __m512i a = _mm512_load_si512(wk);
        const __m512i b = kk + 1 < k1 ? _mm512_load_si512(wk + kPanel) : _mm512_setzero_si512();
        lo[p] = _mm512_unpacklo_epi16(b, a);
        hi[p] = _mm512_unpackhi_epi16(b, a);
      }
#pragma GCC unroll 64
      for (int r = 0; r < MR; ++r) {
        const uint32_t* x = xp + r * ldxp + kk / 2;
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
          acc[r][p][0] = DotBf16(acc[r][p][0], lo[p], x);
          acc[r][p][1] = DotBf16(acc[r][p][1], hi[p], x);
        }
      }
    }
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
        total[r][p][0] = _mm512_add_ps(total[r][p][0], acc[r][p][0]);
        total[r][p][1] = _mm512_add_ps(total[r][p][1], acc[r][p][1]);
      }
    }
  }
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
    float* out_row = y + r * ldy;
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      const __m512 cols[2] = {
          _mm512_permutex2var_ps(total[r][p][0], Index(kToCols0), total[r][p][1]),
          _mm512_permutex2var_ps(total[r][p][0], Index(kToCols1), total[r][p][1])};
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        const int64_t col = p * kPanel + v * 16;
        const float* b = last ? bias : nullptr;
        if (col + 16 <= n_valid) {
          V t{cols[v]};
          if (b) t = hn::Add(t, hn::LoadU(d, b + col));
          hn::StoreU(t, d, out_row + col);
        } else if (col < n_valid) {  // last, partial panel
          alignas(64) float tmp[16];
          _mm512_store_ps(tmp, cols[v]);
          for (int64_t i = 0; i < n_valid - col; ++i) {
            out_row[col + i] = b ? tmp[i] + b[col + i] : tmp[i];
          }
        }
      }
    }
  }
}

// RowBlock on x as bf16 pairs (xp row 0 at k = 0).
template <int MR>
HWY_NOINLINE void RowBlockDot(const uint32_t* xp, int64_t ldxp, const PackedMatrix& w, int64_t p0,
                              int64_t p1, int64_t k0, int64_t k1, const float* bias, float* y,
                              int64_t ldy) {
  constexpr int NP = PanelsPerTile(MR);
  const int64_t K = w.k;
  const bool first = k0 == 0, last = k1 == K;
  const uint32_t* xk = xp + k0 / 2;
  const auto tile_args = [&](int64_t p) {
    return std::make_tuple(w.bf16.get() + p * K * kPanel + k0 * kPanel,
                           bias ? bias + p * kPanel : nullptr, y + p * kPanel, w.n - p * kPanel);
  };
  int64_t p = p0;
  for (; p + NP <= p1; p += NP) {
    const auto [wp, bp, yp, n_valid] = tile_args(p);
    TileDot<MR, NP>(xk, ldxp, wp, k1 - k0, K * kPanel, first, last, bp, yp, ldy, n_valid);
  }
  for (; p < p1; ++p) {
    const auto [wp, bp, yp, n_valid] = tile_args(p);
    TileDot<MR, 1>(xk, ldxp, wp, k1 - k0, K * kPanel, first, last, bp, yp, ldy, n_valid);
  }
}

using RowBlockDotFn = void (*)(const uint32_t*, int64_t, const PackedMatrix&, int64_t, int64_t,
                               int64_t, int64_t, const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockDotFn, sizeof...(I)> MakeRowBlockDotTable(std::index_sequence<I...>) {
  return {&RowBlockDot<static_cast<int>(I) + 1>...};
}
constexpr auto kRowBlocksDot = MakeRowBlockDotTable(std::make_index_sequence<kMR>());

// Rows [b, e) of x as bf16 pairs, (x[2q] << 16) | x[2q + 1] (the high half is
// the first step of vdpbf16ps), rounded as vcvtne2ps2bf16 rounds (DAZ, then
// nearest even: flush_denormal then bf16_bits), rows ldp pairs apart.
void ToBf16Pairs(const float* x, int64_t ldx, int64_t rows, int64_t K, uint32_t* out, int64_t ldp) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    uint32_t* o = out + r * ldp;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512 lo = _mm512_loadu_ps(xr + k), hi = _mm512_loadu_ps(xr + k + 16);
      __m512i bf;  // words 0-15 from lo, 16-31 from hi: element j's word is word j
      asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(bf) : "v"(hi), "v"(lo));
      // Halves swapped (Highway's rotate: GCC 12's _mm512_rol_epi32 warns of an
      // uninitialised source for its mask form).
      const hn::RebindToUnsigned<DF> du;
      hn::StoreU(hn::RotateRight<16>(hn::Vec<decltype(du)>{bf}), du, o + k / 2);
    }
    for (; k < K; k += 2) {
      const uint32_t a = bf16_bits(flush_denormal(xr[k]));
      const uint32_t b = k + 1 < K ? bf16_bits(flush_denormal(xr[k + 1])) : 0u;
      o[k / 2] = (a << 16) | b;
    }
  }
}

bool UseBf16Dot() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has && g_bf16_dot_allowed.load(std::memory_order_relaxed);
}
#endif  // AVX-512

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

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && HWY_NATIVE_FMA  // the bf16 dot product kernel
// MatmulTile on bf16 dot products: x converted to bf16 pairs per row chunk
// (per thread: threads split columns, so each converts its rows), the same
// blocking as the FMA kernel.
void MatmulTileDot(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t K = a.w->k;
  // Pairs per row, padded to an odd number of cache lines (see RowsShareL1Sets).
  const int64_t ldp = (CeilDiv(CeilDiv(K, 2), 16) | 1) * 16;
  thread_local std::vector<uint32_t> pairs;
  const auto x_pairs = [&](int64_t b, int64_t e) {
    pairs.resize((e - b) * ldp);
    ToBf16Pairs(a.x + (r0 + b) * a.ldx, a.ldx, e - b, K, pairs.data(), ldp);
    return static_cast<const uint32_t*>(pairs.data());
  };
  ForEachRowBlock(a, r0, r1, p0, p1, 2, ldp, x_pairs,
                  [&](int64_t mr, const uint32_t* x, int64_t pg, int64_t pe, int64_t k0, int64_t k1,
                      int64_t r) {
                    kRowBlocksDot[mr - 1](x, ldp, *a.w, pg, pe, k0, k1, a.bias,
                                          a.y + (r0 + r) * a.ldy, a.ldy);
                  });
}
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
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && HWY_NATIVE_FMA  // the bf16 dot product kernel
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
  ForEachRowBlock(
      a, r0, r1, p0, p1, 4, ld, x_rows,
      [&](int64_t mr, const float* x, int64_t pg, int64_t pe, int64_t k0, int64_t k1, int64_t r) {
        kRowBlocks[mr - 1](x, ld, *a.w, pg, pe, k0, k1, a.bias, a.y + (r0 + r) * a.ldy, a.ldy);
      });
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
      if (a.w->bf16_activations) {
        a.y[r * a.ldy + n] =
            add_bias_flushed(blocked_dot_flushed(x, a.w->bf16.get() + at, K), a.bias, n);
        continue;
      }
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

bool UsesBf16Dot() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && HWY_NATIVE_FMA  // the bf16 dot product kernel
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

namespace {

void free_aligned(float* p) { std::free(p); }
void free_aligned16(uint16_t* p) { std::free(p); }

// Panels of `panels` x k x kPanel elements, 64-byte aligned; only the last
// panel (whose rows past n are padding) is zeroed, the packing writes the
// rest. Large matrices are 2 MiB aligned and asked for transparent huge pages:
// loading then faults a page per 2 MiB instead of per 4 KiB (a fifth of the
// fp32 load time of SmolLM2-135M went to page faults). Only the whole 2 MiB
// pages of the buffer are advised: rounding the size up to 2 MiB cost up to
// ~1 MiB per matrix (fp32 SmolLM2's fused gate/up, 7.1 MiB each: +28 MiB RSS).
template <typename T>
T* alloc_panels(int64_t panels, int64_t k) {
  const int64_t elements = panels * k * kPanel;
  const size_t bytes = (std::max<int64_t>(elements, 32) * sizeof(T) + 63) / 64 * 64;
  constexpr size_t kHuge = 2 << 20;
  // Huge pages only for the largest matrices (the embedding/lm_head): asking
  // for them on every 4+ MiB matrix (fp32 fused gate/up) made loads slower and
  // erratic (0.47-0.80 s vs 0.46-0.50 s, SmolLM2 fp32), the kernel compacting
  // memory to find them.
  const bool huge = bytes >= 8 * kHuge;
  void* mem = nullptr;
  if (posix_memalign(&mem, huge ? kHuge : 64, bytes) != 0) throw std::bad_alloc();
  T* data = static_cast<T*>(mem);
#ifdef MADV_HUGEPAGE
  if (huge) madvise(data, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advice: failure is harmless
#endif
  const int64_t last = panels > 0 ? (panels - 1) * k * kPanel : 0;
  std::memset(data + last, 0, bytes - last * sizeof(T));
  return data;
}

// Row-major W [n, k] into rows [row0, row0 + n) of the panels, a 32-row x
// 64-k block at a time (both sides in L1) instead of one row at a time with
// 128-byte strided writes.
template <typename S, typename T, typename Convert>
void pack_rows(const S* w, int64_t n, int64_t k, T* data, int64_t row0, Convert convert) {
  constexpr int64_t kKStep = 64;
  for (int64_t r0 = 0; r0 < n;) {
    const int64_t global = row0 + r0;  // first row in the destination
    const int64_t rows = std::min(kPanel - global % kPanel, n - r0);
    T* panel = data + (global / kPanel) * k * kPanel + global % kPanel;
    for (int64_t c0 = 0; c0 < k; c0 += kKStep) {
      const int64_t c1 = std::min(k, c0 + kKStep);
      for (int64_t r = 0; r < rows; ++r) {
        const S* src = w + (r0 + r) * k;
        T* dst = panel + r;
        for (int64_t c = c0; c < c1; ++c) dst[c * kPanel] = convert(widen(src[c]));
      }
    }
    r0 += rows;
  }
}

// pack_rows on up to 4 threads for matrices of 1+ MiB, split at panel
// boundaries: the kernel zeroes the fresh pages a thread first writes, so the
// page clearing (most of a cold load) runs in parallel with the copying.
// SmolLM2-135M fp32 load: 0.41-0.53 s on one thread -> see bench/README.md.
template <typename S, typename T, typename Convert>
void pack_into(const S* w, int64_t n, int64_t k, T* data, int64_t row0, Convert convert) {
  const int64_t bytes = n * k * static_cast<int64_t>(sizeof(T));
  const int64_t threads = bytes < (4 << 20)
                              ? 1
                              : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                                    std::min<int64_t>(4, n / kPanel));
  if (threads <= 1) {
    pack_rows(w, n, k, data, row0, convert);
    return;
  }
  // Split points: rows whose global index starts a panel.
  std::vector<int64_t> cut = {0};
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t global = (row0 + n * t / threads + kPanel - 1) / kPanel * kPanel;
    cut.push_back(std::clamp<int64_t>(global - row0, cut.back(), n));
  }
  cut.push_back(n);
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < threads; ++t) {
    helpers.emplace_back(
        [=] { pack_rows(w + cut[t] * k, cut[t + 1] - cut[t], k, data, row0 + cut[t], convert); });
  }
  pack_rows(w, cut[1], k, data, row0, convert);
  for (auto& h : helpers) h.join();
}

void check_args(const MatmulArgs& a) {
  if (!a.w || (a.w->n > 0 && a.w->k > 0 && !a.w->data && !a.w->bf16 && a.w->quant.empty()))
    throw InvalidArgument("matmul: weights are not packed");
  if (a.w && a.w->bf16_activations && (a.w->k > 0 && a.w->n > 0) && !a.w->is_bf16())
    throw InvalidArgument("matmul: bf16_activations on weights that are not bf16");
  if (a.m < 0) throw InvalidArgument("matmul: negative row count");
  if (a.m > 0 && a.w->n > 0 && (!a.y || (a.w->k > 0 && !a.x)))
    throw InvalidArgument("matmul: null input or output");
  if (a.m > 0 && (a.ldx < a.w->k || a.ldy < a.w->n))
    throw InvalidArgument("matmul: row stride smaller than the row (ldx " + std::to_string(a.ldx) +
                          " < k " + std::to_string(a.w->k) + " or ldy " + std::to_string(a.ldy) +
                          " < n " + std::to_string(a.w->n) + ")");
}

// The quantized part holding `row`, and the row's index inside it.
std::pair<const QuantMatrix*, int64_t> quant_part(const PackedMatrix& p, int64_t row) {
  for (const auto& part : p.quant) {
    if (row < part->n) return {part.get(), row};
    row -= part->n;
  }
  throw InvalidArgument("PackedMatrix: row " + std::to_string(row) + " out of range");
}

// Runs quant_matmul part by part, each writing its own columns of y.
void matmul_quantized(const MatmulArgs& a, ThreadPool* pool) {
  int64_t row0 = 0;
  for (const auto& part : a.w->quant) {
    QuantMatmulArgs q;
    q.x = a.x;
    q.m = a.m;
    q.ldx = a.ldx;
    q.w = part.get();
    q.bias = a.bias ? a.bias + row0 : nullptr;
    q.y = a.y + row0;
    q.ldy = a.ldy;
    q.mode = a.w->quant_mode;
    if (pool) {
      quant_matmul(q, *pool);
    } else {
      quant_matmul_reference(q);
    }
    row0 += part->n;
  }
}

}  // namespace

int64_t PackedMatrix::bytes() const {
  if (is_quantized()) {
    int64_t total = 0;
    for (const auto& part : quant) total += part->bytes();
    return total;
  }
  return num_panels() * k * kPanel * (is_bf16() ? 2 : 4);
}

float PackedMatrix::at(int64_t row, int64_t col) const {
  if (is_quantized()) {
    std::vector<float> values(static_cast<size_t>(k));
    copy_row(row, values.data());
    return values[col];
  }
  const int64_t i = ((row / kPanel) * k + col) * kPanel + row % kPanel;
  return is_bf16() ? bf16_to_float(bf16[i]) : data[i];
}

void PackedMatrix::copy_row(int64_t row, float* out) const {
  if (is_quantized()) {
    const auto [part, r] = quant_part(*this, row);
    part->dequantize_row(r, out);
    return;
  }
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
  pack_into(w, n, k, p.data.get(), 0, [](float v) { return v; });
  return p;
}

PackedMatrix pack_weights_bf16(const float* w, int64_t n, int64_t k) {
  if (n < 0 || k < 0) throw InvalidArgument("pack_weights_bf16: negative shape");
  PackedMatrix p;
  p.n = n;
  p.k = k;
  p.bf16 = {alloc_panels<uint16_t>(p.num_panels(), k), &free_aligned16};
  pack_into(w, n, k, p.bf16.get(), 0, [](float v) { return bf16_bits(v); });
  return p;
}

PackedMatrix pack_quantized(std::vector<std::shared_ptr<const QuantMatrix>> parts, QuantMode mode) {
  if (parts.empty()) throw InvalidArgument("pack_quantized: no parts");
  PackedMatrix p;
  p.k = parts[0]->k;
  for (const auto& part : parts) {
    if (!part || part->k != p.k) throw InvalidArgument("pack_quantized: parts differ in k");
    if (!part->k_perm.empty() && part->k_perm != parts[0]->k_perm)
      throw InvalidArgument("pack_quantized: parts differ in their input permutation");
    p.n += part->n;
  }
  p.quant = std::move(parts);
  p.quant_mode = mode;
  return p;
}

PackedMatrix pack_weights_concat(const std::vector<WeightRows>& parts, int64_t k, bool bf16) {
  if (k < 0) throw InvalidArgument("pack_weights_concat: negative shape");
  PackedMatrix p;
  p.k = k;
  for (const WeightRows& part : parts) {
    if (part.rows < 0) throw InvalidArgument("pack_weights_concat: negative shape");
    p.n += part.rows;
  }
  if (bf16) {
    p.bf16 = {alloc_panels<uint16_t>(p.num_panels(), k), &free_aligned16};
  } else {
    p.data = {alloc_panels<float>(p.num_panels(), k), &free_aligned};
  }
  int64_t row0 = 0;
  const auto to_bf16 = [](float v) { return bf16_bits(v); };
  const auto to_f32 = [](float v) { return v; };
  for (const WeightRows& part : parts) {
    if (part.bf16_bits && bf16) {
      pack_into(part.bf16_bits, part.rows, k, p.bf16.get(), row0, to_bf16);
    } else if (part.bf16_bits) {
      pack_into(part.bf16_bits, part.rows, k, p.data.get(), row0, to_f32);
    } else if (bf16) {
      pack_into(part.w, part.rows, k, p.bf16.get(), row0, to_bf16);
    } else {
      pack_into(part.w, part.rows, k, p.data.get(), row0, to_f32);
    }
    row0 += part.rows;
  }
  return p;
}

PackedMatrix concat_packed(const std::vector<const PackedMatrix*>& parts) {
  if (parts.empty()) throw InvalidArgument("concat_packed: no parts");
  if (parts[0]->is_quantized()) {
    std::vector<std::shared_ptr<const QuantMatrix>> all;
    for (const PackedMatrix* part : parts) {
      if (!part->is_quantized() || part->quant_mode != parts[0]->quant_mode)
        throw InvalidArgument("concat_packed: quantized and unquantized parts, or two modes");
      all.insert(all.end(), part->quant.begin(), part->quant.end());
    }
    return pack_quantized(std::move(all), parts[0]->quant_mode);
  }
  const int64_t k = parts[0]->k;
  const bool bf16 = parts[0]->is_bf16();
  bool aligned = true;  // every part but the last fills whole panels
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->k != k || parts[i]->is_bf16() != bf16 || parts[i]->is_quantized()) {
      throw InvalidArgument("concat_packed: parts differ in k or dtype");
    }
    if (parts[i]->bf16_activations != parts[0]->bf16_activations) {
      throw InvalidArgument("concat_packed: parts differ in bf16_activations");
    }
    if (i + 1 < parts.size() && parts[i]->n % kPanel != 0) aligned = false;
  }
  const bool bf16_activations = parts[0]->bf16_activations;
  if (!aligned) {  // unpack and pack again (exact: bf16 widens and rounds back to itself)
    std::vector<std::vector<float>> rows(parts.size());
    std::vector<WeightRows> src;
    for (size_t i = 0; i < parts.size(); ++i) {
      rows[i].resize(static_cast<size_t>(parts[i]->n * k));
      for (int64_t r = 0; r < parts[i]->n; ++r) parts[i]->copy_row(r, &rows[i][r * k]);
      src.push_back({rows[i].data(), parts[i]->n});
    }
    PackedMatrix packed = pack_weights_concat(src, k, bf16);
    packed.bf16_activations = bf16_activations;
    return packed;
  }
  // Panels are independent [k][kPanel] blocks: the concatenation's panels are
  // the parts' panels one after the other (the last part's padding included).
  PackedMatrix p;
  p.k = k;
  p.bf16_activations = bf16_activations;
  for (const PackedMatrix* part : parts) p.n += part->n;
  if (bf16) {
    p.bf16 = {alloc_panels<uint16_t>(p.num_panels(), k), &free_aligned16};
  } else {
    p.data = {alloc_panels<float>(p.num_panels(), k), &free_aligned};
  }
  char* dst = bf16 ? reinterpret_cast<char*>(p.bf16.get()) : reinterpret_cast<char*>(p.data.get());
  for (const PackedMatrix* part : parts) {
    const char* src = bf16 ? reinterpret_cast<const char*>(part->bf16.get())
                           : reinterpret_cast<const char*>(part->data.get());
    std::memcpy(dst, src, part->bytes());
    dst += part->bytes();
  }
  return p;
}

void matmul_reference(const MatmulArgs& a) {
  check_args(a);
  if (a.w->is_quantized()) return matmul_quantized(a, nullptr);
  const PackedMatrix& w = *a.w;
  for (int64_t m = 0; m < a.m; ++m) {
    for (int64_t n = 0; n < w.n; ++n) {
      const int64_t at = (n / kPanel) * w.k * kPanel + n % kPanel;
      const float* x = a.x + m * a.ldx;
      if (w.bf16_activations) {
        a.y[m * a.ldy + n] =
            add_bias_flushed(blocked_dot_flushed(x, w.bf16.get() + at, w.k), a.bias, n);
        continue;
      }
      const float acc = w.is_bf16() ? blocked_dot(x, w.bf16.get() + at, w.k)
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

}  // namespace hubzoo
#endif  // HWY_ONCE
