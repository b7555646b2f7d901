// quant_matmul: the scalar references of both modes (quant.h) and the
// Highway kernels, compiled once per SIMD target and dispatched at run time.
//
// Exact mode, per output element (quant.h): 16 lane chains, lane = column j
// mod 16, each a std::fma chain over its columns in order from 0.0f, reduced
// by the tree of quant::lane_tree, then + bias. A vector of 16 lanes (AVX-512)
// or two of 8 (AVX2) is exactly those 16 chains, so every target agrees.
//
// Work split: threads take columns (weight rows) and rows of x, never k. A
// thread dequantizes kNR weight rows over a k range of kKC columns into an L1
// buffer once per chunk of rows of x, then runs register tiles of kMR rows x
// kNR weight rows over it; the lane accumulators of a tile are kept in a
// buffer between k ranges (the chains continue, the order is unchanged).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "ops/cpu_amx.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"
#include "ops/quant_matmul_shared.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/quant_matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, once per target: the vector types and the per-type decoders.
#include "ops/quant_decode-inl.h"
// PairSums and the fused int8 kernels for few rows of x (K types).
#include "ops/quant_int8_fused-inl.h"
// The int8 kernels of the 32-weight block types (a lane per weight row).
#include "ops/quant_int8_rows-inl.h"
// The quad tile's block integers from AMX tiles, where the CPU has them.
#include "ops/quant_int8_amx-inl.h"
// Their kernels over panels (VNNI, then 256 bits), the quad tile and the dispatch of a range.
#include "ops/quant_int8_panels-inl.h"
#include "ops/quant_int8_panels256-inl.h"
// The int8 decode kernels of the K types over their panels.
#include "ops/quant_int8_kpanels-inl.h"
#include "ops/quant_int8_kpanels256-inl.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using quant::kKC;
using quant::kNR;
using quant::kRows8;

int64_t QuantDispatchedTarget() { return HWY_TARGET; }

// quant::quantize_activations vectorised, with the same float operations per
// element (amax by max, which has no order; x * id, the 1.5 * 2^23 rounding,
// clamp): the same bytes and scales on every target.
void QuantizeActivations(const float* HWY_RESTRICT x, int64_t k, int64_t block, int8_t* qx,
                         float* dx) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  if (block % n != 0) return quant::quantize_activations(x, k, block, {qx, dx});
  const auto magic = hn::Set(df, 12582912.0f), hi = hn::Set(df, 127.0f), lo = hn::Set(df, -127.0f);
  // n blocks at a time: their amax, then their d = amax / 127 and 1 / d by
  // two vector divisions (the same correctly rounded quotients as the
  // scalar ones, which took most of a 16-column block's time), then the codes.
  HWY_ALIGN float amax[hn::MaxLanes(df)], id[hn::MaxLanes(df)];
  for (int64_t g0 = 0; g0 < k; g0 += n * block) {
    const int64_t blocks = std::min(n, (k - g0) / block);
    for (int64_t j = 0; j < n; ++j) {
      auto vmax = hn::Zero(df);
      if (j < blocks) {
        for (int64_t i = g0 + j * block; i < g0 + (j + 1) * block; i += n)
          vmax = hn::Max(hn::Abs(hn::LoadU(df, x + i)), vmax);
      }
      // Max(|x|, amax) keeps amax where |x| is NaN, as std::max(amax, |x|) does:
      // the lanes are never NaN (nor -0), so their max has no order.
      amax[j] = hn::GetLane(hn::MaxOfLanes(df, vmax));
    }
    const auto d = hn::Div(hn::Load(df, amax), hn::Set(df, 127.0f));
    hn::Store(hn::IfThenZeroElse(hn::Eq(d, hn::Zero(df)), hn::Div(hn::Set(df, 1.0f), d)), df, id);
    HWY_ALIGN float dv[hn::MaxLanes(df)];
    hn::Store(d, df, dv);
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t b0 = g0 + j * block;
      dx[b0 / block] = dv[j];
      const auto idv = hn::Set(df, id[j]);
      for (int64_t i = b0; i < b0 + block; i += n) {
        const auto r = hn::Sub(hn::Add(hn::Mul(hn::LoadU(df, x + i), idv), magic), magic);
        const auto v = hn::IfThenElseZero(hn::Eq(r, r), hn::Min(hn::Max(r, lo), hi));
        hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, v)), d8, qx + i);
      }
    }
  }
}

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

