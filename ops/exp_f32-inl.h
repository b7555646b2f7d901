// exp_f32() (ops/attend_online.h) for vectors, compiled per SIMD target: the
// same operations in the same order as the scalar function, so every lane
// gives its bits. Included by the per-target kernels of attention
// (ops/attend_online.cc, ops/attend_tiles.cc) inside foreach_target.
#ifndef HUBZOO_OPS_EXP_F32_CONSTANTS
#define HUBZOO_OPS_EXP_F32_CONSTANTS
namespace hubzoo::expf32 {
// Cephes expf: exp(x) = 2^n exp(r), n = round(x log2 e), r = x - n ln 2 in two
// steps (C1 has few mantissa bits, so n * C1 is exact), exp(r) a degree-7
// polynomial 1 + r + r^2 (p5 + r (p4 + ...)).
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kC1 = 0.693359375f, kC2 = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
constexpr float kMin = -87.0f;  // below: 0 (2^n stays a normal number above it)
constexpr float kMax = 88.0f;   // above: clamped (n <= 127)
}  // namespace hubzoo::expf32
#endif

#if defined(HUBZOO_OPS_EXP_F32_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_EXP_F32_INL_H_
#undef HUBZOO_OPS_EXP_F32_INL_H_
#else
#define HUBZOO_OPS_EXP_F32_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {

// exp_f32(), lane by lane.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> ExpF32(D d, hwy::HWY_NAMESPACE::Vec<D> x) {
  namespace hn = hwy::HWY_NAMESPACE;
  using namespace expf32;
  using V = hn::Vec<D>;
  const hn::RebindToSigned<D> di;
  const auto keep = hn::Ge(x, hn::Set(d, kMin));
  x = hn::Min(x, hn::Set(d, kMax));
  const V n = hn::Round(hn::Mul(x, hn::Set(d, kLog2e)));
  V r = hn::MulAdd(n, hn::Set(d, -kC1), x);
  r = hn::MulAdd(n, hn::Set(d, -kC2), r);
  V y = hn::Set(d, kP0);
  y = hn::MulAdd(y, r, hn::Set(d, kP1));
  y = hn::MulAdd(y, r, hn::Set(d, kP2));
  y = hn::MulAdd(y, r, hn::Set(d, kP3));
  y = hn::MulAdd(y, r, hn::Set(d, kP4));
  y = hn::MulAdd(y, r, hn::Set(d, kP5));
  y = hn::MulAdd(y, hn::Mul(r, r), r);
  y = hn::Add(y, hn::Set(d, 1.0f));
  const auto e = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::IfThenElseZero(keep, hn::Mul(y, hn::BitCast(d, e)));
}

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // HUBZOO_OPS_EXP_F32_INL_H_ toggle
