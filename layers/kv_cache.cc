#include "layers/kv_cache.h"

#include <algorithm>

#include "base/error.h"
#include "ops/attend_online.h"

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
    if (s.blocked_keys && s.window > 0) {
      throw InvalidArgument("KvCache: a ring-buffer layer cannot keep blocked keys");
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
    if (vv.size() < need) {
      // Grow geometrically so decoding does not reallocate every step; a
      // ring buffer never beyond its window.
      size_t grown = std::max(need, vv.size() * 3 / 2);
      if (s.window > 0) grown = std::min(grown, static_cast<size_t>(s.window * s.row_size));
      vv.reserve(grown);  // exactly `grown`: bytes() reports capacity
      vv.resize(grown);
      // Blocked keys: whole blocks (a position past `grown` rows may sit in
      // the last block; its lanes are never read).
      const size_t key_floats = s.blocked_keys ? key_block_floats(s, grown / s.row_size) : grown;
      kk.reserve(key_floats);
      kk.resize(key_floats);
    }
  }
}

void KvCache::set_token_id(int64_t slot, int64_t pos, int32_t id) {
  auto& ids = token_ids_.at(slot);
  if (pos < 0 || pos > static_cast<int64_t>(ids.size())) {
    throw InvalidArgument("KvCache: token id at position " + std::to_string(pos) + " of slot " +
                          std::to_string(slot) + " does not continue its ids");
  }
  if (pos == static_cast<int64_t>(ids.size())) {
    ids.push_back(id);
  } else {
    ids[pos] = id;
  }
}

void KvCache::clear(int64_t slot) {
  lengths_[slot] = 0;
  if (keeps_token_ids()) std::vector<int32_t>().swap(token_ids_[slot]);
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
    const int64_t key_floats = s.blocked_keys ? key_block_floats(s, rows) : rows * s.row_size;
    total += (key_floats + rows * s.row_size) * static_cast<int64_t>(sizeof(float));
  }
  return total;
}

int64_t KvCache::key_block_floats(const KvLayerSpec& s, int64_t rows) {
  return (rows + kKeyBlock - 1) / kKeyBlock * kKeyBlock * s.row_size;
}

void KvCache::store_key(int64_t layer, int64_t slot, int64_t pos, const float* key_row) {
  const KvLayerSpec& s = layers_[layer];
  if (!s.blocked_keys) {
    std::copy_n(key_row, s.row_size, key(layer, slot, pos));
    return;
  }
  float* block = k(layer, slot) + pos / kKeyBlock * s.row_size * kKeyBlock + pos % kKeyBlock;
  for (int64_t c = 0; c < s.row_size; ++c) block[c * kKeyBlock] = key_row[c];
}

}  // namespace hubzoo
