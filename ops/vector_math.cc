// Row kernels of ops/vector_math.h: scalar references and a Highway kernel
// compiled once per SIMD target and dispatched at run time.
#include "ops/vector_math.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#ifndef HUBZOO_OPS_VECTOR_MATH_CONSTANTS
#define HUBZOO_OPS_VECTOR_MATH_CONSTANTS
namespace hubzoo::gelu {
constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kP = 0.3275911f;
constexpr float kA1 = 0.254829592f, kA2 = -0.284496736f, kA3 = 1.421413741f;
constexpr float kA4 = -1.453152027f, kA5 = 1.061405429f;
// The tanh form (at::native GeluKernel, approximate="tanh"): sqrt(2 / pi), 0.044715.
constexpr float kTanhBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
constexpr float kTanhKappa = 0.044715f;
}  // namespace hubzoo::gelu
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/vector_math.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "hwy/contrib/math/math-inl.h"  // after highway.h

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V>
HWY_INLINE V Gelu(D d, V x) {
  using namespace gelu;
  const V one = hn::Set(d, 1.0f);
  const V z = hn::Mul(x, hn::Set(d, kSqrtHalf));
  const V t = hn::Div(one, hn::MulAdd(hn::Set(d, kP), hn::Abs(z), one));
  V r = hn::MulAdd(hn::Set(d, kA5), t, hn::Set(d, kA4));
  r = hn::MulAdd(r, t, hn::Set(d, kA3));
  r = hn::MulAdd(r, t, hn::Set(d, kA2));
  r = hn::MulAdd(r, t, hn::Set(d, kA1));
  const V e = hn::Exp(d, hn::Neg(hn::Mul(z, z)));
  const V erf = hn::CopySign(hn::NegMulAdd(hn::Mul(r, t), e, one), z);  // +-(1 - r t e)
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(one, erf));
}

// Applies fn to every full vector of x[0..n) and to the tail padded with `pad`.
template <class D, class Fn>
HWY_INLINE void ForEachVector(D d, float* HWY_RESTRICT x, int64_t n, float pad, Fn fn) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(fn(hn::LoadU(d, x + i)), d, x + i);
  if (i < n) {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    std::fill_n(buf, hn::MaxLanes(d), pad);
    std::memcpy(buf, x + i, (n - i) * sizeof(float));
    hn::Store(fn(hn::Load(d, buf)), d, buf);
    std::memcpy(x + i, buf, (n - i) * sizeof(float));
  }
}

// out[i] = fn(gate, up) over every full vector and the tail padded with zeros
// (the same arithmetic for every element). out may alias gate or up.
template <class D, class Fn>
HWY_INLINE void ForEachPair(D d, const float* gate, const float* up, int64_t n, float* out, Fn fn) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(fn(hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  }
  if (i < n) {
    HWY_ALIGN float g[hn::MaxLanes(d)] = {}, u[hn::MaxLanes(d)] = {};
    std::memcpy(g, gate + i, (n - i) * sizeof(float));
    std::memcpy(u, up + i, (n - i) * sizeof(float));
    hn::Store(fn(hn::Load(d, g), hn::Load(d, u)), d, g);
    std::memcpy(out + i, g, (n - i) * sizeof(float));
  }
}

void GeluErf(float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, x, n, 0.0f, [d](auto v) { return Gelu(d, v); });
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const V one = hn::Set(d, 1.0f);
  ForEachPair(d, gate, up, n, out, [&](V g, V u) HWY_ATTR {
    return hn::Mul(hn::Div(g, hn::Add(one, hn::Exp(d, hn::Neg(g)))), u);
  });
}

void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const V half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  const V beta = hn::Set(d, gelu::kTanhBeta), kappa = hn::Set(d, gelu::kTanhKappa);
  ForEachPair(d, gate, up, n, out, [&](V x, V u) HWY_ATTR {
    const V inner = hn::Mul(beta, hn::Add(x, hn::Mul(kappa, hn::Mul(hn::Mul(x, x), x))));
    return hn::Mul(hn::Mul(hn::Mul(half, x), hn::Add(one, hn::Tanh(d, inner))), u);
  });
}

void SoftmaxRow(float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  // Padding lanes hold -FLT_MAX: they never win the max and their exp is 0.
  V vmax = hn::Set(d, -FLT_MAX);
  ForEachVector(d, x, n, -FLT_MAX, [&](V v) {
    vmax = hn::Max(vmax, v);
    return v;
  });
  const V max = hn::Set(d, hn::GetLane(hn::MaxOfLanes(d, vmax)));
  V vsum = hn::Zero(d);  // lane j sums elements j, j + lanes, ... in order
  ForEachVector(d, x, n, -FLT_MAX, [&](V v) {
    const V e = hn::Exp(d, hn::Sub(v, max));
    vsum = hn::Add(vsum, e);
    return e;
  });
  const V sum = hn::Set(d, hn::GetLane(hn::SumOfLanes(d, vsum)));
  ForEachVector(d, x, n, 0.0f, [&](V v) { return hn::Div(v, sum); });
}

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(GeluErf);
HWY_EXPORT(SoftmaxRow);
HWY_EXPORT(SiluMul);
HWY_EXPORT(GeluTanhMul);

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(GeluTanhMul)(gate, up, n, out);
}

void gelu_tanh_mul_reference(const float* gate, const float* up, int64_t n, float* out) {
  using namespace gelu;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float inner = kTanhBeta * (x + kTanhKappa * (x * x * x));
    out[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SiluMul)(gate, up, n, out);
}

void silu_mul_reference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_erf(float* x, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(GeluErf)(x, n);
}

void softmax_row(float* x, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SoftmaxRow)(x, n);
}

void gelu_erf_reference(float* x, int64_t n) {
  using namespace gelu;
  for (int64_t i = 0; i < n; ++i) {
    const float z = x[i] * kSqrtHalf;
    const float t = 1.0f / std::fma(kP, std::fabs(z), 1.0f);
    float r = std::fma(kA5, t, kA4);
    r = std::fma(r, t, kA3);
    r = std::fma(r, t, kA2);
    r = std::fma(r, t, kA1);
    const float erf_abs = 1.0f - r * t * std::exp(-(z * z));
    x[i] = 0.5f * x[i] * (1.0f + std::copysign(erf_abs, z));
  }
}

void softmax_row_reference(float* x, int64_t n) {
  if (n <= 0) return;
  const float max = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - max));
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

}  // namespace hubzoo
#endif  // HWY_ONCE
