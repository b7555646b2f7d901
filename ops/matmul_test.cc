#include "ops/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "hwy/targets.h"
#include "ops/bf16.h"
#include "ops/cpu_amx.h"
#include "ops/test_values.h"
#include "tensor/dtype.h"

namespace hubzoo {
namespace {

// Values with spread-out exponents so that any change of rounding or order
// (mul + add instead of fma, another summation order) changes the bits.
std::vector<float> random_values(int64_t count, uint32_t seed) {
  return test::spread_values(count, seed, -6, 6);
}

using test::bits;

constexpr uint32_t kSentinel = 0x7fc0beefu;  // a NaN that no computation yields
float sentinel() {
  float f;
  std::memcpy(&f, &kSentinel, sizeof(f));
  return f;
}

// Runs each test body once per SIMD target this machine and build offer.
// Targets without a native FMA run the scalar chain of matmul_reference()
// (matmul_has_vector_kernel()), so the tests below compare every target with
// contract_matmul(), written here from matmul.h's contract on unpacked
// weights, rather than with matmul_reference(); VectorKernelIsCovered says
// which targets run the SIMD kernel.
class EveryTarget {
 public:
  template <typename Body>
  static void run(Body body) {
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      SCOPED_TRACE(std::string(hwy::TargetName(target)) +
                   (matmul_has_vector_kernel() ? " (SIMD kernel)" : " (scalar chain)"));
      EXPECT_STREQ(matmul_target_name(), hwy::TargetName(target));
      body();
      hwy::SetSupportedTargetsForTest(0);
    }
  }
};

struct Problem {
  int64_t m, n, k;
  bool bias, strided;
  int64_t ldx_ = 0;  // x's row stride when not 0
  int64_t ldx() const { return ldx_ ? ldx_ : strided ? k + 3 : k; }
  int64_t ldy() const { return strided ? n + 5 : n; }
};

struct Data {
  std::vector<float> w, x, bias;
  PackedMatrix packed;
};

Data make_data(const Problem& p, uint32_t seed) {
  Data d;
  d.w = random_values(p.n * p.k, seed);
  d.x = random_values(p.m * p.ldx(), seed + 1);
  d.bias = random_values(p.n, seed + 2);
  d.packed = pack_weights(d.w.data(), p.n, p.k);
  return d;
}

std::vector<float> run(const Problem& p, const float* x, const PackedMatrix& w, const float* bias,
                       ThreadPool* pool) {
  std::vector<float> y(p.m * p.ldy(), sentinel());
  const MatmulArgs a{x, p.m, p.ldx(), &w, p.bias ? bias : nullptr, y.data(), p.ldy()};
  if (pool) {
    matmul(a, *pool);
  } else {
    matmul_reference(a);
  }
  return y;
}

std::vector<float> run(const Problem& p, const Data& d, ThreadPool* pool) {
  return run(p, d.x.data(), d.packed, d.bias.data(), pool);
}

float flushed(float v) { return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v; }

// The contract of matmul.h, computed from row-major W [n, k] without packing:
// per output element, one std::fma chain from 0 over each block of kKBlock
// k's, the block sums added in k order from 0, then the bias. With
// `bf16_activations` (matmul.h) x is flushed then rounded to bf16, and every
// operand and every result of the chain, of the block sums and of the bias add
// is flushed to a zero of its sign below 2^-126.
std::vector<float> contract_matmul(const Problem& p, const float* x, const std::vector<float>& w,
                                   const float* bias, bool bf16_activations = false) {
  const auto f = [&](float v) { return bf16_activations ? flushed(v) : v; };
  std::vector<float> y(p.m * p.ldy(), sentinel());
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t n = 0; n < p.n; ++n) {
      float total = 0.0f;
      for (int64_t k0 = 0; k0 < p.k; k0 += kKBlock) {
        float acc = 0.0f;
        for (int64_t k = k0; k < std::min(p.k, k0 + kKBlock); ++k) {
          float xv = x[r * p.ldx() + k];
          if (bf16_activations) xv = flushed(round_bf16(flushed(xv)));
          acc = f(std::fma(xv, f(w[n * p.k + k]), acc));
        }
        total = f(total + acc);
      }
      y[r * p.ldy() + n] = p.bias ? f(total + f(bias[n])) : total;
    }
  }
  return y;
}

std::vector<float> contract_matmul(const Problem& p, const Data& d) {
  return contract_matmul(p, d.x.data(), d.w, d.bias.data());
}