// DF, V, kN, kV, DequantRows and DecodeRowsInt8: ops/quant_decode-inl.h.
// Rows of x per register tile: kMR * kNR * kV accumulators + kNR weights + 1 x
// within the register file (32 zmm on AVX-512, 16 ymm on AVX2).
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kMR = 1;
#else
constexpr int kMR = 4;
#endif

struct TileOut {
  float* acc;  // [kMR][kNR][16] lane accumulators kept between k ranges
  bool first, last;
  const float* bias;  // at column n, or null
  float* y;           // y at row r, column n
  int64_t ldy, n_valid;
};

// The lanes of a tile kept for the next k range, or (last range) reduced by
// the tree into y (+ bias).
template <int MR>
HWY_INLINE void StoreTile(const V (&acc)[MR][kNR][kV], const TileOut& o) {
  const DF df;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < kNR; ++j) {
      alignas(64) float lanes[16];
#pragma GCC unroll 16
      for (int v = 0; v < kV; ++v) {
        hn::Store(acc[r][j][v], df, (o.last ? lanes : o.acc + (r * kNR + j) * 16) + v * kN);
      }
      if (!o.last || j >= o.n_valid) continue;
      const float t = quant::lane_tree(lanes);
      o.y[r * o.ldy + j] = o.bias ? t + o.bias[j] : t;
    }
  }
}

float* AlignUp(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

// MR rows x kNR weight rows over kc columns: x rows xr[r] (at k0), weights
// wbuf (stride kc). Lanes continue from acc (unless first); the last range
// reduces them by the tree and stores y (+ bias).
template <int MR>
HWY_NOINLINE void ExactTile(const float* const* xr, const float* HWY_RESTRICT wbuf, int64_t kc,
                            const TileOut& o) {
  const DF df;
  V acc[MR][kNR][kV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < kNR; ++j) {
#pragma GCC unroll 16
      for (int v = 0; v < kV; ++v) {
        acc[r][j][v] = o.first ? hn::Zero(df) : hn::Load(df, o.acc + (r * kNR + j) * 16 + v * kN);
      }
    }
  }
  for (int64_t s = 0; s < kc; s += 16) {
#pragma GCC unroll 16
    for (int v = 0; v < kV; ++v) {
      V wv[kNR];
#pragma GCC unroll 16
      for (int j = 0; j < kNR; ++j) wv[j] = hn::Load(df, wbuf + j * kc + s + v * kN);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const V xv = hn::LoadU(df, xr[r] + s + v * kN);
#pragma GCC unroll 16
        for (int j = 0; j < kNR; ++j) acc[r][j][v] = hn::MulAdd(xv, wv[j], acc[r][j][v]);
      }
    }
  }
  StoreTile<MR>(acc, o);
}

using TileFn = void (*)(const float* const*, const float*, int64_t, const TileOut&);
template <size_t... I>
constexpr std::array<TileFn, sizeof...(I)> MakeTiles(std::index_sequence<I...>) {
  return {&ExactTile<static_cast<int>(I) + 1>...};
}
constexpr auto kTiles = MakeTiles(std::make_index_sequence<kMR>());

// Exact mode over rows [r0, r1) x columns [n0, n1).
void ExactRange(const QuantMatmulArgs& a, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const QuantMatrix& w = *a.w;
  const int64_t k = w.k;
  thread_local std::vector<float> wbuf, accbuf, xg;
  wbuf.resize(kNR * kKC + 16);
  const int64_t chunk = quant::exact_chunk_rows(k);
  accbuf.resize(chunk * kNR * 16 + 16);
  const bool perm = !w.k_perm.empty();
  if (perm) xg.resize(chunk * k);
  float* wb = AlignUp(wbuf.data());
  float* ab = AlignUp(accbuf.data());
  for (int64_t rc = r0; rc < r1; rc += chunk) {
    const int64_t rc_end = std::min(r1, rc + chunk);
    const float* rows[quant::kRowsMax];
    for (int64_t r = rc; r < rc_end; ++r) {
      rows[r - rc] = perm ? quant::gathered_row(a, r, xg.data() + (r - rc) * k) : a.x + r * a.ldx;
    }
    for (int64_t n = n0; n < n1; n += kNR) {
      for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        const int64_t kc = std::min(kKC, k - k0);
        DequantRows(w, n, n1, k0, kc, wb);
        for (int64_t rb = rc; rb < rc_end; rb += kMR) {
          const int64_t mr = std::min<int64_t>(kMR, rc_end - rb);
          const float* xr[kMR];
          for (int64_t r = 0; r < mr; ++r) xr[r] = rows[rb - rc + r] + k0;
          const TileOut o{
              ab + (rb - rc) * kNR * 16, k0 == 0, k0 + kc == k, a.bias ? a.bias + n : nullptr,
              a.y + rb * a.ldy + n,      a.ldy,   n1 - n};
          kTiles[mr - 1](xr, wb, kc, o);
        }
      }
    }
  }
}

