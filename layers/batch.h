// A ragged batch of tokens: the rows every layer processes.
//
// Padding never reaches the layers: a batch is the concatenation of each
// sequence's real tokens, each tagged with its KV-cache slot and position.
// That keeps batch invariance structural: no row ever sees another row.
#pragma once

#include <cstdint>
#include <vector>

namespace hubzoo {

struct TokenBatch {
  std::vector<int32_t> ids;   // [M] token ids
  std::vector<int32_t> slot;  // [M] KV-cache slot (sequence) of each token
  std::vector<int32_t> pos;   // [M] position of each token in its sequence
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  void add(int32_t id, int32_t slot_index, int32_t position) {
    ids.push_back(id);
    slot.push_back(slot_index);
    pos.push_back(position);
  }
};

}  // namespace hubzoo
