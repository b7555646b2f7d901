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

TEST(Sampler, PenaltiesAndBiasFollowTheirDefinitions) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{4, 10.0f}};
  Sampler s(p);
  s.set_prompt({0, 2});
  s.accept(3);
  s.accept(3);
  auto l = logits();  // {0.1, 2.0, -1.0, 1.9, 0.5, 1.0}
  s.process(l.data(), 6);
  EXPECT_FLOAT_EQ(l[0], 0.05f);                      // prompt token: / 2
  EXPECT_FLOAT_EQ(l[1], 2.0f);                       // unseen
  EXPECT_FLOAT_EQ(l[2], -2.0f);                      // negative: * 2
  EXPECT_FLOAT_EQ(l[3], 1.9f / 2.0f - 0.5f - 0.5f);  // generated twice
  EXPECT_FLOAT_EQ(l[4], 10.5f);                      // biased
  // Greedy applies bias and penalties: token 4 wins.
  auto l2 = logits();
  EXPECT_EQ(s.sample(l2.data(), 6), 4);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // p(i) / p(max) = exp(l_i - 2.0): with min_p 0.5 only 2.0 and 1.9 survive.
  SamplingParams p{.temperature = 1.0f, .min_p = 0.5f};
  auto l = logits();
  Sampler(p).process(l.data(), 6);
  for (int i : {0, 2, 4, 5}) EXPECT_TRUE(std::isinf(l[i])) << i;
  EXPECT_FLOAT_EQ(l[1], 2.0f);
  EXPECT_FLOAT_EQ(l[3], 1.9f);
}

TEST(Sampler, TopKKeepsTies) {
  // transformers keeps every token reaching the k-th value.
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 2.0f, 0.0f};
  Sampler({.temperature = 1.0f, .top_k = 2}).process(l.data(), 5);
  EXPECT_TRUE(std::isinf(l[0]));
  EXPECT_FALSE(std::isinf(l[2]));
  EXPECT_FALSE(std::isinf(l[3]));
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogits) {
  auto l = logits();
  const Logprobs lp = compute_logprobs(l.data(), 6, 3, 2);
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  EXPECT_NEAR(lp.chosen.logprob, 1.9 - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].id, 1);
  EXPECT_EQ(lp.top[1].id, 3);
  EXPECT_NEAR(lp.top[0].logprob, 2.0 - std::log(z), 1e-6);
}

TEST(Sampler, NewParametersAreValidated) {
  EXPECT_THROW(validate({.min_p = 1.5f}), InvalidArgument);
  EXPECT_THROW(validate({.repetition_penalty = 0.0f}), InvalidArgument);
  EXPECT_THROW(validate({.presence_penalty = 3.0f}), InvalidArgument);
  EXPECT_THROW(validate({.frequency_penalty = -2.5f}), InvalidArgument);
  EXPECT_THROW(validate({.logit_bias = {{1, 200.0f}}}), InvalidArgument);
  EXPECT_THROW(validate({.logit_bias = {{10, 1.0f}}}, 6), InvalidArgument);
  EXPECT_NO_THROW(validate({.logit_bias = {{5, -100.0f}}}, 6));
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
