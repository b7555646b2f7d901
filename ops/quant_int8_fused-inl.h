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

// ---- int8 mode, few rows of x (decode), AVX-512: the 32-weight block types
// decoded straight into registers, no buffer. One block is one 32-column span
// and one vector of 32 int16 lanes, so its pair sums (vpmaddwd / vpdpwssd)
// are the 16 lanes of quant.h's int8 order for that block as they are.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int64_t kFusedRows = 16;  // rows of x up to which the fused path runs

// An fp16 scale by F16C (vcvtph2ps): the same float as quant::load_fp16 for
// every non-NaN half; a NaN (signalling ones come out quiet here) only ever
// meets a multiplication, which quiets it in both, so the products agree.
HWY_INLINE float Fp16(const uint8_t* p) { return _cvtsh_ss(quant::load_u16(p)); }

// Block b's w16 (quant_internal.h) as 32 int16 lanes: nibbles by and/shift.
template <QuantType t>
HWY_INLINE hn::Vec<DI16> BlockW16(const uint8_t* b) {
  const DI16 d16;
  if constexpr (t == QuantType::Q8_0) {
    return hn::PromoteTo(
        d16, hn::LoadU(hn::Rebind<int8_t, DI16>(), reinterpret_cast<const int8_t*>(b + 2)));
  } else {
    const hn::Half<DI16> dh;
    const uint8_t* qs = b + (t == QuantType::Q4_1 ? 4 : t == QuantType::Q5_0 ? 6 : 2);
    const auto v =
        hn::BitCast(dh, hn::PromoteTo(hn::Rebind<uint16_t, decltype(dh)>(),
                                      hn::LoadU(hn::Rebind<uint8_t, decltype(dh)>(), qs)));
    // Elements 0-15: low nibbles of qs[0..15]; 16-31: their high nibbles.
    const auto q = hn::Combine(d16, hn::ShiftRight<4>(v), hn::And(v, hn::Set(dh, 0xF)));
    if constexpr (t == QuantType::Q5_0) {  // bit l of qh (b + 2) is element l's bit 4
      const auto h = hn::IfThenElseZero(hn::LoadMaskBits(d16, b + 2), hn::Set(d16, 16));
      return hn::Sub(hn::Or(q, h), hn::Set(d16, 16));
    } else if constexpr (t == QuantType::Q4_0) {
      return hn::Sub(q, hn::Set(d16, 8));
    } else {
      return q;
    }
  }
}

// One block's pair sums start from zero: vpmaddwd alone (PairSums<false>),
// where vpdpwssd would need a zeroed register.
// Rows [r0, r1) x weight rows [n0, n1): kNR weight rows per pass over k share
// each block of x; per row the lanes are reduced by the tree (+ bias).
template <QuantType t, bool kVnni>
HWY_NOINLINE void Int8Fused(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0, int64_t r1,
                            int64_t n0, int64_t n1) {
  const DF df;
  const DI16 d16;
  const DI32 d32;
  const hn::Rebind<int8_t, DI16> d8;
  constexpr bool kMin = t == QuantType::Q4_1;
  constexpr int64_t kBytes = kTraitsOf<t>.block_bytes;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 32;
  for (int64_t n = n0; n < n1; n += kNR) {
    const int64_t nr = std::min<int64_t>(kNR, n1 - n);
    const uint8_t* rows[kNR];
    for (int64_t j = 0; j < kNR; ++j) rows[j] = w.row(n + std::min(j, nr - 1));
    const int64_t ahead = n + 2 * kNR <= w.n ? kNR * w.row_bytes : 0;
    for (int64_t r = r0; r < r1; ++r) {
      const quant::Int8Row x = acts.row(r);
      V acc[kNR];
      for (int j = 0; j < kNR; ++j) acc[j] = hn::Zero(df);
      for (int64_t b = 0; b < nb; ++b) {
        const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, x.qx + b * 32));
        const V dxv = hn::Set(df, x.dx[b]);
        V jf = hn::Zero(df);  // Q4_1: mn16 = 1, J = the lane's pair sum of qx
        if constexpr (kMin)
          jf = hn::ConvertTo(df, PairSums<false>(hn::Set(d16, 1), xv, hn::Zero(d32)));
#pragma GCC unroll 16
        for (int j = 0; j < kNR; ++j) {
          const uint8_t* blk = rows[j] + b * kBytes;
          // The next kNR rows, a group ahead: kNR short interleaved streams
          // are more than the hardware prefetcher follows.
          if (r == r0) hwy::Prefetch(blk + ahead);
          const auto i = PairSums<false>(BlockW16<t>(blk), xv, hn::Zero(d32));
          const V ad = hn::Mul(hn::Set(df, Fp16(blk)), dxv);
          acc[j] = hn::MulAdd(ad, hn::ConvertTo(df, i), acc[j]);
          if constexpr (kMin) {
            const V cd = hn::Mul(hn::Set(df, Fp16(blk + 2)), dxv);
            acc[j] = hn::MulAdd(cd, jf, acc[j]);
          }
        }
      }
      for (int64_t j = 0; j < nr; ++j) {
        alignas(64) float lanes[16];
        hn::Store(acc[j], df, lanes);
        const float s = quant::lane_tree(lanes);
        a.y[r * a.ldy + n + j] = a.bias ? s + a.bias[n + j] : s;
      }
    }
  }
}