// ---- int8 mode ----
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kMR8 = 1;
#else
constexpr int kMR8 = 2;
#endif

// The tiled int8 path (the K types; the 32-weight block types have their own
// kernels): a block's integers are exact whatever the pairing, so rows of x
// and decoded weights are read as they are, kH int16 lanes at a time.
constexpr int64_t kH = static_cast<int64_t>(hn::MaxLanes(DI16()));  // int16 lanes per vector
static_assert(quant::kXBlock % kH == 0 && kKC % 256 == 0, "chunks must be whole vectors");
static_assert(kNR == 4, "Int8Tile runs its kNR rows' chains in the four lanes of a vector");

struct Int8TileIn {
  const int8_t* const* qx;  // MR activation rows at k0
  const float* const* dx;   // their chunk scales at k0 / kXBlock
  const int16_t* w16;       // kNR rows, stride kc
  const int16_t* mn16;      // kNR rows, stride kc (kMin only)
  const float* a;           // kNR rows, stride kc / block
  const float* c;
  int64_t kc, block;
};

bool UseVnni() {
#if (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && \
    (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has && quant::int8_vnni_allowed();
#else
  return false;
#endif
}

// Four lanes, one per weight row of a tile: the tiled path's chains run in them.
using D4 = hn::FixedTag<float, 4>;
using DI4 = hn::FixedTag<int32_t, 4>;

// The lane sums of v[0..3] in lanes 0..3, exact (integer addition has no
// order): lanes of v[0], v[1] interleaved and added, then pairs of those,
// leave each 128-bit block holding its four vectors' partial sums, then the
// blocks are added. A quarter of the shuffles of four SumOfLanes.
HWY_INLINE hn::Vec<DI4> SumOfLanes4(const hn::Vec<DI32> (&v)[4]) {
  const DI32 d32;
  const hn::Repartition<int64_t, DI32> d64;
  const auto a01 =
      hn::Add(hn::InterleaveLower(d32, v[0], v[1]), hn::InterleaveUpper(d32, v[0], v[1]));
  const auto a23 =
      hn::Add(hn::InterleaveLower(d32, v[2], v[3]), hn::InterleaveUpper(d32, v[2], v[3]));
  const auto b01 = hn::BitCast(d64, a01), b23 = hn::BitCast(d64, a23);
  const auto sums = hn::Add(hn::BitCast(d32, hn::InterleaveLower(d64, b01, b23)),
                            hn::BitCast(d32, hn::InterleaveUpper(d64, b01, b23)));
#if HWY_TARGET <= HWY_AVX3
  static_assert(hn::MaxLanes(d32) == 16, "AVX-512: four blocks");
  const hn::Half<DI32> d8;
  const hn::Half<decltype(d8)> d4;
  const auto h = hn::Add(hn::LowerHalf(d8, sums), hn::UpperHalf(d8, sums));
  return hn::Add(hn::LowerHalf(d4, h), hn::UpperHalf(d4, h));
#elif HWY_TARGET == HWY_AVX2
  static_assert(hn::MaxLanes(d32) == 8, "AVX2: two blocks");
  const hn::Half<DI32> d4;
  return hn::Add(hn::LowerHalf(d4, sums), hn::UpperHalf(d4, sums));
#else
  static_assert(hn::MaxLanes(d32) == 4, "128-bit vectors: one block");
  return sums;
#endif
}

// The chains continue from o.acc (slot (r * kNR + j) * 16) unless first; the
// last range stores y (+ bias).
template <int MR, bool kMin, bool kVnni>
HWY_NOINLINE void Int8Tile(const Int8TileIn& in, const TileOut& o) {
  const DI16 d16;
  const DI32 d32;
  const hn::Rebind<int8_t, DI16> d8;
  const D4 d4;
  // Per row of x, the kNR chains (one per weight row) in the lanes of one
  // vector: the same fmas as the reference's scalar ones, four at a time.
  hn::Vec<D4> acc[MR];
  alignas(16) float lanes[kNR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < kNR; ++j) lanes[j] = o.first ? 0.0f : o.acc[(r * kNR + j) * 16];
    acc[r] = hn::Load(d4, lanes);
  }
  // A unit is one kXBlock-column chunk of a K-type block (the 32-weight
  // block types have their own kernels, ops/quant_int8_rows-inl.h), its
  // integers summed in the lanes of I and J and then added up (exact).
  const int64_t nb = in.kc / in.block, unit = quant::kXBlock;
  hn::Vec<D4> a4 = hn::Zero(d4), c4 = hn::Zero(d4);
  for (int64_t u0 = 0; u0 < in.kc; u0 += unit) {
    const int64_t b0 = u0 / in.block;
    if (u0 % in.block == 0) {  // the kNR weight rows' scales of this block
      alignas(16) float av[kNR], cv[kNR];
      for (int j = 0; j < kNR; ++j) {
        av[j] = in.a[j * nb + b0];
        cv[j] = in.c[j * nb + b0];
      }
      a4 = hn::Load(d4, av);
      c4 = hn::Load(d4, cv);
    }
    hn::Vec<DI32> I[MR][kNR], J[MR][kNR];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
      for (int j = 0; j < kNR; ++j) I[r][j] = J[r][j] = hn::Zero(d32);
    }
    for (int64_t off = u0; off < u0 + unit; off += kH) {
      hn::Vec<DI16> xv[MR];
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) xv[r] = hn::PromoteTo(d16, hn::LoadU(d8, in.qx[r] + off));
#pragma GCC unroll 16
      for (int j = 0; j < kNR; ++j) {
        const auto wv = hn::LoadU(d16, in.w16 + j * in.kc + off);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) I[r][j] = PairSums<kVnni>(wv, xv[r], I[r][j]);
        if (kMin) {
          const auto mv = hn::LoadU(d16, in.mn16 + j * in.kc + off);
#pragma GCC unroll 16
          for (int r = 0; r < MR; ++r) J[r][j] = PairSums<kVnni>(mv, xv[r], J[r][j]);
        }
      }
    }
    // a * dx and c * dx rounded once, as the reference's.
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const auto dx = hn::Set(d4, in.dx[r][u0 / unit]);
      acc[r] = hn::MulAdd(hn::Mul(a4, dx), hn::ConvertTo(d4, SumOfLanes4(I[r])), acc[r]);
      if (kMin) {
        acc[r] = hn::MulAdd(hn::Mul(c4, dx), hn::ConvertTo(d4, SumOfLanes4(J[r])), acc[r]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    hn::Store(acc[r], d4, lanes);
#pragma GCC unroll 16
    for (int j = 0; j < kNR; ++j) {
      if (!o.last) {
        o.acc[(r * kNR + j) * 16] = lanes[j];
      } else if (j < o.n_valid) {
        o.y[r * o.ldy + j] = o.bias ? lanes[j] + o.bias[j] : lanes[j];
      }
    }
  }
}

