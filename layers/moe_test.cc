#include "layers/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "base/error.h"

namespace hubzoo {
namespace {

constexpr int64_t kHidden = 40, kExperts = 6, kInter = 24;

std::vector<float> randn(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A hand-made block whose weights are kept (row-major) for the naive reference.
struct Block {
  std::vector<float> router;                     // [E, H]
  std::vector<std::vector<float>> gate, up, dn;  // [I, H], [I, H], [H, I] per expert
  MoeOptions opt;
  Numerics numerics;

  Block(int64_t k, bool norm, Numerics n, uint32_t seed = 7) : numerics(n) {
    std::mt19937 rng(seed);
    opt = {kHidden, kExperts, k, kInter, norm};
    router = randn(kExperts * kHidden, rng, 0.3f);
    for (int64_t e = 0; e < kExperts; ++e) {
      gate.push_back(randn(kInter * kHidden, rng, 0.2f));
      up.push_back(randn(kInter * kHidden, rng, 0.2f));
      dn.push_back(randn(kHidden * kInter, rng, 0.2f));
    }
  }
  Linear linear(const std::vector<float>& w, int64_t n, int64_t k) const {
    return Linear{numerics.bf16 ? pack_weights_bf16(w.data(), n, k) : pack_weights(w.data(), n, k),
                  {}};
  }
  // Qwen2-MoE's shared expert: [kShared, H] gate/up, [H, kShared] down, [1, H] gate.
  static constexpr int64_t kShared = 16;
  std::vector<float> shared_gate, shared_up, shared_dn, shared_expert_gate;
  void add_shared_expert(uint32_t seed = 13) {
    std::mt19937 rng(seed);
    opt.shared_expert_intermediate_size = kShared;
    shared_gate = randn(kShared * kHidden, rng, 0.2f);
    shared_up = randn(kShared * kHidden, rng, 0.2f);
    shared_dn = randn(kHidden * kShared, rng, 0.2f);
    shared_expert_gate = randn(kHidden, rng, 0.3f);
  }
  SparseMoe build() const {
    std::vector<GatedMlp> experts;
    for (int64_t e = 0; e < kExperts; ++e) {
      experts.emplace_back(linear(gate[e], kInter, kHidden), linear(up[e], kInter, kHidden),
                           linear(dn[e], kHidden, kInter), numerics);
    }
    std::optional<SharedExpert> shared;
    if (!shared_expert_gate.empty()) {
      shared.emplace(SharedExpert{
          GatedMlp(linear(shared_gate, kShared, kHidden), linear(shared_up, kShared, kHidden),
                   linear(shared_dn, kHidden, kShared), numerics),
          linear(shared_expert_gate, 1, kHidden)});
    }
    return SparseMoe(linear(router, kExperts, kHidden), std::move(experts), opt, numerics,
                     std::move(shared));
  }
};

// A gated SiLU MLP in double: down(silu(gate x) * up x), gate/up [inter, H], down [H, inter].
std::vector<double> naive_mlp(const std::vector<float>& gate, const std::vector<float>& up,
                              const std::vector<float>& dn, int64_t inter, const float* xt) {
  const int64_t h = kHidden;
  std::vector<double> act(inter), out(h, 0.0);
  for (int64_t r = 0; r < inter; ++r) {
    double g = 0, u = 0;
    for (int64_t i = 0; i < h; ++i) {
      g += double(gate[r * h + i]) * xt[i];
      u += double(up[r * h + i]) * xt[i];
    }
    act[r] = g / (1 + std::exp(-g)) * u;
  }
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t r = 0; r < inter; ++r) out[i] += double(dn[i * inter + r]) * act[r];
  }
  return out;
}

// Token by token in double: softmax, a stable sort (ties: lower index first),
// optional renormalisation, each chosen expert's MLP, the weighted sum.
std::vector<float> naive(const Block& b, const std::vector<float>& x, int64_t m,
                         std::vector<int32_t>* chosen) {
  const int64_t h = kHidden, k = b.opt.num_experts_per_tok;
  std::vector<float> out(m * h, 0.0f);
  for (int64_t t = 0; t < m; ++t) {
    const float* xt = &x[t * h];
    std::vector<double> p(kExperts);
    for (int64_t e = 0; e < kExperts; ++e) {
      double s = 0;
      for (int64_t i = 0; i < h; ++i) s += double(b.router[e * h + i]) * xt[i];
      p[e] = s;
    }
    const double mx = *std::max_element(p.begin(), p.end());
    double z = 0;
    for (auto& v : p) z += (v = std::exp(v - mx));
    for (auto& v : p) v /= z;
    std::vector<int32_t> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return p[a] > p[c]; });
    double total = 0;
    for (int64_t j = 0; j < k; ++j) total += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[j];
      if (chosen) chosen->push_back(e);
      const double w = b.opt.norm_topk_prob ? p[e] / total : p[e];
      const auto y = naive_mlp(b.gate[e], b.up[e], b.dn[e], kInter, xt);
      for (int64_t i = 0; i < h; ++i) out[t * h + i] += static_cast<float>(w * y[i]);
    }
    if (b.shared_expert_gate.empty()) continue;
    // + sigmoid(x . shared_expert_gate) * shared_expert(x)
    double g = 0;
    for (int64_t i = 0; i < h; ++i) g += double(b.shared_expert_gate[i]) * xt[i];
    const double s = 1 / (1 + std::exp(-g));
    const auto y = naive_mlp(b.shared_gate, b.shared_up, b.shared_dn, Block::kShared, xt);
    for (int64_t i = 0; i < h; ++i) out[t * h + i] += static_cast<float>(s * y[i]);
  }
  return out;
}

