// ops/f16.h: F16C conversions compiled per x86 target that has them (AVX2
// and up, where Highway's DemoteTo / PromoteTo are vcvtps2ph / vcvtph2ps,
// round to nearest even), the scalar functions everywhere else (Highway's
// emulated DemoteTo truncates, so it is not used).
#include "ops/f16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t F16Target() { return HWY_TARGET; }

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

using DF = hn::CappedTag<float, 16>;
using DH = hn::Rebind<hwy::float16_t, DF>;
constexpr int64_t kN = static_cast<int64_t>(hn::MaxLanes(DF()));

// v's halves, finite values beyond 65504 saturated first.
HWY_INLINE hn::Vec<DH> Demote(DF df, hn::Vec<DF> v) {
  const auto max = hn::Set(df, kF16Max);
  const auto a = hn::Abs(v);
  const auto clip = hn::And(hn::Gt(a, max), hn::Lt(a, hn::Set(df, HUGE_VALF)));
  return hn::DemoteTo(DH(), hn::IfThenElse(clip, hn::CopySign(max, v), v));
}

// Whole vectors in SIMD, the tail (fewer than kN) by the scalar functions.
void RoundF16(float* HWY_RESTRICT x, int64_t n) {
  const DF df;
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    hn::StoreU(hn::PromoteTo(df, Demote(df, hn::LoadU(df, x + i))), df, x + i);
  }
  for (; i < n; ++i) x[i] = round_f16_saturated(x[i]);
}

void ToF16(const float* HWY_RESTRICT x, int64_t n, uint16_t* HWY_RESTRICT out) {
  const DF df;
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    hn::StoreU(Demote(df, hn::LoadU(df, x + i)), DH(), reinterpret_cast<hwy::float16_t*>(out + i));
  }
  for (; i < n; ++i) out[i] = f16_bits_saturated(x[i]);
}

void FromF16(const uint16_t* HWY_RESTRICT x, int64_t n, float* HWY_RESTRICT out) {
  const DF df;
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    const auto h = hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(x + i));
    hn::StoreU(hn::PromoteTo(df, h), df, out + i);
  }
  for (; i < n; ++i) out[i] = f16_to_f32(x[i]);
}

#else  // no F16C: the scalar functions

void RoundF16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_f16_saturated(x[i]);
}
void ToF16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_bits_saturated(x[i]);
}
void FromF16(const uint16_t* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(x[i]);
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(F16Target);
HWY_EXPORT(RoundF16);
HWY_EXPORT(ToF16);
HWY_EXPORT(FromF16);

void round_f16_saturated(float* x, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(RoundF16)(x, n);
}
void to_f16_saturated(const float* x, int64_t n, uint16_t* out) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(ToF16)(x, n, out);
}
void from_f16(const uint16_t* x, int64_t n, float* out) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(FromF16)(x, n, out);
}

const char* f16_target_name() {
  const int64_t target = HWY_DYNAMIC_DISPATCH(F16Target)();
#if HWY_ARCH_X86
  if (target > HWY_AVX2) return "scalar";
#endif
  return hwy::TargetName(target);
}

}  // namespace hubzoo
#endif  // HWY_ONCE