// W as pack_weights_bf16 stores it: each weight rounded to bf16, widened exactly.
std::vector<float> bf16_widened(const std::vector<float>& w) {
  std::vector<float> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = round_bf16(w[i]);
  return out;
}

// Exact equality of every element, and the gaps of a strided y left untouched.
void expect_same_bits(const Problem& p, const std::vector<float>& want,
                      const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size());
  int failures = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()) && failures < 5; ++i) {
    const bool in_row = i % p.ldy() < p.n;
    if (in_row ? bits(got[i]) != bits(want[i]) : bits(got[i]) != kSentinel) {
      ADD_FAILURE() << "m=" << p.m << " n=" << p.n << " k=" << p.k << " bias=" << p.bias
                    << " strided=" << p.strided << " at row " << i / p.ldy() << " col "
                    << i % p.ldy() << ": got " << got[i] << " want " << want[i];
      ++failures;
    }
  }
}

// The targets whose comparison exercises the SIMD kernel, and the guarantee
// that x86 CPUs with AVX2 (which implies FMA) run it.
TEST(Matmul, VectorKernelIsCovered) {
  std::string simd, scalar;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    (matmul_has_vector_kernel() ? simd : scalar) += std::string(" ") + hwy::TargetName(target);
#if HWY_ARCH_X86
    if (target == HWY_AVX2) {
      EXPECT_TRUE(matmul_has_vector_kernel()) << "AVX2 has FMA";
    }
#endif
    hwy::SetSupportedTargetsForTest(0);
  }
  RecordProperty("simd_kernel_targets", simd);
  RecordProperty("scalar_chain_targets", scalar);
  std::printf("matmul SIMD kernel on:%s; scalar chain on:%s\n",
              simd.empty() ? " none" : simd.c_str(), scalar.empty() ? " none" : scalar.c_str());
  if (simd.empty()) {
    GTEST_SKIP() << "no target of this CPU and build has a native FMA: the SIMD kernel is "
                    "not tested here (the scalar chain is, against contract_matmul)";
  }
}

// matmul_reference() (packed panels, ops/matmul.cc's blocked_dot) against the
// contract computed here on unpacked weights, float32 and bf16.
TEST(MatmulReference, FollowsTheContract) {
  for (int64_t m : {1, 3, 17}) {
    for (int64_t n : {1, 33, 100}) {
      for (int64_t k : {1, 63, 64, 65, 577}) {
        const Problem p{m, n, k, n != 33, m == 3};
        const Data d = make_data(p, static_cast<uint32_t>(m * 1000 + n * 10 + k));
        expect_same_bits(p, contract_matmul(p, d), run(p, d, nullptr));
        const std::vector<float> wide = bf16_widened(d.w);
        const PackedMatrix bf = pack_weights_bf16(d.w.data(), p.n, p.k);
        expect_same_bits(p, contract_matmul(p, d.x.data(), wide, d.bias.data()),
                         run(p, d.x.data(), bf, d.bias.data(), nullptr));
      }
    }
  }
}

TEST(Matmul, BitIdenticalToContractOnEveryTarget) {
  std::vector<Problem> problems;
  for (int64_t m : {1, 2, 3, 5, 13, 16, 17, 64, 100}) {
    for (int64_t n : {1, 31, 32, 33, 100}) {
      for (int64_t k : {1, 7, 64, 577}) {
        for (bool bias : {false, true}) {
          for (bool strided : {false, true}) problems.push_back({m, n, k, bias, strided});
        }
      }
    }
  }
  // Prefill sizes: several row chunks of packed x and several K ranges.
  problems.push_back({1100, 45, 600, true, true});
  problems.push_back({530, 64, 1100, false, false});
  std::vector<Data> data;
  std::vector<std::vector<float>> want;
  for (size_t i = 0; i < problems.size(); ++i) {
    data.push_back(make_data(problems[i], static_cast<uint32_t>(i)));
    want.push_back(contract_matmul(problems[i], data.back()));
  }
  ThreadPool one(1), two(2);
  EveryTarget::run([&] {
    for (ThreadPool* pool : {&one, &two}) {
      SCOPED_TRACE("threads=" + std::to_string(pool->num_threads()));
      for (size_t i = 0; i < problems.size(); ++i) {
        expect_same_bits(problems[i], want[i], run(problems[i], data[i], pool));
      }
    }
  });
}

