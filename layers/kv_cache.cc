#include "layers/kv_cache.h"

#include <algorithm>

#include "base/error.h"

namespace hubzoo {

KvCache::KvCache(int64_t num_layers, int64_t num_slots, int64_t row_size)
    : KvCache(std::vector<KvLayerSpec>(num_layers, KvLayerSpec{row_size, 0}), num_slots) {}

KvCache::KvCache(std::vector<KvLayerSpec> layers, int64_t num_slots)
    : layers_(std::move(layers)),
      num_slots_(num_slots),
      keys_(layers_.size() * num_slots),
      values_(layers_.size() * num_slots),
      lengths_(num_slots, 0) {
  for (const auto& s : layers_) {
    if (s.row_size <= 0 || s.window < 0) {
      throw InvalidArgument("KvCache: a layer needs row_size > 0 and window >= 0");
    }
  }
}

void KvCache::reserve(int64_t slot, int64_t n) {
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    const KvLayerSpec& s = layers_[layer];
    const int64_t rows = s.window > 0 ? std::min(n, s.window) : n;
    const size_t need = static_cast<size_t>(rows * s.row_size);
    auto& kk = keys_[index(layer, slot)];
    auto& vv = values_[index(layer, slot)];
    if (kk.size() < need) {
      // Grow geometrically so decoding does not reallocate every step; a
      // ring buffer never beyond its window.
      size_t grown = std::max(need, kk.size() * 3 / 2);
      if (s.window > 0) grown = std::min(grown, static_cast<size_t>(s.window * s.row_size));
      kk.reserve(grown);  // exactly `grown`: bytes() reports capacity
      vv.reserve(grown);
      kk.resize(grown);
      vv.resize(grown);
    }
  }
}

void KvCache::clear(int64_t slot) {
  lengths_[slot] = 0;
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    std::vector<float>().swap(keys_[index(layer, slot)]);
    std::vector<float>().swap(values_[index(layer, slot)]);
  }
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    for (int64_t slot = 0; slot < num_slots_; ++slot) total += bytes(layer, slot);
  }
  return total;
}

int64_t KvCache::bytes(int64_t layer, int64_t slot) const {
  const size_t floats =
      keys_[index(layer, slot)].capacity() + values_[index(layer, slot)].capacity();
  return static_cast<int64_t>(floats * sizeof(float));
}

int64_t KvCache::slot_bytes_at(int64_t n) const {
  int64_t total = 0;
  for (const auto& s : layers_) {
    const int64_t rows = s.window > 0 ? std::min(n, s.window) : n;
    total += 2 * rows * s.row_size * static_cast<int64_t>(sizeof(float));
  }
  return total;
}

}  // namespace hubzoo
