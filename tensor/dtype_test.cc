#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/error.h"
#include "tensor/tensor.h"

namespace hubzoo {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(DType, NamesSizesAndParseRoundTrip) {
  const std::vector<std::pair<const char*, size_t>> expected = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [name, size] : expected) {
    const DType t = parse_dtype(name);
    EXPECT_EQ(dtype_name(t), name);
    EXPECT_EQ(dtype_size(t), size) << name;
  }
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
}

TEST(DType, ParseUnknownThrowsNamingIt) {
  try {
    parse_dtype("F7");
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'F7'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_dtype("bf16"), FormatError);  // spellings are case-sensitive
  EXPECT_THROW(parse_dtype(""), FormatError);
}

TEST(DType, FloatWeightDtypes) {
  EXPECT_TRUE(is_float_weight_dtype(DType::F32));
  EXPECT_TRUE(is_float_weight_dtype(DType::BF16));
  EXPECT_TRUE(is_float_weight_dtype(DType::F16));
  EXPECT_FALSE(is_float_weight_dtype(DType::F64));
  EXPECT_FALSE(is_float_weight_dtype(DType::I64));
  EXPECT_FALSE(is_float_weight_dtype(DType::F8_E4M3));
}

TEST(F16, DecodesKnownBitPatterns) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(bits_of(f16_to_f32(0x0000)), 0x00000000u);
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));  // signalling NaN stays NaN
  EXPECT_TRUE(std::signbit(f16_to_f32(0xfe00)));
}

TEST(F16, EncodesWithRoundToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // midpoint, ties to even = inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  // 1 + 2^-11 is halfway between 0x3c00 and 0x3c01: ties to even.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // Subnormals.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even 0
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp -> 2
  EXPECT_EQ(f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 ulp -> 2
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Largest subnormal + half an ulp rounds up into the smallest normal.
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(f32_to_f16(from_bits(0xff800001u)) & 0x8000, 0x8000);  // sign of NaN kept
}

TEST(F16, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

#ifdef __FLT16_MAX__
TEST(F16, MatchesCompilerFloat16OnRandomFloats) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> exp(90, 150);  // around the half range
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = (rng() & 0x807fffffu) | (exp(rng) << 23);
    const float f = from_bits(b);
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t ref;
    std::memcpy(&ref, &h, sizeof ref);
    ASSERT_EQ(f32_to_f16(f), ref) << std::hexfloat << f;
  }
}
#endif

TEST(BF16, RoundsTiesToEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fffu)), 0x3f80);  // below tie
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf818000u)), 0xbf82);  // negative tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  const uint16_t nan = f32_to_bf16(from_bits(0x7f800001u));  // payload only in low bits
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
}

TEST(ConvertToF32, AllFloatSources) {
  const std::vector<float> ref = {0.0f, -1.5f, 3.140625f, 65504.0f, std::ldexp(1.0f, -24)};
  std::vector<float> out(ref.size());

  convert_to_f32(DType::F32, ref.data(), out.data(), ref.size());
  EXPECT_EQ(out, ref);

  std::vector<uint16_t> bf(ref.size()), hf(ref.size());
  std::vector<double> d(ref.begin(), ref.end());
  for (size_t i = 0; i < ref.size(); ++i) {
    bf[i] = f32_to_bf16(ref[i]);
    hf[i] = f32_to_f16(ref[i]);
  }
  convert_to_f32(DType::F16, hf.data(), out.data(), ref.size());
  EXPECT_EQ(out, ref);  // every value is exact in half
  convert_to_f32(DType::F64, d.data(), out.data(), ref.size());
  EXPECT_EQ(out, ref);
  convert_to_f32(DType::BF16, bf.data(), out.data(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(out[i], bf16_to_f32(bf[i]));
  EXPECT_EQ(out[2], 3.140625f);

  int32_t ints[2] = {1, 2};
  EXPECT_THROW(convert_to_f32(DType::I32, ints, out.data(), 2), InvalidArgument);
}

TEST(Tensor, NumElementsAndShapeStr) {
  EXPECT_EQ(num_elements({}), 1);
  EXPECT_EQ(num_elements({4, 16}), 64);
  EXPECT_EQ(num_elements({3, 0, 2}), 0);
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_str({4, 16}), "[4, 16]");
  TensorView v{DType::BF16, {2, 3}, nullptr};
  EXPECT_EQ(v.numel(), 6);
  EXPECT_EQ(v.nbytes(), 12u);
}

}  // namespace
}  // namespace hubzoo
