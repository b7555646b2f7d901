// Linear (y = x W^T + b) and RMSNorm over rows of a [M, features] buffer.
#pragma once

#include <optional>
#include <string>

#include "layers/weights.h"
#include "ops/matmul.h"

namespace hubzoo {

struct Linear {
  PackedMatrix weight;  // [out, in], packed
  std::optional<FloatWeights> bias;

  static Linear load(WeightLoader& w, const std::string& prefix, int64_t in, int64_t out,
                     bool has_bias);
  int64_t in_features() const { return weight.k; }
  int64_t out_features() const { return weight.n; }
  // x: [m, in] -> y: [m, out]
  void forward(const float* x, int64_t m, float* y, ThreadPool& pool) const;
};

struct RMSNorm {
  FloatWeights weight;  // [n]
  float eps = 1e-6f;

  static RMSNorm load(WeightLoader& w, const std::string& name, int64_t n, float eps);
  int64_t size() const { return weight.size(); }
  // Normalises `rows` rows of size() floats: x: [rows, n] -> out (may alias x).
  void forward(const float* x, int64_t rows, float* out) const;
};

}  // namespace hubzoo