using Int8TileFn = void (*)(const Int8TileIn&, const TileOut&);
template <bool kMin, bool kVnni, size_t... I>
constexpr std::array<Int8TileFn, sizeof...(I)> MakeInt8Tiles(std::index_sequence<I...>) {
  return {&Int8Tile<static_cast<int>(I) + 1, kMin, kVnni>...};
}
// [vnni][has_min][mr - 1]
constexpr std::array<std::array<std::array<Int8TileFn, kMR8>, 2>, 2> kInt8Tiles = {{
    {{MakeInt8Tiles<false, false>(std::make_index_sequence<kMR8>()),
      MakeInt8Tiles<true, false>(std::make_index_sequence<kMR8>())}},
    {{MakeInt8Tiles<false, true>(std::make_index_sequence<kMR8>()),
      MakeInt8Tiles<true, true>(std::make_index_sequence<kMR8>())}},
}};

void Int8Range(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0, int64_t r1, int64_t n0,
               int64_t n1) {
  const QuantMatrix& w = *a.w;
  const int64_t k = w.k, block = quant_traits(w.type).block_elems;
  const bool has_min = quant::int8_has_min(w.type);
  const bool vnni = UseVnni();
  if (block == 32) {
    // The quad panels address rows by int32 offsets from the first of 16.
    return Int8Rows32Range(a, acts, r0, r1, n0, n1, vnni && w.row_bytes <= INT32_MAX / 16);
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (Int8KPanelsRange(a, acts, r0, r1, n0, n1, vnni)) return;
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (vnni ? Int8FusedRange<true>(a, acts, r0, r1, n0, n1)
           : Int8FusedRange<false>(a, acts, r0, r1, n0, n1)) {
    return;
  }
#endif
  thread_local quant::Int8Weights wd;
  thread_local std::vector<uint8_t> from_panels;
  thread_local std::vector<float> accbuf;
  accbuf.resize(kRows8 * kNR * 16 + 16);
  float* ab = AlignUp(accbuf.data());
  for (int64_t rc = r0; rc < r1; rc += kRows8) {
    const int64_t rc_end = std::min(r1, rc + kRows8);
    for (int64_t n = n0; n < n1; n += kNR) {
      for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        const int64_t kc = std::min(kKC, k - k0);
        if (w.panels) {  // the rows' blocks from the panels (a loader may have released the rows)
          const QuantTraits& tr = quant_traits(w.type);
          const int64_t rows = std::min(kNR, n1 - n), nbc = kc / tr.block_elems;
          from_panels.resize(rows * nbc * tr.block_bytes);
          for (int64_t j = 0; j < rows; ++j) {
            quant::panel_row_range(w, n + j, k0 / tr.block_elems, nbc,
                                   from_panels.data() + j * nbc * tr.block_bytes);
          }
          QuantMatrix part;
          part.type = w.type;
          part.n = rows;
          part.k = kc;
          part.row_bytes = nbc * tr.block_bytes;
          part.data = from_panels.data();
          DecodeRowsInt8(part, 0, rows, 0, kc, wd);
        } else {
          DecodeRowsInt8(w, n, n1, k0, kc, wd);
        }
        const Int8TileIn base{nullptr,     nullptr, wd.w16.data(), wd.mn16.data(), wd.a.data(),
                              wd.c.data(), kc,      block};
        for (int64_t rb = rc; rb < rc_end; rb += kMR8) {
          const int64_t mr = std::min<int64_t>(kMR8, rc_end - rb);
          const int8_t* qx[kMR8];
          const float* dx[kMR8];
          for (int64_t r = 0; r < mr; ++r) {
            qx[r] = acts.row(rb + r).qx + k0;
            dx[r] = acts.row(rb + r).dx + k0 / acts.block;
          }
          Int8TileIn in = base;
          in.qx = qx;
          in.dx = dx;
          const TileOut o{
              ab + (rb - rc) * kNR * 16, k0 == 0, k0 + kc == k, a.bias ? a.bias + n : nullptr,
              a.y + rb * a.ldy + n,      a.ldy,   n1 - n};
          kInt8Tiles[vnni][has_min][mr - 1](in, o);
        }
      }
    }
  }
}