TEST(SparseMoe, MatchesNaiveTokenByTokenMath) {
  ThreadPool pool(2);
  LayerWorkspace ws;
  for (int64_t k : {1, 2, 3}) {
    for (bool norm : {false, true}) {
      Block b(k, norm, Numerics{});
      SparseMoe moe = b.build();
      std::mt19937 rng(11);
      const int64_t m = 29;
      const auto x = randn(m * kHidden, rng, 1.0f);
      std::vector<float> out(m * kHidden);
      MoeRouting routing;
      moe.forward(x.data(), m, out.data(), pool, ws, &routing);
      std::vector<int32_t> chosen;
      const auto ref = naive(b, x, m, &chosen);
      EXPECT_EQ(routing.experts, chosen) << "k=" << k;
      for (int64_t i = 0; i < m * kHidden; ++i) {
        ASSERT_NEAR(out[i], ref[i], 2e-5) << "k=" << k << " norm=" << norm << " at " << i;
      }
      // Weights: descending, summing to 1 when renormalised.
      for (int64_t t = 0; t < m; ++t) {
        float s = 0;
        for (int64_t j = 0; j < k; ++j) {
          s += routing.weights[t * k + j];
          if (j > 0) {
            EXPECT_GE(routing.weights[t * k + j - 1], routing.weights[t * k + j]);
          }
        }
        if (norm) {
          EXPECT_NEAR(s, 1.0f, 1e-6);
        }
      }
    }
  }
}

// Grouping by expert, gather, one matmul per expert and the scatter back give
// exactly the bits of running each token's experts one row at a time.
TEST(SparseMoe, GroupedEqualsPerTokenReferenceBitForBit) {
  ThreadPool pool(2);
  LayerWorkspace ws;
  for (Numerics n : {Numerics{false, false}, Numerics{true, true}, Numerics{true, false}}) {
    for (bool norm : {false, true}) {
      Block b(2, norm, n);
      SparseMoe moe = b.build();
      std::mt19937 rng(3);
      const int64_t m = 53;
      auto x = randn(m * kHidden, rng, 1.0f);
      n.round_eager(x.data(), m * kHidden);
      std::vector<float> grouped(m * kHidden), ref(m * kHidden);
      moe.forward(x.data(), m, grouped.data(), pool, ws);
      sparse_moe_reference(moe, x.data(), m, ref.data(), pool);
      EXPECT_EQ(grouped, ref) << n.dtype_name() << " " << n.mode_name() << " norm=" << norm;
    }
  }
}

TEST(SparseMoe, TokenOutputIndependentOfBatch) {
  ThreadPool pool(2);
  LayerWorkspace ws;
  for (Numerics n : {Numerics{false, false}, Numerics{true, true}}) {
    Block b(3, true, n);
    SparseMoe moe = b.build();
    std::mt19937 rng(5);
    const int64_t m = 37, h = kHidden;
    const auto x = randn(m * h, rng, 1.0f);
    std::vector<float> batched(m * h);
    moe.forward(x.data(), m, batched.data(), pool, ws);
    // Each token alone, and the batch reversed, give the same bits.
    std::vector<float> reversed_x(m * h), reversed(m * h), alone(h);
    for (int64_t t = 0; t < m; ++t) std::copy_n(&x[t * h], h, &reversed_x[(m - 1 - t) * h]);
    moe.forward(reversed_x.data(), m, reversed.data(), pool, ws);
    for (int64_t t = 0; t < m; ++t) {
      moe.forward(&x[t * h], 1, alone.data(), pool, ws);
      ASSERT_TRUE(std::equal(alone.begin(), alone.end(), &batched[t * h])) << "token " << t;
      ASSERT_TRUE(std::equal(alone.begin(), alone.end(), &reversed[(m - 1 - t) * h]))
          << "token " << t;
    }
  }
}

