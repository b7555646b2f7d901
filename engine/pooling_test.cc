#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/test_util.h"
#include "engine/embedder.h"
#include "ops/bf16.h"

namespace hubzoo {
namespace {

using test_util::expect_error;

// Three tokens of width 2: rows (1, -2), (3, 4), (-5, 6).
const std::vector<float> kH = {1, -2, 3, 4, -5, 6};

std::vector<float> pool(std::vector<PoolingMode> modes, int64_t skip = 0, bool bf16 = false) {
  std::vector<float> out(modes.size() * 2, 123.0f);
  pool_sequence(kH.data(), 3, 2, skip, modes, bf16, out.data());
  return out;
}

TEST(Pooling, EachMode) {
  EXPECT_EQ(pool({PoolingMode::kCls}), (std::vector<float>{1, -2}));
  EXPECT_EQ(pool({PoolingMode::kLastToken}), (std::vector<float>{-5, 6}));
  EXPECT_EQ(pool({PoolingMode::kMax}), (std::vector<float>{3, 6}));
  EXPECT_EQ(pool({PoolingMode::kMean}), (std::vector<float>{-1.0f / 3, 8.0f / 3}));
  const float s3 = std::sqrt(3.0f);
  EXPECT_EQ(pool({PoolingMode::kMeanSqrtLen}), (std::vector<float>{-1 / s3, 8 / s3}));
  // weights 1, 2, 3 over 6
  EXPECT_EQ(pool({PoolingMode::kWeightedMean}),
            (std::vector<float>{(1 + 6 - 15) / 6.0f, (-2 + 8 + 18) / 6.0f}));
}

TEST(Pooling, ModesConcatenateInOrder) {
  EXPECT_EQ(pool({PoolingMode::kMax, PoolingMode::kCls}), (std::vector<float>{3, 6, 1, -2}));
}

TEST(Pooling, SkippedPromptTokens) {
  // Token 0 is the prompt: cls takes token 1, weights keep their positions (2, 3).
  EXPECT_EQ(pool({PoolingMode::kCls}, 1), (std::vector<float>{3, 4}));
  EXPECT_EQ(pool({PoolingMode::kMean}, 1), (std::vector<float>{-1, 5}));
  EXPECT_EQ(pool({PoolingMode::kWeightedMean}, 1),
            (std::vector<float>{(6 - 15) / 5.0f, (8 + 18) / 5.0f}));
  EXPECT_EQ(pool({PoolingMode::kMax}, 1), (std::vector<float>{3, 6}));
}

TEST(Pooling, EverythingSkippedMatchesSentenceTransformers) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(pool({PoolingMode::kCls}, 5), (std::vector<float>{1, -2}));  // argmax of zeros: 0
  EXPECT_EQ(pool({PoolingMode::kLastToken}, 3), (std::vector<float>{0, 0}));
  EXPECT_EQ(pool({PoolingMode::kMean}, 3), (std::vector<float>{0, 0}));
  EXPECT_EQ(pool({PoolingMode::kWeightedMean}, 3), (std::vector<float>{0, 0}));
  EXPECT_EQ(pool({PoolingMode::kMax}, 3), (std::vector<float>{-inf, -inf}));
}

TEST(Pooling, Bf16RoundsAveragedModes) {
  const auto out = pool({PoolingMode::kMean}, 0, /*bf16=*/true);
  EXPECT_EQ(out[0], round_bf16(-1.0f / 3));
  EXPECT_EQ(out[1], round_bf16(8.0f / 3));
}

PoolingConfig parse(const nlohmann::json& j) { return PoolingConfig::parse(JsonObject(j, "cfg")); }

TEST(PoolingConfig, NewAndLegacyFormats) {
  auto p = parse({{"embedding_dimension", 8}, {"pooling_mode", "lasttoken"}});
  EXPECT_EQ(p.modes, std::vector<PoolingMode>{PoolingMode::kLastToken});
  EXPECT_TRUE(p.include_prompt);
  p = parse({{"embedding_dimension", 8},
             {"pooling_mode", {"weightedmean", "cls"}},
             {"include_prompt", false}});
  EXPECT_EQ(p.modes, (std::vector<PoolingMode>{PoolingMode::kWeightedMean, PoolingMode::kCls}));
  EXPECT_FALSE(p.include_prompt);
  // Legacy booleans concatenate in sentence-transformers' fixed order.
  p = parse({{"word_embedding_dimension", 8},
             {"pooling_mode_mean_tokens", true},
             {"pooling_mode_cls_token", true}});
  EXPECT_EQ(p.embedding_dimension, 8);
  EXPECT_EQ(p.modes, (std::vector<PoolingMode>{PoolingMode::kCls, PoolingMode::kMean}));
  p = parse({{"word_embedding_dimension", 8}, {"pooling_mode_mean_tokens", false}});
  EXPECT_EQ(p.modes, std::vector<PoolingMode>{PoolingMode::kMean});  // none set: mean
}

TEST(PoolingConfig, Errors) {
  expect_error<ConfigError>(
      [] {
        parse({{"embedding_dimension", 8}, {"pooling_mode", "median"}});
      },
      {"cfg", "median", "lasttoken"});
  expect_error<ConfigError>(
      [] {
        parse({{"pooling_mode", "mean"}});
      },
      {"word_embedding_dimension"});
  expect_error<ConfigError>(
      [] {
        parse({{"embedding_dimension", 8}, {"pooling_mode", 3}});
      },
      {"pooling_mode"});
}

}  // namespace
}  // namespace hubzoo