// The blocking of ops/matmul.cc at its edges: several row chunks and K ranges
// (K = 1600 is 25 k blocks: ranges of 13 + 12 blocks; K = 1537 ends in a
// range with a 1-k block), M not a multiple of the 14-row block (512 = 36 x 14
// + 8), odd N, the model's shapes (K = 576, N = 192 or 960), and row strides
// of x that put the rows of a block in the same L1 sets (multiples of 4 KiB:
// x is then copied to another stride), for 1 to 14 rows as well as many.
TEST(Matmul, BlockingEdgesBitIdenticalToContract) {
  const std::vector<Problem> problems = {
      {530, 17, 1600, true, true},       {45, 200, 1537, false, false},
      {100, 200, 576, true, false},      {512, 192, 576, true, true},
      {29, 960, 576, false, true},       {16, 384, 576, true, false},
      {40, 33, 1000, true, false, 1024}, {5, 33, 1024, false, false},
      {14, 65, 1024, true, false, 2048}, {29, 70, 2048, true, true, 2048},
      {300, 31, 1024, false, false},     {2, 200, 1600, true, false, 4096},
  };
  ThreadPool one(1), two(2);
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    SCOPED_TRACE("problem " + std::to_string(i));
    Data d = make_data(p, static_cast<uint32_t>(2000 + i));
    const auto want = contract_matmul(p, d);
    // bf16 weights through the same paths (a third of the problems, for time).
    const bool with_bf16 = i % 3 == 0;
    const PackedMatrix bf = pack_weights_bf16(d.w.data(), p.n, p.k);
    const auto want_bf = with_bf16
                             ? contract_matmul(p, d.x.data(), bf16_widened(d.w), d.bias.data())
                             : std::vector<float>();
    EveryTarget::run([&] {
      for (ThreadPool* pool : {&one, &two}) {
        SCOPED_TRACE("threads=" + std::to_string(pool->num_threads()));
        expect_same_bits(p, want, run(p, d, pool));
        if (with_bf16) expect_same_bits(p, want_bf, run(p, d.x.data(), bf, d.bias.data(), pool));
      }
    });
  }
}

// bf16 weights: bit-identical to the contract on every target and thread
// count, and equal to the float32 matmul of the same (widened) weights.
TEST(Matmul, Bf16WeightsBitIdenticalAndExactlyWidened) {
  std::vector<Problem> problems;
  for (int64_t m : {1, 2, 13, 17, 64}) {
    for (int64_t n : {1, 33, 100}) {
      for (int64_t k : {7, 64, 577}) problems.push_back({m, n, k, m % 2 == 1, m == 13});
    }
  }
  // Several panel groups and k ranges, where rows from 4 row blocks on read
  // panels widened once per group and range (ops/matmul.cc WidensPanels).
  for (int64_t m : {12, 40, 300}) problems.push_back({m, 300, 2000, m == 40, false});
  ThreadPool one(1), two(2);
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    Data d = make_data(p, static_cast<uint32_t>(1000 + i));
    const PackedMatrix bf = pack_weights_bf16(d.w.data(), p.n, p.k);
    ASSERT_TRUE(bf.is_bf16());
    const std::vector<float> widened = bf16_widened(d.w);
    for (int64_t r = 0; r < p.n; ++r) {
      for (int64_t c = 0; c < p.k; c += 5) ASSERT_EQ(bf.at(r, c), widened[r * p.k + c]);
    }
    const PackedMatrix wide = pack_weights(widened.data(), p.n, p.k);
    const auto want = contract_matmul(p, d.x.data(), widened, d.bias.data());
    expect_same_bits(p, want, run(p, d.x.data(), bf, d.bias.data(), nullptr));
    expect_same_bits(p, want, run(p, d.x.data(), wide, d.bias.data(), nullptr));
    EveryTarget::run([&] {
      for (ThreadPool* pool : {&one, &two}) {
        expect_same_bits(p, want, run(p, d.x.data(), bf, d.bias.data(), pool));
      }
    });
  }
}