#else  // no native FMA: the scalar chains of the reference

void ExactRange(const QuantMatmulArgs& a, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  quant::exact_scalar(a, r0, r1, n0, n1);
}

void Int8Range(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0, int64_t r1, int64_t n0,
               int64_t n1) {
  quant::int8_scalar(a, acts, r0, r1, n0, n1);
}

#endif

// The int8 kernels read QuantMatrix::panels of every type with a panel
// layout on AVX512-VNNI (vpdpbusd) and, without it, on AVX2 and up (the
// 256-bit vpmaddubsw kernels); below AVX2 none does.
bool ReadsPanels(QuantType t) {
#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE
  if (!quant_has_panel_layout(t)) return false;
  if (UseVnni()) return true;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return true;  // the 256-bit kernels (Int8Panels256Range, KPanel256)
#endif
#endif
  (void)t;
  return false;
}

// One part's share of a job of `tiles` chunks: the output split into
// col_groups x row_groups tiles over columns (preferred: each thread streams
// only its own weights) and rows, for `threads` threads. Columns are cut at
// multiples of kNR weight rows, or of a panel's 16 where the weights have
// panels.
struct TileGrid {
  int64_t unit, col_blocks, col_groups, row_groups;
  TileGrid(const QuantMatmulArgs& a, int64_t threads)
      : unit(a.w->panels ? quant::kPanelRows : kNR),
        col_blocks((a.w->n + unit - 1) / unit),
        col_groups(std::min(col_blocks, threads)),
        row_groups(std::clamp<int64_t>(threads / col_groups, 1, a.m)) {}
  int64_t tiles() const { return col_groups * row_groups; }
};