// Expected orders from torch.topk(torch.zeros(n), k).indices (torch 2.15, CPU):
// equal values come out in the order torch's selection algorithm leaves them.
TEST(SparseMoe, TiesOrderedAsTorchTopk) {
  struct Case {
    int64_t n, k;
    std::vector<int32_t> want;
  };
  const std::vector<Case> cases = {{6, 1, {3}},       {6, 2, {3, 5}},
                                   {6, 3, {3, 5, 4}}, {8, 3, {6, 5, 4}},
                                   {128, 2, {0, 1}},  {128, 8, {84, 87, 86, 85, 82, 81, 88, 83}}};
  for (const auto& c : cases) {
    std::vector<std::pair<float, int32_t>> q(c.n);
    for (int64_t i = 0; i < c.n; ++i) q[i] = {1.0f / c.n, static_cast<int32_t>(i)};
    torch_topk_order(q, c.k);
    std::vector<int32_t> got;
    for (int64_t j = 0; j < c.k; ++j) got.push_back(q[j].second);
    EXPECT_EQ(got, c.want) << "n=" << c.n << " k=" << c.k;
  }
  // Through the router: all-zero router weights give uniform probabilities.
  ThreadPool pool(1);
  Block b(3, false, Numerics{});
  std::fill(b.router.begin(), b.router.end(), 0.0f);
  SparseMoe moe = b.build();
  std::vector<float> x(kHidden, 1.0f);
  MoeRouting r;
  moe.route(x.data(), 1, r, pool);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 5, 4}));
}

TEST(SparseMoe, SharedExpertMatchesNaiveMath) {
  ThreadPool pool(2);
  LayerWorkspace ws;
  for (bool norm : {false, true}) {
    Block b(2, norm, Numerics{});
    b.add_shared_expert();
    SparseMoe moe = b.build();
    std::mt19937 rng(17);
    const int64_t m = 31;
    const auto x = randn(m * kHidden, rng, 1.0f);
    std::vector<float> out(m * kHidden);
    moe.forward(x.data(), m, out.data(), pool, ws);
    const auto ref = naive(b, x, m, nullptr);
    // The shared expert's contribution is far above the tolerance: dropping it fails.
    Block routed_only(2, norm, Numerics{});
    const auto without = naive(routed_only, x, m, nullptr);
    double largest = 0;
    for (int64_t i = 0; i < m * kHidden; ++i) {
      ASSERT_NEAR(out[i], ref[i], 2e-5) << "norm=" << norm << " at " << i;
      largest = std::max(largest, std::abs(double(ref[i]) - without[i]));
    }
    EXPECT_GT(largest, 1e-2);
  }
}

TEST(SparseMoe, SharedExpertGroupedEqualsPerTokenReferenceBitForBit) {
  ThreadPool pool(2);
  LayerWorkspace ws;
  for (Numerics n : {Numerics{false, false}, Numerics{true, true}, Numerics{true, false}}) {
    Block b(3, false, n);
    b.add_shared_expert();
    SparseMoe moe = b.build();
    std::mt19937 rng(19);
    const int64_t m = 41;
    auto x = randn(m * kHidden, rng, 1.0f);
    n.round_eager(x.data(), m * kHidden);
    std::vector<float> grouped(m * kHidden), ref(m * kHidden);
    moe.forward(x.data(), m, grouped.data(), pool, ws);
    sparse_moe_reference(moe, x.data(), m, ref.data(), pool);
    EXPECT_EQ(grouped, ref) << n.dtype_name() << " " << n.mode_name();
  }
}

TEST(SparseMoe, RejectsASharedExpertTheOptionsDoNotDeclare) {
  Block b(2, false, Numerics{});
  b.add_shared_expert();
  b.opt.shared_expert_intermediate_size = 0;  // tensors given, options say none
  EXPECT_THROW(b.build(), InvalidArgument);
  Block c(2, false, Numerics{});
  c.opt.shared_expert_intermediate_size = Block::kShared;  // options say one, none given
  EXPECT_THROW(c.build(), InvalidArgument);
}

TEST(SparseMoe, RejectsTopKAboveExperts) {
  Block b(2, false, Numerics{});
  b.opt.num_experts_per_tok = kExperts + 1;
  EXPECT_THROW(b.build(), InvalidArgument);
}

}  // namespace
}  // namespace hubzoo
