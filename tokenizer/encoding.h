// The result of encoding one text, field for field as HF `tokenizers.Encoding`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hubzoo::tok {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  // Offsets in characters (Unicode code points) of the input, as HF Python reports them.
  std::vector<std::pair<size_t, size_t>> offsets;
  std::vector<int64_t> type_ids;
  std::vector<int64_t> attention_mask;
  std::vector<int64_t> special_tokens_mask;
  std::vector<int64_t> word_ids;  // -1 for none

  size_t size() const { return ids.size(); }
  void push(int64_t id, std::string token, std::pair<size_t, size_t> offsets, int64_t type_id,
            bool special, int64_t word = -1) {
    ids.push_back(id);
    tokens.push_back(std::move(token));
    this->offsets.push_back(offsets);
    type_ids.push_back(type_id);
    attention_mask.push_back(1);
    special_tokens_mask.push_back(special ? 1 : 0);
    word_ids.push_back(word);
  }
  void append(const Encoding& o) {
    ids.insert(ids.end(), o.ids.begin(), o.ids.end());
    tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
    offsets.insert(offsets.end(), o.offsets.begin(), o.offsets.end());
    type_ids.insert(type_ids.end(), o.type_ids.begin(), o.type_ids.end());
    attention_mask.insert(attention_mask.end(), o.attention_mask.begin(), o.attention_mask.end());
    special_tokens_mask.insert(special_tokens_mask.end(), o.special_tokens_mask.begin(),
                               o.special_tokens_mask.end());
    word_ids.insert(word_ids.end(), o.word_ids.begin(), o.word_ids.end());
  }
};

// Keeps the first (left: the last) max_length tokens of e.
inline void truncate_encoding(Encoding& e, size_t max_length, bool left) {
  if (e.size() <= max_length) return;
  auto keep = [&](auto& v) {
    if (left) {
      v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(max_length));
    } else {
      v.resize(max_length);
    }
  };
  keep(e.ids), keep(e.tokens), keep(e.offsets), keep(e.type_ids);
  keep(e.attention_mask), keep(e.special_tokens_mask), keep(e.word_ids);
}

}  // namespace hubzoo::tok
