#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"

namespace hubzoo {
namespace {

std::vector<float> logits() { return {0.1f, 2.0f, -1.0f, 1.9f, 0.5f, 1.0f}; }

int64_t draw(SamplingParams p) {
  auto l = logits();
  return Sampler(p).sample(l.data(), static_cast<int64_t>(l.size()));
}

TEST(Sampler, GreedyIsArgmax) { EXPECT_EQ(draw({}), 1); }

TEST(Sampler, TopKOneIsGreedy) {
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(draw({1.0f, 1, 1.0f, seed}), 1);
}

TEST(Sampler, TinyTopPIsGreedy) {
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(draw({1.0f, 0, 1e-6f, seed}), 1);
}

TEST(Sampler, TopKTwoOnlyDrawsTheTwoBest) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const int64_t t = draw({1.0f, 2, 1.0f, seed});
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(Sampler, SameSeedSameStreamDifferentSeedsDiffer) {
  SamplingParams p{1.5f, 0, 1.0f, 42};
  Sampler a(p), b(p), c({1.5f, 0, 1.0f, 43});
  std::vector<int64_t> ta, tb, tc;
  for (int i = 0; i < 64; ++i) {
    auto l1 = logits(), l2 = logits(), l3 = logits();
    ta.push_back(a.sample(l1.data(), 6));
    tb.push_back(b.sample(l2.data(), 6));
    tc.push_back(c.sample(l3.data(), 6));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  // p(1) / p(3) = exp(2.0 - 1.9) at temperature 1 with top_k 2.
  Sampler s({1.0f, 2, 1.0f, 7});
  int n1 = 0, n3 = 0;
  for (int i = 0; i < 20000; ++i) {
    auto l = logits();
    (s.sample(l.data(), 6) == 1 ? n1 : n3)++;
  }
  EXPECT_NEAR(static_cast<double>(n1) / n3, std::exp(0.1), 0.05);
}

TEST(Sampler, InvalidParametersAreNamed) {
  EXPECT_THROW(validate({-1.0f, 0, 1.0f, 0}), InvalidArgument);
  EXPECT_THROW(validate({1.0f, -3, 1.0f, 0}), InvalidArgument);
  EXPECT_THROW(validate({1.0f, 0, 0.0f, 0}), InvalidArgument);
  EXPECT_THROW(validate({1.0f, 0, 1.5f, 0}), InvalidArgument);
  try {
    validate({1.0f, 0, 2.0f, 0});
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos);
  }
}

TEST(Rng, UniformInUnitInterval) {
  Rng r(1);
  for (int i = 0; i < 1000; ++i) {
    const double u = r.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace hubzoo
