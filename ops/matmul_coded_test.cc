#include "ops/matmul_coded.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "hwy/targets.h"
#include "ops/bf16.h"
#include "ops/matmul.h"
#include "ops/test_values.h"

namespace hubzoo {
namespace {

using test::bits;

// Weights as a language model's (a few exponents wide: a block's high bytes
// fit its table), with `special` of them replaced by values outside any
// block's table (NaN, infinities, zeros of both signs, denormals, huge and
// tiny values), so that blocks escape.
std::vector<float> model_like(int64_t count, uint32_t seed, int64_t special) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  // 13 exponents: 7 pairs of them, so 14 high bytes with both signs.
  std::uniform_int_distribution<int> exponent(-15, -3);
  std::vector<float> w(static_cast<size_t>(count));
  for (float& v : w) {
    const int e = exponent(rng);
    const float m = mantissa(rng);
    v = (rng() % 2 ? -1.0f : 1.0f) * std::ldexp(m, e);
  }
  const float odd[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       0.0f,
                       -0.0f,
                       0x1p-130f,
                       -0x1p-133f,
                       3.0e30f,
                       -7.5e-20f,
                       1.0e-38f};
  std::uniform_int_distribution<int64_t> at(0, std::max<int64_t>(0, count - 1));
  for (int64_t i = 0; i < special && count > 0; ++i) w[at(rng)] = odd[i % std::size(odd)];
  return w;
}

// bf16 panels of w, with bf16_activations (eager, bf16dot) or without (fused: fp32 x).
PackedMatrix plain_bf16(const std::vector<float>& w, int64_t n, int64_t k,
                        bool bf16_activations = true) {
  PackedMatrix p = pack_weights_bf16(w.data(), n, k);
  p.bf16_activations = bf16_activations;
  return p;
}

// Every weight of `coded` read back as bits equal to `plain`'s.
void expect_same_weights(const PackedMatrix& plain, const PackedMatrix& coded) {
  ASSERT_TRUE(coded.is_coded());
  const PackedMatrix back = from_bf16_coded(coded);
  ASSERT_EQ(back.n, plain.n);
  ASSERT_EQ(back.k, plain.k);
  std::vector<float> want(static_cast<size_t>(plain.k)), got(want.size());
  for (int64_t r = 0; r < plain.n; ++r) {
    plain.copy_row(r, want.data());
    coded.copy_row(r, got.data());
    for (int64_t c = 0; c < plain.k; ++c) {
      ASSERT_EQ(bits(got[c]), bits(want[c])) << "row " << r << " col " << c;
      ASSERT_EQ(bits(coded.at(r, c)), bits(want[c])) << "row " << r << " col " << c;
    }
    back.copy_row(r, got.data());
    for (int64_t c = 0; c < plain.k; ++c) ASSERT_EQ(bits(got[c]), bits(want[c]));
  }
}

TEST(MatmulCoded, RoundTripsEveryBit) {
  for (int64_t n : {1, 31, 32, 70}) {
    for (int64_t k : {1, 2, 7, 63, 64, 65, 130, 577}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
      const auto w = model_like(n * k, static_cast<uint32_t>(n * 1000 + k), n * k / 256 + 1);
      for (bool act : {true, false}) {
        const PackedMatrix plain = plain_bf16(w, n, k, act);
        const PackedMatrix coded = to_bf16_coded(plain_bf16(w, n, k, act), false);
        EXPECT_EQ(coded.bf16_activations, act);
        expect_same_weights(plain, coded);
        EXPECT_EQ(from_bf16_coded(coded).bf16_activations, act);
      }
    }
  }
}

TEST(MatmulCoded, TwelveBitsAWeightAndFewEscapes) {
  const int64_t n = 256, k = 1024;
  const auto w = model_like(n * k, 5, 40);
  const PackedMatrix plain = plain_bf16(w, n, k);
  const PackedMatrix coded = to_bf16_coded(plain_bf16(w, n, k));
  ASSERT_TRUE(coded.is_coded());
  // 1.5 bytes a weight, a header of 24 bytes a block per panel, the escapes.
  EXPECT_EQ(coded.bytes(), (n / kPanel) * (k / kKBlock * kCodedBlockBytes + 384) +
                               static_cast<int64_t>(coded.coded->escapes.size()));
  EXPECT_LE(coded.coded->escapes.size(), 40u);
  EXPECT_GT(coded.coded->escapes.size(), 0u);
  EXPECT_LT(coded.bytes() * 100, plain.bytes() * 76);
}

// Weights whose blocks mostly need escapes (random bit patterns) stay plain:
// coding them would not pay.
TEST(MatmulCoded, KeepsPlainWhereCodingDoesNotPay) {
  const int64_t n = 64, k = 256;
  std::mt19937 rng(9);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) {
    const uint32_t u = rng() & 0xFFFF0000u;
    std::memcpy(&v, &u, sizeof v);
  }
  const PackedMatrix p = to_bf16_coded(plain_bf16(w, n, k));
  EXPECT_FALSE(p.is_coded());
  EXPECT_TRUE(p.is_half());
  EXPECT_FALSE(to_bf16_coded(plain_bf16(w, n, k, false)).is_coded());
  // Nor where a short K's whole last block would make it no smaller (K = 96:
  // two blocks for 1.5 blocks' weights), unless asked to.
  const auto fits = model_like(n * 96, 4, 0);
  const PackedMatrix short_k = plain_bf16(fits, n, 96);
  EXPECT_FALSE(to_bf16_coded(plain_bf16(fits, n, 96)).is_coded());
  EXPECT_GE(to_bf16_coded(plain_bf16(fits, n, 96), false).bytes(), short_k.bytes());
  EXPECT_TRUE(to_bf16_coded(plain_bf16(model_like(n * 128, 4, 0), n, 128)).is_coded());
  // Nor does it code what no kernel of it multiplies.
  const auto model = model_like(n * k, 3, 0);
  EXPECT_FALSE(to_bf16_coded(pack_weights(model.data(), n, k)).is_coded());
  EXPECT_FALSE(
      to_bf16_coded(pack_weights_concat({{model.data(), n}}, k, PanelType::kF16)).is_coded());
  EXPECT_THROW(from_bf16_coded(p), InvalidArgument);
}

