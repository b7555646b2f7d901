#include "ops/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "hwy/targets.h"

namespace hubzoo {
namespace {

std::vector<float> inputs(int64_t n, float stddev = 3.0f) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

// Runs body once per SIMD target this machine and build offer.
template <typename Body>
void every_target(Body body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    body();
    hwy::SetSupportedTargetsForTest(0);
  }
}

// erf-exact GELU in double.
double gelu_exact(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(Gelu, EveryTargetMatchesTheReferenceAndExactGelu) {
  std::vector<float> x = inputs(1003);  // not a multiple of any vector length
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 30.0f, x[3] = -30.0f, x[4] = 1e-30f;
  std::vector<float> ref = x;
  gelu_erf_reference(ref.data(), static_cast<int64_t>(ref.size()));
  every_target([&] {
    std::vector<float> y = x;
    gelu_erf(y.data(), static_cast<int64_t>(y.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      // The formula's own error (1.5e-7 in erf) plus a few ulps of exp.
      EXPECT_NEAR(y[i], ref[i], 1e-6 * std::max(1.0f, std::fabs(ref[i]))) << x[i];
      const double exact = gelu_exact(x[i]);
      EXPECT_NEAR(y[i], exact, 2e-6 * std::max(1.0, std::fabs(exact))) << x[i];
    }
  });
}

TEST(SiluMul, EveryTargetMatchesTheReferenceAndPositionDoesNotMatter) {
  const std::vector<float> g = inputs(203, 4.0f), u = inputs(203, 1.0f);
  std::vector<float> ref(203);
  silu_mul_reference(g.data(), u.data(), 203, ref.data());
  every_target([&] {
    std::vector<float> y(203);
    silu_mul(g.data(), u.data(), 203, y.data());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(y[i], ref[i], 4e-7f * std::fabs(ref[i]) + 1e-30f) << g[i];
    }
    for (int64_t start = 1; start < 40; start += 7) {  // a tail element is a vector element
      std::vector<float> part(203 - start);
      silu_mul(g.data() + start, u.data() + start, 203 - start, part.data());
      for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(part[i], y[start + i]);
    }
  });
}

// GELU's tanh form in double.
double gelu_tanh_exact(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(GeluTanhMul, EveryTargetMatchesTheReferenceAndPositionDoesNotMatter) {
  std::vector<float> g = inputs(203, 4.0f);
  const std::vector<float> u = inputs(203, 1.0f);
  g[0] = 0.0f, g[1] = -0.0f, g[2] = 30.0f, g[3] = -30.0f, g[4] = 1e-30f, g[5] = 1e20f;
  std::vector<float> ref(203);
  gelu_tanh_mul_reference(g.data(), u.data(), 203, ref.data());
  every_target([&] {
    std::vector<float> y(203);
    gelu_tanh_mul(g.data(), u.data(), 203, y.data());
    for (size_t i = 0; i < y.size(); ++i) {
      // For x < 0, 1 + tanh cancels in float (in torch's kernel too): an
      // absolute error of a few ulps of 1 times 0.5 |x u|.
      const double cancel = 3e-7 * std::fabs(static_cast<double>(g[i]) * u[i]);
      EXPECT_NEAR(y[i], ref[i], 1e-6 * std::fabs(ref[i]) + cancel + 1e-30) << g[i];
      const double exact = gelu_tanh_exact(g[i]) * u[i];
      EXPECT_NEAR(y[i], exact, 2e-6 * std::fabs(exact) + cancel + 1e-30) << g[i];
    }
    for (int64_t start = 1; start < 40; start += 7) {  // a tail element is a vector element
      std::vector<float> part(203 - start);
      gelu_tanh_mul(g.data() + start, u.data() + start, 203 - start, part.data());
      for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(part[i], y[start + i]);
    }
  });
}

TEST(Softmax, EveryTargetMatchesTheReference) {
  for (int64_t n : {1, 2, 7, 16, 33, 250}) {
    SCOPED_TRACE(n);
    std::vector<float> x = inputs(n, 4.0f);
    std::vector<float> ref = x;
    softmax_row_reference(ref.data(), n);
    every_target([&] {
      std::vector<float> y = x;
      softmax_row(y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], ref[i], 2e-6f * ref[i] + 1e-9f);
      EXPECT_NEAR(std::accumulate(y.begin(), y.end(), 0.0), 1.0, 1e-5);
    });
  }
  std::vector<float> big = {1e30f, -1e30f, 0.0f};  // no overflow, exact extremes
  softmax_row(big.data(), 3);
  EXPECT_EQ(big[0], 1.0f);
  EXPECT_EQ(big[1], 0.0f);
}

TEST(VectorMath, ElementsDoNotDependOnTheirPosition) {
  // GELU's tail goes through the vector path: a value gives the same bits at any offset.
  const std::vector<float> x = inputs(64);
  std::vector<float> whole = x;
  gelu_erf(whole.data(), 64);
  for (int64_t start = 0; start < 64; start += 5) {
    std::vector<float> part(x.begin() + start, x.end());
    gelu_erf(part.data(), static_cast<int64_t>(part.size()));
    for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], whole[start + i]);
  }
  // A softmax row gives the same bits wherever it sits in memory.
  std::vector<float> row = inputs(37), shifted(40, 0.0f);
  std::copy(row.begin(), row.end(), shifted.begin() + 3);
  softmax_row(row.data(), 37);
  softmax_row(shifted.data() + 3, 37);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(row[i], shifted[i + 3]);
}

}  // namespace
}  // namespace hubzoo