// fp16 weights (an F16 checkpoint): bit-identical to the contract on the
// weights widened exactly, on every target and thread count, the subnormals
// and the largest finite values included; at() and copy_row() read them back.
TEST(Matmul, F16WeightsBitIdenticalAndExactlyWidened) {
  std::vector<Problem> problems;
  for (int64_t m : {1, 2, 13, 17}) {
    for (int64_t n : {1, 33, 100}) {
      for (int64_t k : {7, 64, 577}) problems.push_back({m, n, k, m % 2 == 1, m == 13});
    }
  }
  for (int64_t m : {12, 40, 300}) problems.push_back({m, 300, 2000, m == 40, false});
  // Smallest and largest subnormal, a negative one, the smallest normal, the
  // largest finite values, -0.
  const uint16_t special[] = {0x0001, 0x03FF, 0x8200, 0x0400, 0x7BFF, 0xFBFF, 0x8000};
  ThreadPool one(1), two(2);
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    Data d = make_data(p, static_cast<uint32_t>(3000 + i));
    std::vector<uint16_t> stored(d.w.size());
    std::vector<float> widened(d.w.size());
    for (size_t j = 0; j < d.w.size(); ++j) {
      stored[j] = j % 5 == 3 ? special[j / 5 % std::size(special)] : f32_to_f16(d.w[j]);
      widened[j] = f16_to_f32(stored[j]);
    }
    const PackedMatrix half =
        pack_weights_concat({{.rows = p.n, .f16_bits = stored.data()}}, p.k, PanelType::kF16);
    ASSERT_TRUE(half.is_f16() && !half.is_bf16());
    EXPECT_EQ(half.bytes(), half.num_panels() * p.k * kPanel * 2);
    std::vector<float> row(p.k);
    for (int64_t r = 0; r < p.n; ++r) {
      half.copy_row(r, row.data());
      for (int64_t c = 0; c < p.k; ++c) {
        ASSERT_EQ(bits(row[c]), bits(widened[r * p.k + c]));
        if (c % 5 == 0) {
          ASSERT_EQ(bits(half.at(r, c)), bits(widened[r * p.k + c]));
        }
      }
    }
    const auto want = contract_matmul(p, d.x.data(), widened, d.bias.data());
    expect_same_bits(p, want, run(p, d.x.data(), half, d.bias.data(), nullptr));
    EveryTarget::run([&] {
      for (ThreadPool* pool : {&one, &two}) {
        expect_same_bits(p, want, run(p, d.x.data(), half, d.bias.data(), pool));
      }
    });
  }
}

// Stacked fp16 matrices stay fp16 (panels copied, or repacked where a part
// ends inside a panel); fp16 beside bf16 or float32 stacks as float32.
TEST(Matmul, F16PartsStackAsF16) {
  const int64_t k = 19;
  const auto w = random_values(70 * k, 9);
  std::vector<uint16_t> stored(w.size());
  for (size_t j = 0; j < w.size(); ++j) stored[j] = f32_to_f16(w[j]);
  for (int64_t first : {32, 13}) {
    const PackedMatrix a =
        pack_weights_concat({{.rows = first, .f16_bits = stored.data()}}, k, PanelType::kF16);
    const PackedMatrix b = pack_weights_concat(
        {{.rows = 70 - first, .f16_bits = stored.data() + first * k}}, k, PanelType::kF16);
    const PackedMatrix all =
        pack_weights_concat({{.rows = 70, .f16_bits = stored.data()}}, k, PanelType::kF16);
    const PackedMatrix stacked = concat_packed({&a, &b});
    ASSERT_TRUE(stacked.is_f16());
    ASSERT_EQ(stacked.bytes(), all.bytes());
    EXPECT_EQ(std::memcmp(stacked.half.get(), all.half.get(), all.bytes()), 0);
    const PackedMatrix bf = pack_weights_bf16(w.data(), 70 - first, k);
    const PackedMatrix f32 = pack_weights(w.data(), 70 - first, k);
    for (const PackedMatrix* other : {&bf, &f32}) {
      const PackedMatrix mixed = concat_packed({&a, other});
      ASSERT_FALSE(mixed.is_half());
      for (int64_t r = 0; r < mixed.n; ++r) {
        const PackedMatrix& from = r < first ? a : *other;
        const int64_t fr = r < first ? r : r - first;
        for (int64_t c = 0; c < k; ++c) ASSERT_EQ(bits(mixed.at(r, c)), bits(from.at(fr, c)));
      }
    }
  }
}

// Values around 2^-126 where `tiny`: products and sums fall on both sides of
// the smallest normal, so every flush of the contract is exercised.
Data make_bf16_activations_data(const Problem& p, uint32_t seed, bool tiny) {
  Data d = make_data(p, seed);
  if (tiny) {
    for (float& v : d.w) v = std::ldexp(v, -60);
    for (float& v : d.x) v = std::ldexp(v, -66);
    for (size_t i = 0; i < d.bias.size(); i += 2) d.bias[i] = std::ldexp(d.bias[i], -126);
  }
  d.packed = pack_weights_bf16(d.w.data(), p.n, p.k);
  d.packed.bf16_activations = true;
  return d;
}