// A coded matrix multiplies to the bits of its plain panels (which
// Matmul.Bf16ActivationsBitIdenticalToFlushedContract and the FMA kernel's
// tests hold to matmul.h's contract), with bf16_activations (on every target,
// with the bf16 dot products and without) and without (fp32 x: the FMA
// kernel), for one row block (decode), several (the direct kernels again),
// and many (the panels decoded or widened per row chunk), 1 and 2 threads,
// escapes in any of a tile's panels.
TEST(MatmulCoded, MultipliesToThePlainBits) {
  struct Shape {
    int64_t m, n, k;
  };
  std::vector<Shape> shapes;
  for (int64_t m : {1, 2, 4, 12, 13, 16, 49, 100}) {
    for (int64_t n : {1, 17, 70, 200}) {
      for (int64_t k : {1, 7, 64, 65, 130, 577}) shapes.push_back({m, n, k});
    }
  }
  shapes.push_back({530, 45, 1600});
  shapes.push_back({3, 300, 2048});
  ThreadPool one(1), two(2);
  size_t escapes = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                 " k=" + std::to_string(s.k));
    const auto w = model_like(s.n * s.k, static_cast<uint32_t>(i), s.n * s.k / 256 + 1);
    const auto x = test::spread_values(s.m * s.k, static_cast<uint32_t>(i + 7), -4, 4);
    const auto bias = test::spread_values(s.n, static_cast<uint32_t>(i + 9), -2, 2);
    for (bool act : {true, false}) {
      SCOPED_TRACE(act ? "bf16_activations" : "fp32 x");
      const PackedMatrix plain = plain_bf16(w, s.n, s.k, act);
      const PackedMatrix coded = to_bf16_coded(plain_bf16(w, s.n, s.k, act), false);
      ASSERT_TRUE(coded.is_coded());
      escapes += coded.coded->escapes.size();
      const auto product = [&](const PackedMatrix& m, ThreadPool* pool) {
        std::vector<float> y(static_cast<size_t>(s.m * s.n), -1.0f);
        const MatmulArgs a{x.data(), s.m, s.k, &m, i % 2 ? bias.data() : nullptr, y.data(), s.n};
        pool ? matmul(a, *pool) : matmul_reference(a);
        return y;
      };
      const auto want = product(plain, &one);
      const auto expect_want = [&](const std::vector<float>& got) {
        for (size_t e = 0; e < want.size(); ++e) {
          if (bits(got[e]) != bits(want[e]) && !(std::isnan(got[e]) && std::isnan(want[e]))) {
            FAIL() << "element " << e << ": got " << got[e] << " want " << want[e];
          }
        }
      };
      expect_want(product(coded, nullptr));
      hwy::SetSupportedTargetsForTest(0);
      for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        SCOPED_TRACE(hwy::TargetName(target));
        for (bool dot : {true, false}) {
          set_matmul_bf16_dot_allowed(dot);
          for (ThreadPool* pool : {&one, &two}) expect_want(product(coded, pool));
        }
        set_matmul_bf16_dot_allowed(true);
      }
      hwy::SetSupportedTargetsForTest(0);
    }
  }
  EXPECT_GT(escapes, 2000u);  // the escapes' paths ran
}

