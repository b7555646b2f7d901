#include "ops/elementwise.h"
#include "ops/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"

namespace hubzoo {
namespace {

std::vector<float> random_vector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

constexpr int64_t kSizes[] = {1, 2, 7, 8, 9, 31, 64, 100, 576, 1537};

TEST(Elementwise, RmsNormMatchesDouble) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, 1, 3.0f);
    auto w = random_vector(n, 2, 0.1f);
    for (auto& v : w) v += 1.0f;
    const float eps = 1e-5f;
    std::vector<float> out(n);
    rms_norm(x.data(), w.data(), eps, n, out.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(x[i]) * inv * w[i];
      EXPECT_NEAR(out[i], want, 2e-6 * std::abs(want) + 1e-7) << "n=" << n << " i=" << i;
    }
    // In place gives the same bits.
    auto y = x;
    rms_norm(y.data(), w.data(), eps, n, y.data());
    EXPECT_EQ(0, std::memcmp(y.data(), out.data(), n * sizeof(float)));
  }
}

// x = {1, 2, 3, 6}: mean 3, squared deviations {4, 1, 0, 9} -> variance 3.5.
TEST(Elementwise, LayerNormHandComputed) {
  const float x[] = {1.0f, 2.0f, 3.0f, 6.0f};
  const float w[] = {1.0f, 2.0f, -1.0f, 0.5f};
  const float b[] = {0.5f, 0.0f, 1.0f, -2.0f};
  const float eps = 0.5f;                             // variance + eps = 4: inv_std = 0.5 exactly
  const float normed[] = {-1.0f, -0.5f, 0.0f, 1.5f};  // (x - 3) / 2
  float out[4];
  layer_norm(x, w, b, eps, 4, out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], normed[i] * w[i] + b[i]) << i;
  layer_norm(x, nullptr, nullptr, eps, 4, out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], normed[i]) << i;
  layer_norm(x, w, nullptr, eps, 4, out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], normed[i] * w[i]) << i;
  layer_norm(x, nullptr, b, eps, 4, out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], normed[i] + b[i]) << i;
  // In place.
  float y[] = {1.0f, 2.0f, 3.0f, 6.0f};
  layer_norm(y, w, b, eps, 4, y);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], normed[i] * w[i] + b[i]) << i;
  // A constant row normalises to zero (variance 0, no NaN); n = 0 writes nothing.
  const float c[] = {7.0f, 7.0f, 7.0f};
  layer_norm(c, nullptr, b, 1e-5f, 3, out);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], b[i]) << i;
  out[0] = 42.0f;
  layer_norm(nullptr, nullptr, nullptr, 1e-5f, 0, out);
  EXPECT_EQ(out[0], 42.0f);
}

// Two-pass statistics stay accurate on rows with a large mean, where
// E[x^2] - mean^2 in fp32 would cancel to noise.
TEST(Elementwise, LayerNormMatchesDoubleWithLargeMean) {
  for (int64_t n : kSizes) {
    for (float offset : {0.0f, 1000.0f}) {
      auto x = random_vector(n, 12, 2.0f);
      for (auto& v : x) v += offset;
      auto w = random_vector(n, 13, 0.1f);
      for (auto& v : w) v += 1.0f;
      const auto b = random_vector(n, 14, 0.1f);
      const float eps = 1e-5f;
      std::vector<float> out(n);
      layer_norm(x.data(), w.data(), b.data(), eps, n, out.data());
      double mean = 0, var = 0;
      for (float v : x) mean += v;
      mean /= n;
      for (float v : x) var += (v - mean) * (v - mean);
      var /= n;
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < n; ++i) {
        const double normed = (x[i] - mean) * inv;
        const double want = normed * w[i] + b[i];
        // fp32 rounding of x - mean scales with |x| / std (~500 at offset 1000).
        const double tol =
            2e-6 * (std::abs(normed * w[i]) + std::abs(b[i])) + 1e-7 * (1.0 + std::abs(x[i]) * inv);
        EXPECT_NEAR(out[i], want, tol) << "n=" << n << " offset=" << offset << " i=" << i;
      }
    }
  }
}