// Span sp (32 columns) of a Q4_K / Q6_K block's w16 as 32 int16 lanes.
template <QuantType t>
HWY_INLINE hn::Vec<DI16> SpanW16(const uint8_t* b, int sp, const uint8_t* sc4) {
  const DI16 d16;
  const auto bytes = [&](const uint8_t* p) {
    return hn::BitCast(d16, hn::PromoteTo(hn::Rebind<uint16_t, DI16>(),
                                          hn::LoadU(hn::Rebind<uint8_t, DI16>(), p)));
  };
  const auto low4 = hn::Set(d16, 0xF);
  if constexpr (t == QuantType::Q4_K) {  // sub-block sp: nibbles of qs[(sp / 2) * 32 ..]
    const auto v = bytes(b + 16 + (sp / 2) * 32);
    const auto q = (sp % 2) ? hn::ShiftRight<4>(v) : hn::And(v, low4);
    return hn::Mul(q, hn::Set(d16, static_cast<int16_t>(sc4[sp])));
  } else {  // Q6_K: ql bits 0-3, qh bits 4-5, minus 32; groups 2 sp and 2 sp + 1
    const int e = sp * 32, half = e / 128, r = e % 128;
    const auto low = hn::And(hn::ShiftRightSame(bytes(b + half * 64 + r % 64), 4 * (r / 64)), low4);
    const auto high =
        hn::And(hn::ShiftRightSame(bytes(b + 128 + half * 32), 2 * (r / 32)), hn::Set(d16, 3));
    const auto q = hn::Sub(hn::Or(low, hn::ShiftLeft<4>(high)), hn::Set(d16, 32));
    const hn::Half<DI16> dh;
    const auto g = [&](int i) { return static_cast<int16_t>(static_cast<int8_t>(b[192 + i])); };
    return hn::Mul(q, hn::Combine(d16, hn::Set(dh, g(2 * sp + 1)), hn::Set(dh, g(2 * sp))));
  }
}

// The K types (256-weight blocks): per block and weight row, I and J summed
// over the 8 spans in registers, then the two fmas of the order.
template <QuantType t, bool kVnni>
HWY_NOINLINE void Int8FusedK(const QuantMatmulArgs& a, quant::Int8Acts& acts, int64_t r0,
                             int64_t r1, int64_t n0, int64_t n1) {
  const DF df;
  const DI16 d16;
  const DI32 d32;
  const hn::Rebind<int8_t, DI16> d8;
  constexpr bool kMin = t == QuantType::Q4_K;
  constexpr int64_t kBytes = kTraitsOf<t>.block_bytes;
  const QuantMatrix& w = *a.w;
  const int64_t nb = w.k / 256;
  for (int64_t n = n0; n < n1; n += kNR) {
    const int64_t nr = std::min<int64_t>(kNR, n1 - n);
    const uint8_t* rows[kNR];
    for (int64_t j = 0; j < kNR; ++j) rows[j] = w.row(n + std::min(j, nr - 1));
    const int64_t ahead = n + 2 * kNR <= w.n ? kNR * w.row_bytes : 0;
    for (int64_t r = r0; r < r1; ++r) {
      const quant::Int8Row x = acts.row(r);
      V acc[kNR];
      for (int j = 0; j < kNR; ++j) acc[j] = hn::Zero(df);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk[kNR];
        K4Scales k4[kNR];
        hn::Vec<DI32> I[kNR], J[kNR];
        for (int j = 0; j < kNR; ++j) {
          blk[j] = rows[j] + b * kBytes;
          if (r == r0) {
            for (int64_t p = 0; p < kBytes; p += 64) hwy::Prefetch(blk[j] + ahead + p);
          }
          if constexpr (kMin) k4[j] = UnpackK4(blk[j] + 4);
          I[j] = J[j] = hn::Zero(d32);
        }
#pragma GCC unroll 8
        for (int sp = 0; sp < 8; ++sp) {
          const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, x.qx + b * 256 + sp * 32));
#pragma GCC unroll 16
          for (int j = 0; j < kNR; ++j) {
            I[j] = PairSums<kVnni>(SpanW16<t>(blk[j], sp, k4[j].sc), xv, I[j]);
            if constexpr (kMin) {
              J[j] = PairSums<kVnni>(hn::Set(d16, static_cast<int16_t>(k4[j].m[sp])), xv, J[j]);
            }
          }
        }
        const V dxv = hn::Set(df, x.dx[b]);
#pragma GCC unroll 16
        for (int j = 0; j < kNR; ++j) {
          const float av = Fp16(blk[j] + (kMin ? 0 : 208));
          acc[j] = hn::MulAdd(hn::Mul(hn::Set(df, av), dxv), hn::ConvertTo(df, I[j]), acc[j]);
          if constexpr (kMin) {
            const V cd = hn::Mul(hn::Set(df, -Fp16(blk[j] + 2)), dxv);
            acc[j] = hn::MulAdd(cd, hn::ConvertTo(df, J[j]), acc[j]);
          }
        }
      }
      for (int64_t j = 0; j < nr; ++j) {
        alignas(64) float lanes[16];
        hn::Store(acc[j], df, lanes);
        const float s = quant::lane_tree(lanes);
        a.y[r * a.ldy + n + j] = a.bias ? s + a.bias[n + j] : s;
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
#endif

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
