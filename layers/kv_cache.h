// Keys and values of every attention layer for a fixed number of sequence
// slots. Per (layer, slot) rows are [position, row_size(layer)], where a
// layer's row is num_kv_heads * head_dim of that layer (layers may differ).
//
// A layer with a window W > 0 (a sliding-window attention layer) holds only
// the last W positions, as a ring buffer: position p lives in row p % W, so
// its memory stops growing at W rows however long the sequence gets. A layer
// with window 0 holds every position. Which positions attention may read is
// attention's business (layers/attention.h); the cache only guarantees that a
// windowed layer still holds positions [length - W, length).
//
// The engine decides which request owns which slot; attention only reads and
// writes rows.
#pragma once

#include <cstdint>
#include <vector>

namespace hubzoo {

struct KvLayerSpec {
  int64_t row_size = 0;  // num_kv_heads * head_dim of the layer
  int64_t window = 0;    // > 0: keep only the last `window` positions (ring buffer)
  // Keys kept in blocks of kKeyBlock positions, transposed (window 0 only):
  // block b holds positions 16b .. 16b + 15 as [row_size][16], i.e. for each
  // key/value head the [head_dim][16] blocks ops/attend_online.h reads, so
  // attention never transposes them (key() is then not available).
  bool blocked_keys = false;
};

class KvCache {
 public:
  // Every layer alike: rows of `row_size`, every position kept.
  KvCache(int64_t num_layers, int64_t num_slots, int64_t row_size);
  KvCache(std::vector<KvLayerSpec> layers, int64_t num_slots);

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_slots() const { return num_slots_; }
  int64_t row_size(int64_t layer) const { return layers_[layer].row_size; }
  int64_t window(int64_t layer) const { return layers_[layer].window; }
  // Number of positions a slot has seen (all layers hold the same count once a
  // forward pass completes; a windowed layer stores only the last window of them).
  int64_t length(int64_t slot) const { return lengths_[slot]; }
  // Makes room for positions [0, n) of a slot in every layer (a windowed
  // layer: for its last min(n, window) positions).
  void reserve(int64_t slot, int64_t n);
  // Called once per forward pass, after every layer wrote position `pos`.
  void set_length(int64_t slot, int64_t n) { lengths_[slot] = n; }
  void clear(int64_t slot);
  // Bytes allocated (keys and values), in all and for one (layer, slot).
  int64_t bytes() const;
  int64_t bytes(int64_t layer, int64_t slot) const;
  // Bytes one slot's keys and values take at n positions: what a KV budget
  // must reserve per sequence of that length.
  int64_t slot_bytes_at(int64_t n) const;

  // The token id of each position of each slot, kept once asked for (a model
  // that may have to recompute a slot's cache from its tokens: Phi-3's
  // LongRoPE when a sequence first grows past its original length). clear()
  // forgets a slot's; they take 4 bytes a position.
  void keep_token_ids() { token_ids_.resize(num_slots_); }
  bool keeps_token_ids() const { return !token_ids_.empty(); }
  void set_token_id(int64_t slot, int64_t pos, int32_t id);
  const std::vector<int32_t>& token_ids(int64_t slot) const { return token_ids_.at(slot); }

  bool blocked_keys(int64_t layer) const { return layers_[layer].blocked_keys; }
  // Writes the key row of `pos` (row_size floats) in the layer's layout.
  void store_key(int64_t layer, int64_t slot, int64_t pos, const float* key_row);
  // A blocked layer's key blocks: block b at key_blocks() + b * row_size * kKeyBlock.
  const float* key_blocks(int64_t layer, int64_t slot) const {
    return keys_[index(layer, slot)].data();
  }

  // The row of `pos` (which a windowed layer must still hold); keys of a
  // layer without blocked keys only.
  float* key(int64_t layer, int64_t slot, int64_t pos) { return k(layer, slot) + row(layer, pos); }
  float* value(int64_t layer, int64_t slot, int64_t pos) {
    return v(layer, slot) + row(layer, pos);
  }
  const float* key(int64_t layer, int64_t slot, int64_t pos) const {
    return keys_[index(layer, slot)].data() + row(layer, pos);
  }
  const float* value(int64_t layer, int64_t slot, int64_t pos) const {
    return values_[index(layer, slot)].data() + row(layer, pos);
  }

 private:
  int64_t index(int64_t layer, int64_t slot) const { return layer * num_slots_ + slot; }
  static int64_t key_block_floats(const KvLayerSpec& s, int64_t rows);
  int64_t row(int64_t layer, int64_t pos) const {
    const KvLayerSpec& s = layers_[layer];
    return (s.window > 0 ? pos % s.window : pos) * s.row_size;
  }
  float* k(int64_t layer, int64_t slot) { return keys_[index(layer, slot)].data(); }
  float* v(int64_t layer, int64_t slot) { return values_[index(layer, slot)].data(); }
  std::vector<KvLayerSpec> layers_;
  int64_t num_slots_;
  std::vector<std::vector<float>> keys_, values_;  // [layer * num_slots + slot]
  std::vector<int64_t> lengths_;
  std::vector<std::vector<int32_t>> token_ids_;  // [slot][position], when kept
};

}  // namespace hubzoo