// bf16_activations on every target, with the CPU's bf16 dot products and
// without: bit for bit the contract above, whatever the batch, tiling and
// threads, for x that is not bf16 already (rounded by the kernel), odd K
// (the last pair half empty), several K ranges and row chunks, and values
// whose chains flush.
TEST(Matmul, Bf16ActivationsBitIdenticalToFlushedContract) {
  std::vector<Problem> problems;
  for (int64_t m : {1, 2, 14, 15, 40}) {
    for (int64_t n : {1, 17, 32, 70}) {
      for (int64_t k : {1, 7, 63, 64, 65, 577}) problems.push_back({m, n, k, m != 2, m == 15});
    }
  }
  problems.push_back({530, 45, 1600, true, true});
  problems.push_back({29, 70, 2048, true, false, 2048});
  problems.push_back({3, 200, 1537, false, false});
  ThreadPool one(1), two(2);
  int64_t flushed_outputs = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    for (bool tiny : {false, true}) {
      SCOPED_TRACE("problem " + std::to_string(i) + (tiny ? " tiny" : ""));
      const Data d = make_bf16_activations_data(p, static_cast<uint32_t>(3000 + i), tiny);
      const auto want = contract_matmul(p, d.x.data(), bf16_widened(d.w), d.bias.data(), true);
      if (tiny) {
        const auto plain = contract_matmul(p, d.x.data(), bf16_widened(d.w), d.bias.data());
        for (size_t e = 0; e < want.size(); ++e) flushed_outputs += bits(want[e]) != bits(plain[e]);
      }
      expect_same_bits(p, want, run(p, d, nullptr));
      EveryTarget::run([&] {
        for (bool dot : {true, false}) {
          set_matmul_bf16_dot_allowed(dot);
          SCOPED_TRACE(std::string("bf16 dot ") + (matmul_bf16_dot() ? "used" : "not used"));
          for (ThreadPool* pool : {&one, &two}) expect_same_bits(p, want, run(p, d, pool));
        }
        set_matmul_bf16_dot_allowed(true);
      });
    }
  }
  // The tiny problems reach the flushes (else they would test nothing more).
  EXPECT_GT(flushed_outputs, 1000);
}

TEST(Matmul, Bf16ActivationsNeedBf16Weights) {
  const std::vector<float> w(4 * 8, 0.5f), x(8, 1.0f);
  std::vector<float> y(4);
  PackedMatrix fp32 = pack_weights(w.data(), 4, 8);
  fp32.bf16_activations = true;
  ThreadPool pool(1);
  EXPECT_THROW(matmul({x.data(), 1, 8, &fp32, nullptr, y.data(), 4}, pool), InvalidArgument);
  EXPECT_THROW(matmul_reference({x.data(), 1, 8, &fp32, nullptr, y.data(), 4}), InvalidArgument);
}

// The bf16 dot product kernel runs wherever the CPU has one (an AVX-512 target
// and AVX512-BF16), so the test above covers it on such machines.
TEST(Matmul, Bf16DotUsedWhereTheCpuHasIt) {
#if defined(__x86_64__)
  const bool avx512 = hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL);
  EXPECT_EQ(matmul_bf16_dot(), avx512 && __builtin_cpu_supports("avx512bf16") &&
                                   (HWY_TARGETS & (HWY_AVX3 | HWY_AVX3_DL)) != 0);
  set_matmul_bf16_dot_allowed(false);
  EXPECT_FALSE(matmul_bf16_dot());
  set_matmul_bf16_dot_allowed(true);
#endif
}

