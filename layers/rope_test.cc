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

// Phi-3 style: longrope with 3/4 of head_dim 16 rotating (6 factors each).
const char* kLongrope = R"({"max_position_embeddings": 1024,
  "original_max_position_embeddings": 64, "rope_parameters": {"rope_type": "longrope",
  "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
  "short_factor": [1.0, 1.05, 1.1, 1.3, 1.6, 2.0],
  "long_factor": [1.0, 1.4, 2.5, 4.0, 7.0, 11.0]}})";

RopeParseOptions phi3_options() {
  RopeParseOptions o;
  o.partial_rotary = true;
  o.longrope = true;
  return o;
}

TEST(RopeParams, LongropeOnlyWhereTheFamilyTakesIt) {
  try {
    parse_rope_params(config(kLongrope));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("longrope"), std::string::npos) << e.what();
  }
  // Phi3Config renames its older spellings su and yarn to longrope.
  const RopeParams su = parse_rope_params(
      config(R"({"rope_scaling": {"type": "su", "short_factor": [1.0], "long_factor": [2.0]}})"),
      phi3_options());
  EXPECT_EQ(su.type, "longrope");
}

TEST(RopeParams, PartialRotaryOnlyWhereTheFamilyTakesIt) {
  EXPECT_THROW(parse_rope_params(config(R"({"partial_rotary_factor": 0.5})")), ConfigError);
  const RopeParams p =
      parse_rope_params(config(R"({"partial_rotary_factor": 0.5})"), phi3_options());
  EXPECT_EQ(p.partial_rotary_factor, 0.5);
  EXPECT_THROW(parse_rope_params(config(R"({"partial_rotary_factor": 1.5})"), phi3_options()),
               ConfigError);
}

TEST(Rope, LongropeShortAndLongFactors) {
  const RopeParams p = parse_rope_params(config(kLongrope), phi3_options());
  EXPECT_EQ(p.factor, 16.0);  // max_position_embeddings / original
  Rope rope(p, 16, 1024);
  EXPECT_EQ(rope.rotary_dim(), 12);
  EXPECT_EQ(rope.long_after(), 64);
  EXPECT_FLOAT_EQ(rope.attention_scaling(),
                  static_cast<float>(std::sqrt(1 + std::log(16.0) / std::log(64.0))));
  ASSERT_EQ(rope.inv_freq().size(), 6u);
  for (int i = 0; i < 6; ++i) {
    const double base = std::pow(10000.0, 2.0 * i / 12);
    EXPECT_NEAR(rope.inv_freq()[i], 1.0 / (p.short_factor[i] * base), 1e-7);
  }
  // Pair (0, 6) of a head at position 5, long factors: angle 5 / (1.0 * 1), scaled.
  float v[16], w[16];
  for (int i = 0; i < 16; ++i) v[i] = w[i] = 0.1f * static_cast<float>(i + 1);
  rope.apply(5, v, 1, nullptr, 0, false, /*long_factors=*/true);
  const double s = rope.attention_scaling();
  EXPECT_NEAR(v[0], s * (w[0] * std::cos(5.0) - w[6] * std::sin(5.0)), 1e-5);
  EXPECT_NEAR(v[6], s * (w[6] * std::cos(5.0) + w[0] * std::sin(5.0)), 1e-5);
  // Pair (5, 11), long factor 11 vs short 2: the two sets differ.
  const double a_long = 5.0 / (11.0 * std::pow(10000.0, 10.0 / 12));
  EXPECT_NEAR(v[5], s * (w[5] * std::cos(a_long) - w[11] * std::sin(a_long)), 1e-5);
  // Dims 12..15 pass unrotated.
  for (int i = 12; i < 16; ++i) EXPECT_EQ(v[i], w[i]);
}

TEST(Rope, LongropeFactorCountMustMatchTheRotaryDim) {
  RopeParams p = parse_rope_params(config(kLongrope), phi3_options());
  p.short_factor.pop_back();
  try {
    Rope rope(p, 16, 1024);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("short_factor"), std::string::npos) << e.what();
  }
}

TEST(Rope, PartialRotaryDimMustBeEven) {
  RopeParams p;
  p.partial_rotary_factor = 0.3;  // int(16 * 0.3) = 4: fine; int(10 * 0.3) = 3: odd
  EXPECT_EQ(Rope(p, 16, 64).rotary_dim(), 4);
  EXPECT_THROW(Rope(p, 10, 64), ConfigError);
}

}  // namespace
}  // namespace hubzoo