TEST(Elementwise, SiluMulMatchesDouble) {
  for (int64_t n : kSizes) {
    const auto g = random_vector(n, 3, 4.0f);
    const auto u = random_vector(n, 4);
    std::vector<float> out(n);
    silu_mul(g.data(), u.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
      EXPECT_NEAR(out[i], want, 1e-6 * std::abs(want) + 1e-7);
    }
  }
  // Large |g| neither overflows to NaN nor loses the linear part.
  const float g[] = {-100.0f, 100.0f, 0.0f};
  const float u[] = {1.0f, 1.0f, 1.0f};
  float out[3];
  silu_mul(g, u, 3, out);
  EXPECT_NEAR(out[0], 0.0f, 1e-30f);
  EXPECT_EQ(out[1], 100.0f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(Elementwise, AddAndAxpy) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, 5);
    const auto y0 = random_vector(n, 6);
    auto y = y0;
    add_inplace(y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], y0[i] + x[i]);
    y = y0;
    axpy(0.37f, x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], y0[i] + 0.37 * x[i], 1e-6);
  }
}

TEST(Elementwise, SoftmaxMatchesDouble) {
  for (int64_t n : kSizes) {
    auto x = random_vector(n, 7, 5.0f);
    x[0] += 80.0f;  // large logits must not overflow
    const auto orig = x;
    softmax_inplace(x.data(), n);
    double max = orig[0], total = 0;
    for (float v : orig) max = std::max(max, double(v));
    for (float v : orig) total += std::exp(v - max);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(orig[i] - max) / total;
      EXPECT_NEAR(x[i], want, 2e-6 * want + 1e-12) << "n=" << n << " i=" << i;
      sum += x[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(Elementwise, ArgmaxFirstMaximum) {
  const float x[] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  EXPECT_EQ(argmax(x, 5), 1);
  EXPECT_EQ(argmax(x, 1), 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float y[] = {1.0f, 9.0f, nan, 20.0f};
  EXPECT_EQ(argmax(y, 4), 2);  // torch.argmax treats NaN as the maximum
  const float z[] = {-5.0f, -1.0f, -1.0f};
  EXPECT_EQ(argmax(z, 3), 1);
  EXPECT_THROW(argmax(x, 0), InvalidArgument);
}

TEST(Elementwise, DotMatchesDouble) {
  for (int64_t n : kSizes) {
    const auto a = random_vector(n, 8);
    const auto b = random_vector(n, 9);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) want += double(a[i]) * b[i], mag += std::abs(a[i] * b[i]);
    EXPECT_NEAR(dot(a.data(), b.data(), n), want, 1e-6 * mag + 1e-7) << "n=" << n;
  }
  EXPECT_EQ(dot(nullptr, nullptr, 0), 0.0f);
}

// The reductions depend only on the values: the same row copied anywhere (other
// alignment, neighbours) gives the same bits.
TEST(Elementwise, ReductionsIndependentOfPlacement) {
  const int64_t n = 577;
  const auto x = random_vector(n, 10, 2.0f);
  const auto w = random_vector(n, 11);
  std::vector<float> buf(n + 13, 123.0f);
  std::copy(x.begin(), x.end(), buf.begin() + 13);
  EXPECT_EQ(dot(x.data(), w.data(), n), dot(buf.data() + 13, w.data(), n));
  std::vector<float> a(n), b(n);
  rms_norm(x.data(), w.data(), 1e-6f, n, a.data());
  rms_norm(buf.data() + 13, w.data(), 1e-6f, n, b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)));
  std::copy(x.begin(), x.end(), a.begin());
  softmax_inplace(a.data(), n);
  softmax_inplace(buf.data() + 13, n);
  EXPECT_EQ(0, std::memcmp(a.data(), buf.data() + 13, n * sizeof(float)));
  std::copy(x.begin(), x.end(), buf.begin() + 13);
  layer_norm(x.data(), w.data(), w.data(), 1e-5f, n, a.data());
  layer_norm(buf.data() + 13, w.data(), w.data(), 1e-5f, n, b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)));
}

}  // namespace
}  // namespace hubzoo