// The tile chain of matmul.h from row-major W [n, k]: per block of kTileK
// (zero past K), the chain of the even k's and that of the odd k's, each
// from 0, summed; block sums added in order from 0; then the bias. Every
// operand and result flushed, x rounded to bf16 as for bf16_activations.
std::vector<float> contract_tiles(const Problem& p, const float* x, const std::vector<float>& w,
                                  const float* bias) {
  std::vector<float> y(p.m * p.ldy(), sentinel());
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t n = 0; n < p.n; ++n) {
      const auto xv = [&](int64_t k) {
        return k < p.k ? flushed(round_bf16(flushed(x[r * p.ldx() + k]))) : 0.0f;
      };
      const auto wv = [&](int64_t k) { return k < p.k ? flushed(w[n * p.k + k]) : 0.0f; };
      float total = 0.0f;
      for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
        float chains[2] = {0.0f, 0.0f};
        for (int64_t k = k0; k < k0 + kTileK; ++k) {
          chains[k % 2] = flushed(std::fma(xv(k), wv(k), chains[k % 2]));
        }
        total = flushed(total + flushed(chains[0] + chains[1]));
      }
      y[r * p.ldy() + n] = p.bias ? flushed(total + flushed(bias[n])) : total;
    }
  }
  return y;
}

// bf16_tiles on every target (AMX tiles where the CPU has AMX-BF16 and the
// target is AVX-512, the scalar chain elsewhere) and in the reference: bit
// for bit the contract above, whatever the batch (1 row to several row tiles
// and row chunks), threads, K (odd, under one block, not whole blocks),
// strides and values whose chains flush. The values are spread out, so the
// chain of bf16_activations (one chain per 64 k) would fail it.
TEST(Matmul, TileChainBitIdenticalToContract) {
  std::vector<Problem> problems;
  for (int64_t m : {1, 2, 16, 17, 40}) {
    for (int64_t n : {1, 17, 32, 70}) {
      for (int64_t k : {1, 7, 32, 63, 577}) problems.push_back({m, n, k, m != 2, m == 17});
    }
  }
  problems.push_back({530, 17, 1600, true, true});  // two row chunks
  // Columns split over two threads, x converted once for both: two row chunks.
  problems.push_back({900, 70, 576, true, false});
  problems.push_back({3, 17, 0, true, false});  // no k at all: the bias
  problems.push_back({29, 70, 2048, true, false, 2048});
  ThreadPool one(1), two(2);
  const int64_t amx_before = matmul_amx_products();
  bool amx_target = false;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    for (bool tiny : {false, true}) {
      SCOPED_TRACE("problem " + std::to_string(i) + (tiny ? " tiny" : ""));
      Data d = make_bf16_activations_data(p, static_cast<uint32_t>(5000 + i), tiny);
      d.packed = to_bf16_tiles(std::move(d.packed));
      ASSERT_TRUE(d.packed.bf16_tiles);
      const auto want = contract_tiles(p, d.x.data(), bf16_widened(d.w), d.bias.data());
      expect_same_bits(p, want, run(p, d, nullptr));
      EveryTarget::run([&] {
        amx_target |= std::string(matmul_target_name()).rfind("AVX3", 0) == 0;
        for (ThreadPool* pool : {&one, &two}) expect_same_bits(p, want, run(p, d, pool));
      });
    }
  }
  // Where the CPU has AMX-BF16, the tiles ran (on the AVX-512 targets).
  EXPECT_EQ(matmul_amx_products() > amx_before, amx_bf16_ready() && amx_target);
}

