#include "layers/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"

namespace hubzoo {
namespace {

JsonObject config(const std::string& text) {
  return JsonObject(nlohmann::json::parse(text), "config.json");
}

TEST(RopeParams, DefaultsWithoutScaling) {
  RopeParams p = parse_rope_params(config(R"({"rope_theta": 500000.0})"));
  EXPECT_EQ(p.type, "default");
  EXPECT_EQ(p.theta, 500000.0);
}

TEST(RopeParams, Transformers4Spelling) {
  RopeParams p = parse_rope_params(config(R"({"rope_theta": 1e4, "max_position_embeddings": 4096,
    "rope_scaling": {"type": "linear", "factor": 2.0}})"));
  EXPECT_EQ(p.type, "linear");
  EXPECT_EQ(p.factor, 2.0);
}

TEST(RopeParams, Transformers5Spelling) {
  RopeParams p = parse_rope_params(config(R"({"rope_parameters": {"rope_type": "llama3",
    "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}})"));
  EXPECT_EQ(p.type, "llama3");
  EXPECT_EQ(p.theta, 5e5);
  EXPECT_EQ(p.original_max_position_embeddings, 8192);
}

TEST(RopeParams, YarnDefaultsFollowTransformers) {
  RopeParams p = parse_rope_params(config(R"({"max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
    "original_max_position_embeddings": 1024}})"));
  EXPECT_EQ(p.beta_fast, 32.0);
  EXPECT_EQ(p.beta_slow, 1.0);
  Rope rope(p, 64, 4096);
  // attention_factor = 0.1 * ln(factor) + 1
  EXPECT_FLOAT_EQ(rope.attention_scaling(), static_cast<float>(0.1 * std::log(4.0) + 1.0));
}

TEST(RopeParams, UnsupportedTypeIsNamed) {
  try {
    parse_rope_params(config(R"({"rope_scaling": {"type": "dynamic", "factor": 2.0}})"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dynamic"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

TEST(RopeParams, UnknownKeyIsNamed) {
  try {
    parse_rope_params(config(R"({"rope_scaling": {"rope_type": "linear", "factor": 2.0,
      "short_factor": [1.0]}})"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("short_factor"), std::string::npos) << e.what();
  }
}

TEST(RopeParams, MissingRequiredField) {
  EXPECT_THROW(parse_rope_params(config(R"({"rope_scaling": {"rope_type": "linear"}})")),
               ConfigError);
}

TEST(Rope, DefaultInverseFrequencies) {
  RopeParams p;
  p.theta = 10000.0;
  Rope rope(p, 8, 128);
  ASSERT_EQ(rope.inv_freq().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(rope.inv_freq()[i], 1.0 / std::pow(10000.0, 2.0 * i / 8), 1e-7);
  }
}

TEST(Rope, LinearDividesFrequencies) {
  RopeParams base, linear;
  linear.type = "linear";
  linear.factor = 4.0;
  Rope a(base, 16, 128), b(linear, 16, 128);
  for (size_t i = 0; i < a.inv_freq().size(); ++i) {
    EXPECT_FLOAT_EQ(b.inv_freq()[i], a.inv_freq()[i] / 4.0f);
  }
}

TEST(Rope, RotationPreservesNormAndPositionZeroIsIdentity) {
  RopeParams p;
  Rope rope(p, 8, 128);
  float x[16] = {1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, -5, -6, -7, -8};
  float y[16];
  std::copy(x, x + 16, y);
  rope.apply(0, y, 2);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(x[i], y[i]);
  rope.apply(37, y, 1, y + 8, 1);
  double nx = 0, ny = 0;
  for (int i = 0; i < 8; ++i) nx += x[i] * x[i], ny += y[i] * y[i];
  EXPECT_NEAR(nx, ny, 1e-3);
  // rotate_half pairs (i, i + d/2): pair 0 is (x[0], x[4]) rotated by angle 37 * inv_freq[0].
  const double angle = 37.0;
  EXPECT_NEAR(y[0], x[0] * std::cos(angle) - x[4] * std::sin(angle), 1e-4);
  EXPECT_NEAR(y[4], x[4] * std::cos(angle) + x[0] * std::sin(angle), 1e-4);
}

}  // namespace
}  // namespace hubzoo