// Every part in one parallel job. A decode step's few rows, where every
// part is cut over its columns only, make the units of all parts' columns
// (16-row panels, or kNR rows) one range that parallel_for_balanced hands
// out: a thread streams a contiguous run of weights, and one slowed down (on
// a shared machine, a neighbour on its core) leaves the back of its share to
// the other instead of holding up the step (SmolLM2 Q8_0, paired rounds:
// 1.07x at batch 1, 1.12x at batch 4). More rows keep one tile per thread
// (batch 16: 0.96x balanced, a 512-token prompt 0.96x). Otherwise chunk t
// computes tile t of each part. The cuts fall on whole units, so no output
// depends on them.
constexpr int64_t kBalancedRows = 4;

// A balanced job's parts as one range of units (StreamHint::where's ctx).
struct JointUnits {
  const QuantMatmulArgs* parts;
  int count;
  bool int8;                  // the int8 kernels, which read panels where ReadsPanels says
  const int64_t* first_unit;  // [count + 1]
  const int64_t* unit;        // [count]
};

// What unit `index` of the joint range reads first: from its panel (the int8
// kernels, where the weights have panels) or its rows on, to the end of its
// part; nothing where rows are stored in another order (no one stream).
ThreadPool::Region JointUnitStart(const void* ctx, int64_t index) {
  const JointUnits& j = *static_cast<const JointUnits*>(ctx);
  int i = 0;
  while (i + 1 < j.count && index >= j.first_unit[i + 1]) ++i;
  const QuantMatrix& w = *j.parts[i].w;
  const int64_t row = (index - j.first_unit[i]) * j.unit[i];
  const uint8_t* base;
  int64_t rows;
  if (j.int8 && w.panels && ReadsPanels(w.type)) {
    base = w.panels.get();
    rows = (w.n + quant::kPanelRows - 1) / quant::kPanelRows * quant::kPanelRows;
  } else if (w.row_order.empty()) {
    base = w.data;
    rows = w.n;
  } else {
    return {};
  }
  if (row >= rows) return {};
  return {base + row * w.row_bytes, (rows - row) * w.row_bytes};
}