// The tile layout holds the same values: at(), copy_row(), stacking (whole
// panels copied, or repacked), and the size it reports.
TEST(Matmul, TileLayoutRoundTrips) {
  const Problem p{1, 70, 45, false, false};
  const Data d = make_bf16_activations_data(p, 77, false);
  const std::vector<float> wide = bf16_widened(d.w);
  PackedMatrix plain = pack_weights_bf16(d.w.data(), p.n, p.k);
  plain.bf16_activations = true;
  const PackedMatrix tiles = to_bf16_tiles(std::move(plain));
  EXPECT_EQ(tiles.bytes(), tiles.num_panels() * 64 * kPanel * 2);  // k 45 -> 64
  // Packed in the layout straight away (what the loader does), from floats or bf16 bits: the
  // same bytes, padding included.
  std::vector<uint16_t> stored(d.w.size());
  for (size_t i = 0; i < d.w.size(); ++i) stored[i] = bf16_bits(d.w[i]);
  for (const WeightRows& rows :
       {WeightRows{d.w.data(), p.n}, WeightRows{nullptr, p.n, stored.data()}}) {
    const PackedMatrix direct = pack_weights_concat({rows}, p.k, PanelType::kBF16, true);
    ASSERT_TRUE(direct.bf16_tiles && direct.bf16_activations);
    ASSERT_EQ(direct.bytes(), tiles.bytes());
    EXPECT_EQ(std::memcmp(direct.half.get(), tiles.half.get(), tiles.bytes()), 0);
  }
  EXPECT_THROW(pack_weights_concat({{d.w.data(), p.n}}, p.k, PanelType::kF32, true),
               InvalidArgument);
  EXPECT_THROW(pack_weights_concat({{d.w.data(), p.n}}, p.k, PanelType::kF16, true),
               InvalidArgument);
  std::vector<float> row(p.k);
  for (int64_t r = 0; r < p.n; ++r) {
    tiles.copy_row(r, row.data());
    for (int64_t c = 0; c < p.k; ++c) {
      ASSERT_EQ(bits(row[c]), bits(wide[r * p.k + c])) << r << "," << c;
      ASSERT_EQ(bits(tiles.at(r, c)), bits(wide[r * p.k + c])) << r << "," << c;
    }
  }
  const auto part = [&](int64_t r0, int64_t rows) {
    PackedMatrix m = pack_weights_bf16(d.w.data() + r0 * p.k, rows, p.k);
    m.bf16_activations = true;
    return to_bf16_tiles(std::move(m));
  };
  for (int64_t first : {32, 20}) {  // whole panels, then a part ending mid-panel
    const PackedMatrix a = part(0, first), b = part(first, p.n - first);
    const PackedMatrix both = concat_packed({&a, &b});
    ASSERT_TRUE(both.bf16_tiles);
    ASSERT_EQ(both.n, p.n);
    for (int64_t r = 0; r < p.n; ++r) {
      for (int64_t c = 0; c < p.k; ++c) ASSERT_EQ(bits(both.at(r, c)), bits(wide[r * p.k + c]));
    }
  }
  PackedMatrix fp32 = pack_weights(d.w.data(), p.n, p.k);
  EXPECT_THROW(to_bf16_tiles(std::move(fp32)), InvalidArgument);
  PackedMatrix no_activations = pack_weights_bf16(d.w.data(), p.n, p.k);
  EXPECT_THROW(to_bf16_tiles(std::move(no_activations)), InvalidArgument);
}

// The loader lays matrices out for tiles exactly where AMX-BF16 runs (and the switch allows).
TEST(Matmul, TilesChosenWhereTheCpuHasAmxBf16) {
  bool listed = false;
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[8192];
    while (std::fgets(line, sizeof line, f)) {
      const std::string s = line;
      if (s.rfind("flags", 0) == 0) {
        listed =
            s.find(" amx_bf16") != std::string::npos && s.find(" amx_tile") != std::string::npos;
        break;
      }
    }
    std::fclose(f);
  }
  EXPECT_EQ(amx_bf16_ready(), listed);
  EXPECT_EQ(matmul_bf16_tiles(), listed);
  set_matmul_bf16_tiles_allowed(false);
  EXPECT_FALSE(matmul_bf16_tiles());
  set_matmul_bf16_tiles_allowed(true);
}

TEST(Bf16, RoundsToNearestEvenLikeTorch) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(round_bf16(-2.5f), -2.5f);
  EXPECT_TRUE(std::isinf(round_bf16(3.4e38f)));  // rounds up past the largest bf16
  EXPECT_TRUE(std::isnan(round_bf16(std::nanf(""))));
  EXPECT_EQ(bf16_bits(std::nanf("")) & 0x7FC0u, 0x7FC0u);
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80u);
}

// A row's output does not depend on the other rows in the batch, on its slot,
// or on the thread count.
TEST(Matmul, BatchInvariant) {
  const int64_t n = 100, k = 577, max_m = 45;
  const Problem all{max_m, n, k, true, false};
  const Data d = make_data(all, 99);
  ThreadPool one(1), two(2);
  EveryTarget::run([&] {
    // Each row alone (M = 1).
    std::vector<std::vector<float>> alone(max_m);
    for (int64_t r = 0; r < max_m; ++r) {
      alone[r] = run({1, n, k, true, false}, d.x.data() + r * k, d.packed, d.bias.data(), &one);
    }
    for (int64_t m : {2, 3, 14, 15, 29, 45}) {
      for (ThreadPool* pool : {&one, &two}) {
        const Problem p{m, n, k, true, false};
        const auto y = run(p, d, pool);
        for (int64_t r = 0; r < m; ++r) {
          ASSERT_EQ(0, std::memcmp(y.data() + r * n, alone[r].data(), n * sizeof(float)))
              << "row " << r << " of " << m << " threads " << pool->num_threads();
        }
      }
    }
  });
}

