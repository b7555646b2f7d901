#include "ops/elementwise.h"

#include <cmath>

#include "base/error.h"
#include "ops/dot_axpy.h"

namespace hubzoo {
namespace {

// Fixed reduction order: lane j sums the elements i with i % 8 == j over whole
// blocks of 8, the lanes are combined as a fixed tree, and the tail is added in
// order. The order depends only on n; 8 lanes also let the compiler vectorise
// the loop without reassociating anything.
constexpr int kLanes = 8;

inline float combine_lanes(const float (&s)[kLanes]) {
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

float sum(const float* a, int64_t n) {
  float s[kLanes] = {};
  const int64_t blocked = n / kLanes * kLanes;
  for (int64_t i = 0; i < blocked; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) s[j] += a[i + j];
  }
  float total = combine_lanes(s);
  for (int64_t i = blocked; i < n; ++i) total += a[i];
  return total;
}

float sum_of_squared_deviations(const float* a, float mean, int64_t n) {
  float s[kLanes] = {};
  const int64_t blocked = n / kLanes * kLanes;
  for (int64_t i = 0; i < blocked; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float d = a[i + j] - mean;
      s[j] += d * d;
    }
  }
  float total = combine_lanes(s);
  for (int64_t i = blocked; i < n; ++i) {
    const float d = a[i] - mean;
    total += d * d;
  }
  return total;
}

}  // namespace

// SIMD with the scalar code's order and roundings (ops/dot_axpy.h): 61 of
// them per decode step of SmolLM2 were ~2% of the step as scalar loops.
void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* out) {
  if (n <= 0) return;
  const float variance = dot_simd(x, x, n) / static_cast<float>(n);
  const float inv_rms = 1.0f / std::sqrt(variance + eps);
  if (!weight) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms;
    return;
  }
  scale_mul_simd(weight, x, inv_rms, out, n);
}

void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t n,
                float* out) {
  if (n <= 0) return;
  const float count = static_cast<float>(n);
  const float mean = sum(x, n) / count;
  // Two passes: squared deviations from the mean, not E[x^2] - mean^2, which
  // cancels catastrophically for rows with a large mean.
  const float variance = sum_of_squared_deviations(x, mean, n) / count;
  const float inv_std = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) {
    float y = (x[i] - mean) * inv_std;
    if (weight) y *= weight[i];
    if (bias) y += bias[i];
    out[i] = y;
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  // std::fmax(max, x[i]) without its library call (it was 3% of a 512-token
  // prefill): a NaN element is skipped, a NaN max is replaced; same result.
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > max || std::isnan(max)) max = x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - max);
  const float total = sum(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] /= total;
}

int64_t argmax(const float* x, int64_t n) {
  if (n <= 0) throw InvalidArgument("argmax of an empty array");
  return argmax_simd(x, n);
}

int64_t argmax_reference(const float* x, int64_t n) {
  if (n <= 0) throw InvalidArgument("argmax of an empty array");
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return i;
    if (x[i] > x[best]) best = i;
  }
  return best;
}

// SIMD with the same order and roundings as dot_reference (ops/dot_axpy.h).
float dot(const float* a, const float* b, int64_t n) { return dot_simd(a, b, n); }

void axpy(float a, const float* x, float* y, int64_t n) { axpy_simd(a, x, y, n); }

}  // namespace hubzoo