void QuantMatmulParts(const QuantMatmulArgs* parts, quant::Int8Acts* const* acts, int count,
                      ThreadPool& pool) {
  const int64_t m = parts[0].m;
  int64_t threads = pool.num_threads();
  if (m == 1) {  // a decode step: a thread per 64 KiB of weights at most
    int64_t bytes = 0;
    for (int i = 0; i < count; ++i) bytes += parts[i].w->bytes();
    threads = std::clamp<int64_t>(bytes / (64 * 1024), 1, threads);
  }
  const auto run = [&](int i, int64_t r0, int64_t r1, int64_t n0, int64_t n1) HWY_ATTR {
    if (acts) {
      Int8Range(parts[i], *acts[i], r0, r1, n0, n1);
    } else {
      ExactRange(parts[i], r0, r1, n0, n1);
    }
  };
  int64_t tiles = 1;
  bool columns_only = true;
  std::array<int64_t, kMaxQuantParts + 1> first_unit{};  // of each part in the joint range
  std::array<int64_t, kMaxQuantParts> unit{};
  for (int i = 0; i < count; ++i) {
    const TileGrid g(parts[i], threads);
    tiles = std::max(tiles, g.tiles());
    columns_only = columns_only && g.row_groups == 1;
    first_unit[i + 1] = first_unit[i] + g.col_blocks;
    unit[i] = g.unit;
  }
  if (columns_only && m <= kBalancedRows) {
    const auto units = [&](int64_t u0, int64_t u1) HWY_ATTR {
      for (int i = 0; i < count; ++i) {
        const int64_t lo = std::max(u0, first_unit[i]), hi = std::min(u1, first_unit[i + 1]);
        if (lo >= hi) continue;
        const int64_t n = parts[i].w->n;
        run(i, 0, m, (lo - first_unit[i]) * unit[i], std::min(n, (hi - first_unit[i]) * unit[i]));
      }
    };
    if (threads == 1) {
      units(0, first_unit[count]);
      return;
    }
    if (threads == pool.num_threads()) {
      const JointUnits joint{parts, count, acts != nullptr, first_unit.data(), unit.data()};
      pool.parallel_for_balanced(first_unit[count], 1, units,
                                 {.key = parts[0].w, .ctx = &joint, .where = &JointUnitStart});
      return;
    }
  }
  pool.parallel_for(tiles, 1, [&](int64_t begin, int64_t end) HWY_ATTR {
    for (int64_t t = begin; t < end; ++t) {
      for (int i = 0; i < count; ++i) {
        const QuantMatmulArgs& a = parts[i];
        const TileGrid g(a, threads);
        if (t >= g.tiles()) continue;
        const int64_t n = a.w->n, rg = t / g.col_groups, cg = t % g.col_groups;
        const int64_t r0 = rg * m / g.row_groups, r1 = (rg + 1) * m / g.row_groups;
        const int64_t n0 = std::min(n, cg * g.col_blocks / g.col_groups * g.unit);
        const int64_t n1 = std::min(n, (cg + 1) * g.col_blocks / g.col_groups * g.unit);
        if (r0 < r1 && n0 < n1) run(i, r0, r1, n0, n1);
      }
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(QuantMatmulParts);
HWY_EXPORT(QuantDispatchedTarget);
HWY_EXPORT(QuantizeActivations);
HWY_EXPORT(ReadsPanels);

namespace {

void check_args(const QuantMatmulArgs& a) {
  if (!a.w) throw InvalidArgument("quant_matmul: no weights");
  const QuantMatrix& w = *a.w;
  if (w.n < 0) throw InvalidArgument("quant_matmul: negative row count of the weights");
  if (w.row_bytes != quant_row_bytes(w.type, w.k)) {  // also checks k
    throw InvalidArgument("quant_matmul: row_bytes " + std::to_string(w.row_bytes) +
                          " does not match " + std::string(quant_name(w.type)) + " with k " +
                          std::to_string(w.k));
  }
  if (w.n > 0 && !w.data) throw InvalidArgument("quant_matmul: the weights have no data");
  if (a.m < 0) throw InvalidArgument("quant_matmul: negative row count");
  if (a.m > 0 && w.n > 0 && (!a.x || !a.y)) {
    throw InvalidArgument("quant_matmul: null input or output");
  }
  if (a.m > 0 && (a.ldx < w.k || a.ldy < w.n)) {
    throw InvalidArgument("quant_matmul: row stride smaller than the row (ldx " +
                          std::to_string(a.ldx) + " < k " + std::to_string(w.k) + " or ldy " +
                          std::to_string(a.ldy) + " < n " + std::to_string(w.n) + ")");
  }
  if (!w.row_order.empty() && static_cast<int64_t>(w.row_order.size()) != w.n) {
    throw InvalidArgument("quant_matmul: row_order has " + std::to_string(w.row_order.size()) +
                          " entries, expected n = " + std::to_string(w.n));
  }
  if (!w.k_perm.empty()) {
    if (static_cast<int64_t>(w.k_perm.size()) != w.k) {
      throw InvalidArgument("quant_matmul: k_perm has " + std::to_string(w.k_perm.size()) +
                            " entries, expected k = " + std::to_string(w.k));
    }
    for (int32_t p : w.k_perm) {
      if (p < 0 || p >= w.k) {
        throw InvalidArgument("quant_matmul: k_perm entry " + std::to_string(p) + " outside [0, " +
                              std::to_string(w.k) + ")");
      }
    }
  }
  if (a.mode != QuantMode::kExact && a.mode != QuantMode::kInt8) {
    throw InvalidArgument("quant_matmul: unknown mode");
  }
}

// Every row of x (after k_perm) quantized for the int8 mode, into acts. Its
// vectors only grow, so a caller that keeps acts allocates once per size.
void quantize_rows(const QuantMatmulArgs& a, ThreadPool* pool, quant::Int8Acts& acts) {
  static std::atomic<uint64_t> versions{0};
  acts.version = versions.fetch_add(1, std::memory_order_relaxed) + 1;
  acts.k = a.w->k;
  acts.block = quant::x_block_of(quant_traits(a.w->type).block_elems);
  acts.qx.resize(a.m * acts.k);
  acts.dx.resize(a.m * (acts.k / acts.block));
  const auto rows = [&](int64_t r0, int64_t r1) {
    std::vector<float> xg(a.w->k_perm.empty() ? 0 : acts.k);  // gathered_row's buffer
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = quant::gathered_row(a, r, xg.data());
      const quant::Int8Row row = acts.row(r);
      if (pool) {
        HWY_DYNAMIC_DISPATCH(QuantizeActivations)(x, acts.k, acts.block, row.qx, row.dx);
      } else {
        quant::quantize_activations(x, acts.k, acts.block, row);
      }
    }
  };
  if (pool && a.m > 1) {
    pool->parallel_for(a.m, 1, rows);
  } else {
    rows(0, a.m);
  }
}

}  // namespace

void quant_matmul(const QuantMatmulArgs& a, ThreadPool& pool) { quant_matmul_parts(&a, 1, pool); }

void quant_matmul_parts(const QuantMatmulArgs* parts, int count, ThreadPool& pool) {
  if (count < 1 || count > kMaxQuantParts) {
    throw InvalidArgument("quant_matmul_parts: " + std::to_string(count) + " parts, not 1 to " +
                          std::to_string(kMaxQuantParts));
  }
  for (int i = 0; i < count; ++i) {
    const QuantMatmulArgs& a = parts[i];
    check_args(a);
    if (a.x != parts[0].x || a.m != parts[0].m || a.ldx != parts[0].ldx ||
        a.mode != parts[0].mode || a.w->k != parts[0].w->k) {
      throw InvalidArgument("quant_matmul_parts: part " + std::to_string(i) +
                            " differs from part 0 in x, m, ldx, k or mode");
    }
  }
  // The parts with outputs; a part with n == 0 has nothing to compute.
  std::array<QuantMatmulArgs, kMaxQuantParts> live;
  int n_live = 0;
  for (int i = 0; i < count; ++i) {
    if (parts[i].w->n > 0) live[n_live++] = parts[i];
  }
  if (parts[0].m == 0 || n_live == 0) return;
  if (parts[0].mode != QuantMode::kInt8) {
    HWY_DYNAMIC_DISPATCH(QuantMatmulParts)(live.data(), nullptr, n_live, pool);
    return;
  }
  // x quantized once per activation block (quant::x_block_of): parts without
  // a permutation and with the same block share their activations (q/k/v,
  // gate/up; a K-type part and a 32-weight one each quantize). Kept per
  // calling thread, like a model's step buffers: a decode step's rows are
  // allocated once; a prompt's (more than 64 rows) are freed after the
  // product rather than kept resident for the thread's lifetime.
  thread_local std::array<quant::Int8Acts, kMaxQuantParts> acts;
  std::array<quant::Int8Acts*, kMaxQuantParts> of_part;
  int n_acts = 0;
  for (int i = 0; i < n_live; ++i) {
    of_part[i] = nullptr;
    const auto block_of = [&](int p) {
      return quant::x_block_of(quant_traits(live[p].w->type).block_elems);
    };
    for (int j = 0; j < i && live[i].w->k_perm.empty() && !of_part[i]; ++j) {
      if (live[j].w->k_perm.empty() && block_of(j) == block_of(i)) of_part[i] = of_part[j];
    }
    if (!of_part[i]) {
      of_part[i] = &acts[n_acts++];
      quantize_rows(live[i], &pool, *of_part[i]);
    }
  }
  HWY_DYNAMIC_DISPATCH(QuantMatmulParts)(live.data(), of_part.data(), n_live, pool);
  if (parts[0].m > 64) {
    for (int j = 0; j < n_acts; ++j) acts[j] = quant::Int8Acts{};
  }
}

void quant_matmul_reference(const QuantMatmulArgs& a) {
  check_args(a);
  if (a.m == 0 || a.w->n == 0) return;
  if (a.mode == QuantMode::kInt8) {
    quant::Int8Acts acts;
    quantize_rows(a, nullptr, acts);
    quant::int8_scalar(a, acts, 0, a.m, 0, a.w->n);
  } else {
    quant::exact_scalar(a, 0, a.m, 0, a.w->n);
  }
}

bool quant_reads_panels(QuantType t) { return HWY_DYNAMIC_DISPATCH(ReadsPanels)(t); }

const char* quant_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(QuantDispatchedTarget)());
}

}  // namespace hubzoo
#endif  // HWY_ONCE
