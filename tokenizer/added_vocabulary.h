// Added tokens (special or not): matched in the raw text, before the
// normalizer runs, and never split by the model (HF added_vocabulary.rs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/components.h"
#include "tokenizer/token_models.h"

namespace hubzoo::tok {

struct AddedToken {
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class AddedVocabulary {
 public:
  // Adds tokens in order; a token already in the model keeps the model's id,
  // others get the next free id (as HF's add_tokens).
  void add(const std::vector<AddedToken>& tokens, const Model& model, const Normalizer* normalizer);

  std::optional<uint32_t> token_to_id(std::string_view content) const;
  // The string decode uses: the normalized form for normalized tokens.
  std::optional<std::string> id_to_token(uint32_t id) const;
  bool is_special(std::string_view content) const {
    return special_.count(std::string(content)) > 0;
  }
  bool contains_id(uint32_t id) const { return by_id_.count(id) > 0; }
  size_t count_not_in(const Model& model) const;

  // Splits out added tokens: first the non-normalized ones in the raw text,
  // then the normalizer runs on what is left and normalized ones are matched.
  PreTokenizedString extract_and_normalize(const Normalizer* normalizer,
                                           std::string_view text) const;

 private:
  // A byte trie for leftmost-longest matching of token patterns.
  struct Matcher {
    std::vector<std::unordered_map<unsigned char, uint32_t>> next{{}};
    std::vector<int64_t> id{-1};
    void insert(std::string_view pattern, uint32_t token_id);
    bool empty() const { return next.size() == 1; }
  };
  std::vector<Split> split_with(NormalizedString&& s, const Matcher& m) const;

  std::unordered_map<std::string, uint32_t> by_content_;
  std::unordered_map<uint32_t, AddedToken> by_id_;
  std::unordered_map<uint32_t, std::string> normalized_form_;
  std::unordered_set<std::string> special_;
  Matcher raw_, normalized_;
};

}  // namespace hubzoo::tok
