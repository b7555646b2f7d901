#include "layers/kv_cache.h"

#include <algorithm>

namespace hubzoo {

KvCache::KvCache(int64_t num_layers, int64_t num_slots, int64_t row_size)
    : num_layers_(num_layers),
      num_slots_(num_slots),
      row_size_(row_size),
      keys_(num_layers * num_slots),
      values_(num_layers * num_slots),
      lengths_(num_slots, 0) {}

void KvCache::reserve(int64_t slot, int64_t n) {
  const size_t need = static_cast<size_t>(n * row_size_);
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    auto& kk = k(layer, slot);
    auto& vv = v(layer, slot);
    if (kk.size() < need) {
      // Grow geometrically so decoding does not reallocate every step.
      const size_t grown = std::max(need, kk.size() * 3 / 2);
      kk.resize(grown);
      vv.resize(grown);
    }
  }
}

void KvCache::clear(int64_t slot) {
  lengths_[slot] = 0;
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    std::vector<float>().swap(k(layer, slot));
    std::vector<float>().swap(v(layer, slot));
  }
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto& x : keys_) total += static_cast<int64_t>(x.capacity() * sizeof(float));
  for (const auto& x : values_) total += static_cast<int64_t>(x.capacity() * sizeof(float));
  return total;
}

}  // namespace hubzoo