// Stacking coded matrices (fused projections) gives the coded stack of their values.
TEST(MatmulCoded, StacksAndConvertsToTiles) {
  const auto a = model_like(40 * 192, 1, 3), b = model_like(64 * 192, 2, 3);
  const PackedMatrix ca = to_bf16_coded(plain_bf16(a, 40, 192));
  const PackedMatrix cb = to_bf16_coded(plain_bf16(b, 64, 192));
  const PackedMatrix stacked = concat_packed({&ca, &cb});
  std::vector<float> ab(a);
  ab.insert(ab.end(), b.begin(), b.end());
  expect_same_weights(plain_bf16(ab, 104, 192), stacked);
  // The same without bf16_activations (the fused mode's q/k/v and gate/up).
  const PackedMatrix fa = to_bf16_coded(plain_bf16(a, 40, 192, false));
  const PackedMatrix fb = to_bf16_coded(plain_bf16(b, 64, 192, false));
  const PackedMatrix fused = concat_packed({&fa, &fb});
  EXPECT_FALSE(fused.bf16_activations);
  expect_same_weights(plain_bf16(ab, 104, 192, false), fused);
  const PackedMatrix tiles = to_bf16_tiles(to_bf16_coded(plain_bf16(a, 40, 192)));
  EXPECT_TRUE(tiles.bf16_tiles);
  for (int64_t r = 0; r < 40; ++r) {
    for (int64_t c = 0; c < 192; ++c)
      ASSERT_EQ(bits(tiles.at(r, c)), bits(round_bf16(a[r * 192 + c])));
  }
}

// The loader codes bf16_activations matrices where the bf16 dot product
// kernel multiplies them and the tile chain does not, the others where the
// target is AVX-512 (the coded FMA kernel's).
TEST(MatmulCoded, ChosenWhereACodedKernelRuns) {
  EXPECT_EQ(matmul_bf16_coded(), matmul_bf16_dot() && !matmul_bf16_tiles());
  EXPECT_EQ(matmul_bf16_coded(true), matmul_bf16_coded());
  const int64_t best = hwy::SupportedAndGeneratedTargets().front();  // what dispatch runs
  EXPECT_EQ(matmul_bf16_coded(false), best <= HWY_AVX3) << hwy::TargetName(best);
  set_matmul_bf16_coded_allowed(false);
  EXPECT_FALSE(matmul_bf16_coded());
  EXPECT_FALSE(matmul_bf16_coded(false));
  set_matmul_bf16_coded_allowed(true);
}

}  // namespace
}  // namespace hubzoo
