// Keys and values of every attention layer for a fixed number of sequence
// slots. Per (layer, slot) rows are [position, num_kv_heads * head_dim].
// The engine decides which request owns which slot; attention only reads and
// writes rows.
#pragma once

#include <cstdint>
#include <vector>

namespace hubzoo {

class KvCache {
 public:
  KvCache(int64_t num_layers, int64_t num_slots, int64_t row_size);

  int64_t num_slots() const { return num_slots_; }
  int64_t row_size() const { return row_size_; }
  // Number of positions stored for a slot (all layers hold the same count
  // once a forward pass completes).
  int64_t length(int64_t slot) const { return lengths_[slot]; }
  // Makes room for positions [0, n) of a slot in every layer.
  void reserve(int64_t slot, int64_t n);
  // Called once per forward pass, after every layer wrote position `pos`.
  void set_length(int64_t slot, int64_t n) { lengths_[slot] = n; }
  void clear(int64_t slot);
  int64_t bytes() const;

  float* key(int64_t layer, int64_t slot, int64_t pos) { return &k(layer, slot)[pos * row_size_]; }
  float* value(int64_t layer, int64_t slot, int64_t pos) {
    return &v(layer, slot)[pos * row_size_];
  }
  const float* key(int64_t layer, int64_t slot, int64_t pos) const {
    return &keys_[layer * num_slots_ + slot][pos * row_size_];
  }
  const float* value(int64_t layer, int64_t slot, int64_t pos) const {
    return &values_[layer * num_slots_ + slot][pos * row_size_];
  }

 private:
  std::vector<float>& k(int64_t layer, int64_t slot) { return keys_[layer * num_slots_ + slot]; }
  std::vector<float>& v(int64_t layer, int64_t slot) { return values_[layer * num_slots_ + slot]; }
  int64_t num_layers_, num_slots_, row_size_;
  std::vector<std::vector<float>> keys_, values_;  // [layer * num_slots + slot]
  std::vector<int64_t> lengths_;
};

}  // namespace hubzoo
