// The quantizers (ops/quant.h): rows and matrices agree and round-trip
// within each type's error, what they write is pinned to kQuantizerRevision,
// and the chunked form writes what the whole-matrix call does. Their per-block bytes are held
// against gguf-py's and llama.cpp's quantizers in python/tests (test_quantize_on_load.py,
// test_quant_llama_ref.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/quant.h"
#include "ops/test_values.h"

// Header-only (libxxhash-dev): the digests of QuantizerRevision.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace hubzoo {
namespace {

// kQuantizerRevision (ops/quant.h) keys the quantize-on-load cache: this
// digest of every quantizer's output, on inputs that reach their edge cases
// (zero, tiny and large magnitudes, rows of one sign), is what revision 1
// writes. Output that moves fails here: give the quantizers a new revision
// and record its digests, or a cache would serve the old bytes.
TEST(QuantizerRevision, CoversEveryQuantizer) {
  static_assert(kQuantizerRevision == 1, "record the new revision's digests below");
  const std::pair<QuantType, uint64_t> expected[] = {
      {QuantType::Q8_0, 0x9a874d3ed6aacf14}, {QuantType::Q4_0, 0x0d1532769315677b},
      {QuantType::Q4_1, 0xe922c9e2d56aa51b}, {QuantType::Q5_0, 0x52bed50a2ebb3063},
      {QuantType::Q5_1, 0x1b313e9b9d265e34}, {QuantType::Q4_K, 0x9d923f48beaa284a},
      {QuantType::Q5_K, 0x5dbd58da0368826b}, {QuantType::Q6_K, 0x31438d4ca61486b4}};
  const int64_t n = 6, k = 512;
  std::vector<float> w = test::spread_values(n * k, 11, -12, 6);
  std::fill_n(w.begin(), k, 0.0f);                                 // a zero row
  for (int64_t c = 0; c < k; ++c) w[k + c] = std::fabs(w[k + c]);  // one sign
  for (int64_t c = 0; c < k; ++c) w[2 * k + c] = -std::fabs(w[2 * k + c]);
  for (int64_t c = 0; c < k; ++c) w[3 * k + c] *= 1e-30f;  // subnormal scales
  ThreadPool one(1), three(3);
  for (ThreadPool* pool : {&one, &three}) {
    for (const auto& [type, digest] : expected) {
      ASSERT_TRUE(can_quantize(type)) << quant_name(type);
      const QuantMatrix q = quantize_matrix(type, w.data(), n, k, *pool);
      EXPECT_EQ(XXH3_64bits(q.data, static_cast<size_t>(q.bytes())), digest) << quant_name(type);
    }
  }
  for (int t = 0; t < 256; ++t) {  // every type the quantizers know is covered
    const auto type = static_cast<QuantType>(t);
    if (!can_quantize(type)) continue;
    EXPECT_TRUE(std::any_of(std::begin(expected), std::end(expected),
                            [&](const auto& e) { return e.first == type; }))
        << quant_name(type) << " has a quantizer and no digest";
  }
}

// Chunked quantization writes the bytes of the whole-matrix call, reading
// every row once, in order, in chunks of whole rows of at most
// kQuantizeChunkFloats floats.
TEST(QuantizeMatrix, ChunkedEqualsWhole) {
  ThreadPool pool(2);
  for (const auto& shape : {std::pair<int64_t, int64_t>{4100, 512}, {3, 256}, {2049, 512}}) {
    const int64_t n = shape.first, k = shape.second;  // (a lambda below captures them)
    const std::vector<float> w = test::spread_values(n * k, 5, -8, 4);
    for (QuantType t : {QuantType::Q8_0, QuantType::Q4_K}) {
      const QuantMatrix whole = quantize_matrix(t, w.data(), n, k, pool);
      int64_t next = 0;
      const QuantMatrix chunked = quantize_matrix_chunked(
          t, n, k,
          [&](int64_t r0, int64_t r1, float* out) {
            EXPECT_EQ(r0, next);
            EXPECT_LE((r1 - r0) * k, kQuantizeChunkFloats);
            std::copy_n(w.data() + r0 * k, (r1 - r0) * k, out);
            next = r1;
          },
          pool);
      EXPECT_EQ(next, n);
      ASSERT_EQ(chunked.bytes(), whole.bytes());
      EXPECT_EQ(std::memcmp(chunked.data, whole.data, static_cast<size_t>(whole.bytes())), 0)
          << quant_name(t) << " n " << n;
    }
  }
}

TEST(Quantize, RoundTripAndMatrix) {
  ThreadPool pool(2);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int64_t n = 7, k = 512;
  std::vector<float> w(n * k);
  for (auto& v : w) v = normal(rng);
  for (int i = 0; i < 256; ++i) {  // every type with a quantizer
    const auto t = static_cast<QuantType>(i);
    if (!can_quantize(t)) continue;
    SCOPED_TRACE(std::string(quant_name(t)));
    const QuantMatrix q = quantize_matrix(t, w.data(), n, k, pool);
    std::vector<uint8_t> row(q.row_bytes);
    std::vector<float> back(k);
    double err = 0, norm = 0;
    for (int64_t r = 0; r < n; ++r) {
      quantize_row(t, w.data() + r * k, row.data(), k);
      EXPECT_EQ(std::memcmp(row.data(), q.row(r), q.row_bytes), 0);
      q.dequantize_row(r, back.data());
      for (int64_t j = 0; j < k; ++j) {
        err += std::pow(back[j] - w[r * k + j], 2);
        norm += std::pow(w[r * k + j], 2);
      }
    }
    // rms error: 8-bit well under 1%, 6-bit (Q6_K) under 3%, 5-bit under 6%,
    // 4-bit under 12%.
    const double bound = t == QuantType::Q8_0   ? 0.006
                         : t == QuantType::Q6_K ? 0.03
                         : (t == QuantType::Q5_0 || t == QuantType::Q5_1 || t == QuantType::Q5_K)
                             ? 0.06
                             : 0.12;
    EXPECT_LT(std::sqrt(err / norm), bound);
  }
  EXPECT_FALSE(can_quantize(QuantType::Q3_K));
  EXPECT_TRUE(can_quantize(QuantType::Q4_K));
  EXPECT_TRUE(can_quantize(QuantType::Q5_K));
  EXPECT_TRUE(can_quantize(QuantType::Q6_K));
}

}  // namespace
}  // namespace hubzoo