// Pins the order: one fused chain over k = 0..K-1 starting from 0. Each case
// has an exact answer that another order or mul + add rounding would miss.
TEST(Matmul, FusedChainInKOrder) {
  const float e = std::ldexp(1.0f, -12);
  struct Case {
    std::vector<float> x, w;  // one row of x, one row of W (every row/column the same)
    float want;
  };
  const Case cases[] = {
      // 1e8, then 1e8 + 1 rounds back to 1e8, then 0, then 1. Pairwise or
      // reversed summation gives 0.
      {{1e8f, 1.0f, -1e8f, 1.0f}, {1.0f, 1.0f, 1.0f, 1.0f}, 1.0f},
      // -(1 + 2e) + (1 + e)^2 = e^2 = 2^-24 exactly with fma; mul + add rounds
      // (1 + e)^2 to 1 + 2e and gives 0.
      {{1.0f, 1.0f + e, 0.0f, 0.0f},
       {-(1.0f + 2 * e), 1.0f + e, 0.0f, 0.0f},
       std::ldexp(1.0f, -24)},
  };
  const int64_t m = 20, n = 70, k = 4;
  ThreadPool pool(2);
  for (const Case& c : cases) {
    std::vector<float> w, x;
    for (int64_t i = 0; i < n; ++i) w.insert(w.end(), c.w.begin(), c.w.end());
    for (int64_t i = 0; i < m; ++i) x.insert(x.end(), c.x.begin(), c.x.end());
    const PackedMatrix packed = pack_weights(w.data(), n, k);
    const Problem p{m, n, k, false, false};
    const auto ref = run(p, x.data(), packed, nullptr, nullptr);
    for (float v : ref) ASSERT_EQ(v, c.want);
    EveryTarget::run([&] {
      const auto y = run(p, x.data(), packed, nullptr, &pool);
      for (float v : y) ASSERT_EQ(v, c.want);
    });
  }
}

TEST(Matmul, PackedLayoutRoundTrips) {
  const int64_t n = 45, k = 19;
  const auto w = random_values(n * k, 5);
  const PackedMatrix p = pack_weights(w.data(), n, k);
  EXPECT_EQ(p.num_panels(), 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data.get()) % 64, 0u);
  std::vector<float> row(k);
  for (int64_t r = 0; r < n; ++r) {
    p.copy_row(r, row.data());
    for (int64_t c = 0; c < k; ++c) {
      ASSERT_EQ(row[c], w[r * k + c]);
      ASSERT_EQ(p.at(r, c), w[r * k + c]);
    }
  }
  for (int64_t r = n; r < 2 * kPanel; ++r) {
    for (int64_t c = 0; c < k; ++c) ASSERT_EQ(p.data[(k + c) * kPanel + r % kPanel], 0.0f);
  }
}

TEST(Matmul, EmptyAndDegenerateShapes) {
  ThreadPool pool(2);
  const std::vector<float> bias = {1.5f, -2.0f, 3.0f};
  const PackedMatrix k0 = pack_weights(nullptr, 3, 0);
  std::vector<float> y(6, sentinel());
  matmul({nullptr, 2, 0, &k0, bias.data(), y.data(), 3}, pool);
  EXPECT_EQ(y, (std::vector<float>{1.5f, -2.0f, 3.0f, 1.5f, -2.0f, 3.0f}));
  matmul({nullptr, 2, 0, &k0, nullptr, y.data(), 3}, pool);
  EXPECT_EQ(y, std::vector<float>(6, 0.0f));
  matmul({nullptr, 0, 0, &k0, nullptr, nullptr, 3}, pool);  // m = 0: nothing to do
}

TEST(Matmul, RejectsBadArguments) {
  ThreadPool pool(1);
  const std::vector<float> w(6, 1.0f), x(6, 1.0f);
  std::vector<float> y(6);
  const PackedMatrix p = pack_weights(w.data(), 2, 3);
  EXPECT_THROW(matmul({x.data(), 2, 2, &p, nullptr, y.data(), 2}, pool), InvalidArgument);
  EXPECT_THROW(matmul({x.data(), 2, 3, &p, nullptr, y.data(), 1}, pool), InvalidArgument);
  EXPECT_THROW(matmul({x.data(), 2, 3, nullptr, nullptr, y.data(), 2}, pool), InvalidArgument);
  EXPECT_THROW(matmul_reference({x.data(), 2, 3, &p, nullptr, nullptr, 2}), InvalidArgument);
}

}  // namespace
}  // namespace hubzoo
