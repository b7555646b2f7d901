// a * b rounded on its own, for the per-target code of kernels that must give
// the bits of a scalar mul-then-add (ops/dot_axpy.cc, ops/attend_head.cc).
//
// GCC contracts a multiply followed by an add into an FMA whenever the target
// has one (-ffp-contract=fast is its default), which rounds once instead of
// twice. The product passes through an empty asm statement that hides it from
// the optimiser. Included after hwy/highway.h, once per target (Highway's
// -inl.h convention).
#if defined(HUBZOO_OPS_ROUNDED_PRODUCT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_ROUNDED_PRODUCT_INL_H_
#undef HUBZOO_OPS_ROUNDED_PRODUCT_INL_H_
#else
#define HUBZOO_OPS_ROUNDED_PRODUCT_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {

template <class V>
HWY_INLINE V Product(V a, V b) {
  V p = hwy::HWY_NAMESPACE::Mul(a, b);
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
#if HWY_TARGET <= HWY_AVX3
  asm("" : "+v"(p.raw));
#else
  asm("" : "+x"(p.raw));
#endif
#endif
  return p;
}

HWY_INLINE float ScalarProduct(float a, float b) {
  float p = a * b;
#if HWY_ARCH_X86
  asm("" : "+x"(p));
#endif
  return p;
}

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
