// Linear::concat and RMSNorm::add_forward are fusions: they must give exactly
// the bits of the separate operations they replace.
#include "layers/linear.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "ops/bf16.h"
#include "ops/thread_pool.h"

namespace hubzoo {
namespace {

std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

Linear make_linear(int64_t out, int64_t in, bool bf16, bool bias, unsigned seed) {
  const auto w = random_values(out * in, seed);
  Linear l;
  l.weight = bf16 ? pack_weights_bf16(w.data(), out, in) : pack_weights(w.data(), out, in);
  if (bias) l.bias = FloatWeights(random_values(out, seed + 100));
  return l;
}

void expect_same_bits(const float* a, const float* b, int64_t n) {
  ASSERT_EQ(std::memcmp(a, b, n * sizeof(float)), 0);
}

TEST(LinearConcat, SameBitsAsThePartsSideBySide) {
  ThreadPool pool(2);
  const int64_t in = 70;
  // float32 parts, bf16 parts, and both (a checkpoint storing both under
  // float32 numerics: fused as float32, the bf16 parts widened exactly).
  enum Parts { kFloat32, kBf16, kMixed };
  for (Parts dtypes : {kFloat32, kBf16, kMixed}) {
    for (bool bias : {false, true}) {
      // Part sizes that fill whole 32-row panels (panels copied) and that do not (repacked).
      for (const std::vector<int64_t>& outs :
           {std::vector<int64_t>{64, 17, 45}, std::vector<int64_t>{64, 32, 45}}) {
        std::vector<Linear> parts;
        for (size_t i = 0; i < outs.size(); ++i) {
          const bool bf16 = dtypes == kBf16 || (dtypes == kMixed && i == 1);
          parts.push_back(make_linear(outs[i], in, bf16, bias, 7 + static_cast<unsigned>(i)));
        }
        const Linear fused = Linear::concat({&parts[0], &parts[1], &parts[2]});
        EXPECT_EQ(fused.out_features(), outs[0] + outs[1] + outs[2]);
        EXPECT_EQ(fused.weight.is_bf16(), dtypes == kBf16);
        for (int64_t m : {1, 5, 40}) {
          const auto x = random_values(m * in, 3);
          std::vector<float> y(m * fused.out_features());
          fused.forward(x.data(), m, y.data(), pool);
          int64_t col = 0;
          for (const Linear& part : parts) {
            std::vector<float> want(m * part.out_features());
            part.forward(x.data(), m, want.data(), pool);
            for (int64_t r = 0; r < m; ++r) {
              expect_same_bits(&y[r * fused.out_features() + col], &want[r * part.out_features()],
                               part.out_features());
            }
            col += part.out_features();
          }
        }
      }
    }
  }
}

TEST(PackWeightsConcat, Bf16SourceRowsPackAsTheirWidening) {
  const int64_t k = 70, n = 45;
  auto w = random_values(n * k, 30);
  std::vector<uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    bits[i] = bf16_bits(w[i]);
    w[i] = bf16_to_float(bits[i]);
  }
  for (bool bf16 : {false, true}) {
    const PackedMatrix a =
        pack_weights_concat({{nullptr, 13, bits.data()}, {nullptr, n - 13, bits.data() + 13 * k}},
                            k, bf16 ? PanelType::kBF16 : PanelType::kF32);
    const PackedMatrix b = bf16 ? pack_weights_bf16(w.data(), n, k) : pack_weights(w.data(), n, k);
    ASSERT_EQ(a.bytes(), b.bytes());
    const void* pa = bf16 ? static_cast<const void*>(a.half.get()) : a.data.get();
    const void* pb = bf16 ? static_cast<const void*>(b.half.get()) : b.data.get();
    EXPECT_EQ(std::memcmp(pa, pb, a.bytes()), 0);
  }
}

TEST(PackWeightsConcat, SamePanelsAsPackingTheStackedRows) {
  const int64_t k = 70;
  for (bool bf16 : {false, true}) {
    for (const std::vector<int64_t>& rows :
         {std::vector<int64_t>{5, 40, 1, 33}, std::vector<int64_t>{32, 64},
          std::vector<int64_t>{0, 7}}) {
      std::vector<std::vector<float>> parts;
      std::vector<WeightRows> src;
      std::vector<float> stacked;
      int64_t n = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        parts.push_back(random_values(rows[i] * k, 20 + static_cast<unsigned>(i)));
        stacked.insert(stacked.end(), parts.back().begin(), parts.back().end());
        n += rows[i];
      }
      for (size_t i = 0; i < rows.size(); ++i) src.push_back({parts[i].data(), rows[i]});
      const PackedMatrix a = pack_weights_concat(src, k, bf16 ? PanelType::kBF16 : PanelType::kF32);
      const PackedMatrix b =
          bf16 ? pack_weights_bf16(stacked.data(), n, k) : pack_weights(stacked.data(), n, k);
      ASSERT_EQ(a.n, n);
      ASSERT_EQ(a.bytes(), b.bytes());
      const void* pa = bf16 ? static_cast<const void*>(a.half.get()) : a.data.get();
      const void* pb = bf16 ? static_cast<const void*>(b.half.get()) : b.data.get();
      EXPECT_EQ(std::memcmp(pa, pb, a.bytes()), 0);
    }
  }
}

TEST(LinearConcat, RefusesPartsThatDiffer) {
  const Linear a = make_linear(8, 16, false, false, 1), b = make_linear(8, 12, false, false, 2);
  const Linear d = make_linear(8, 16, false, true, 4);
  Linear c = make_linear(8, 16, true, false, 3);
  c.weight.bf16_activations = true;  // bf16 activations: every part must be bf16
  EXPECT_THROW(Linear::concat({}), InvalidArgument);
  EXPECT_THROW(Linear::concat({&a, &b}), InvalidArgument);
  EXPECT_THROW(Linear::concat({&a, &c}), InvalidArgument);
  EXPECT_THROW(Linear::concat({&a, &d}), InvalidArgument);
}

TEST(RmsNormAddForward, SameBitsAsAddRoundThenNorm) {
  const int64_t n = 37, rows = 6;
  for (const Numerics num : {Numerics{false, false}, Numerics{true, false}, Numerics{true, true}}) {
    for (bool gemma_form : {false, true}) {
      RMSNorm norm = RMSNorm::from_values(random_values(n, 5), 1e-6f, num);
      norm.scale_in_fp32 = gemma_form;
      auto x1 = random_values(rows * n, 6);
      num.round_eager(x1.data(), rows * n);
      auto x2 = x1;
      const auto branch = random_values(rows * n, 8);
      std::vector<float> out1(rows * n), out2(rows * n);
      norm.add_forward(x1.data(), branch.data(), rows, out1.data(), num);
      for (int64_t i = 0; i < rows * n; ++i) x2[i] += branch[i];
      num.round_eager(x2.data(), rows * n);
      norm.forward(x2.data(), rows, out2.data());
      expect_same_bits(x1.data(), x2.data(), rows * n);
      expect_same_bits(out1.data(), out2.data(), rows * n);
    }
  }
}

}  // namespace
}  // namespace hubzoo
