// Loading a checkpoint's tensors under the tensor-mapping contract: every
// tensor is taken exactly once with the shape the config implies, or ignored
// with a stated reason; finish() reports whatever is left.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "ops/matmul.h"

namespace hubzoo {

// A float32 vector that points into the mapped checkpoint when it is stored
// as F32 (zero-copy) and owns a converted copy otherwise.
class FloatWeights {
 public:
  FloatWeights() = default;
  const float* data() const { return data_; }
  int64_t size() const { return size_; }
  float operator[](int64_t i) const { return data_[i]; }

 private:
  friend class WeightLoader;
  const float* data_ = nullptr;
  int64_t size_ = 0;
  std::vector<float> owned_;
};

class WeightLoader {
 public:
  explicit WeightLoader(std::shared_ptr<const Checkpoint> checkpoint);

  bool contains(const std::string& name) const;
  // Takes a tensor of exactly `shape` (F32, BF16 or F16) as float32.
  FloatWeights take(const std::string& name, const Shape& shape);
  // Takes a [n, k] linear weight and packs it for matmul; the mapped pages of
  // the original are released afterwards.
  PackedMatrix take_packed(const std::string& name, int64_t n, int64_t k);
  // Marks a tensor as deliberately unused.
  void ignore(const std::string& name, const std::string& reason);
  // Throws TensorMappingError naming every tensor neither taken nor ignored.
  void finish() const;

  const std::map<std::string, std::string>& ignored() const { return ignored_; }

 private:
  const TensorInfo& claim(const std::string& name, const Shape& shape);
  std::shared_ptr<const Checkpoint> ckpt_;
  std::map<std::string, bool> used_;
  std::map<std::string, std::string> ignored_;
};

}  // namespace hubzoo
