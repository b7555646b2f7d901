// Highway kernels of ops/dot_axpy.h and their scalar references (and argmax).
//
// Every product is rounded on its own, as in the scalar code
// (ops/rounded_product-inl.h: GCC would otherwise contract it with the
// following add into an FMA). Scalar leftovers (tails, the lane combination)
// run outside the per-target code, compiled for the baseline ISA, exactly as
// the references.
#include "ops/dot_axpy.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/dot_axpy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/rounded_product-inl.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t DotAxpyTarget() { return HWY_TARGET; }

// s[0..8) = per-lane sums over the `blocks` whole blocks of 8.
void DotLanes(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t blocks,
              float* HWY_RESTRICT s) {
  const hn::CappedTag<float, 8> d;
  constexpr size_t kN = hn::MaxLanes(d);
  static_assert(8 % kN == 0, "lanes must divide 8");
  constexpr size_t kVecs = 8 / kN;
  using V = hn::Vec<decltype(d)>;
  V acc[kVecs];
  for (size_t v = 0; v < kVecs; ++v) acc[v] = hn::Zero(d);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const float* pa = a + blk * 8;
    const float* pb = b + blk * 8;
    for (size_t v = 0; v < kVecs; ++v) {
      acc[v] = hn::Add(acc[v], Product(hn::LoadU(d, pa + v * kN), hn::LoadU(d, pb + v * kN)));
    }
  }
  for (size_t v = 0; v < kVecs; ++v) hn::StoreU(acc[v], d, s + v * kN);
}

// y[i] += a * x[i] over whole vectors; returns how many elements it did.
int64_t AxpyVectors(float a, const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto av = hn::Set(d, a);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(d, y + i), Product(av, hn::LoadU(d, x + i))), d, y + i);
  }
  return i;
}

// out[i] = w[i] * (x[i] * s) over whole vectors (two products, each rounded:
// nothing to fuse); returns how many elements it did.
int64_t ScaleVectors(const float* HWY_RESTRICT w, const float* HWY_RESTRICT x, float s,
                     float* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto sv = hn::Set(d, s);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(d, w + i), hn::Mul(hn::LoadU(d, x + i), sv)), d, out + i);
  }
  return i;
}

// argmax_simd: whole vectors first (the largest value, and whether any is
// NaN), then the first element equal to that value; a NaN anywhere sends the
// caller to the first NaN instead.
int64_t ArgmaxVectors(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  float best = x[0];
  bool nan = best != best;
  int64_t i = 0;
  if (n >= lanes) {
    auto m = hn::LoadU(d, x);
    auto bad = hn::IsNaN(m);
    for (i = lanes; i + lanes <= n; i += lanes) {
      const auto v = hn::LoadU(d, x + i);
      bad = hn::Or(bad, hn::IsNaN(v));
      m = hn::Max(m, v);
    }
    nan = !hn::AllFalse(d, bad);
    // The lanes' largest in scalar code: Highway's emulated MaxOfLanes starts
    // from -FLT_MAX, so a row of -inf would have no element equal to it.
    HWY_ALIGN float lane[hn::MaxLanes(d)];
    hn::Store(m, d, lane);
    best = lane[0];
    for (int64_t j = 1; j < lanes; ++j) best = lane[j] > best ? lane[j] : best;
  }
  for (; i < n; ++i) {
    nan |= x[i] != x[i];
    best = x[i] > best ? x[i] : best;
  }
  if (nan) {
    for (i = 0; i < n && x[i] == x[i];) ++i;
    return i;
  }
  // The first index holding the maximum (== also matches -0.0 to +0.0: the
  // first of either, as a scan with > keeps the first).
  const auto want = hn::Set(d, best);
  for (i = 0; i + lanes <= n; i += lanes) {
    const intptr_t lane = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, x + i), want));
    if (lane >= 0) return i + lane;
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // not reached: best is one of x's values
}

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(DotAxpyTarget);
HWY_EXPORT(DotLanes);
HWY_EXPORT(AxpyVectors);
HWY_EXPORT(ArgmaxVectors);
HWY_EXPORT(ScaleVectors);

namespace {
inline float combine_lanes(const float (&s)[8]) {
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}
}  // namespace

float dot_simd(const float* a, const float* b, int64_t n) {
  float s[8] = {};
  const int64_t blocked = n / 8 * 8;
  if (blocked > 0) HWY_DYNAMIC_DISPATCH(DotLanes)(a, b, blocked / 8, s);
  float total = combine_lanes(s);
  for (int64_t i = blocked; i < n; ++i) total += a[i] * b[i];
  return total;
}

float dot_reference(const float* a, const float* b, int64_t n) {
  float s[8] = {};
  const int64_t blocked = n / 8 * 8;
  for (int64_t i = 0; i < blocked; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  float total = combine_lanes(s);
  for (int64_t i = blocked; i < n; ++i) total += a[i] * b[i];
  return total;
}

void axpy_simd(float a, const float* x, float* y, int64_t n) {
  const int64_t done = n > 0 ? HWY_DYNAMIC_DISPATCH(AxpyVectors)(a, x, y, n) : 0;
  for (int64_t i = done; i < n; ++i) y[i] += a * x[i];
}

void axpy_reference(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void scale_mul_simd(const float* w, const float* x, float s, float* out, int64_t n) {
  const int64_t done = n > 0 ? HWY_DYNAMIC_DISPATCH(ScaleVectors)(w, x, s, out, n) : 0;
  for (int64_t i = done; i < n; ++i) out[i] = w[i] * (x[i] * s);
}

void scale_mul_reference(const float* w, const float* x, float s, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * s);
}

int64_t argmax_simd(const float* x, int64_t n) {
  return n > 0 ? HWY_DYNAMIC_DISPATCH(ArgmaxVectors)(x, n) : 0;
}

const char* dot_axpy_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(DotAxpyTarget)());
}

}  // namespace hubzoo
#endif  // HWY_ONCE
