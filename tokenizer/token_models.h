// Tokenizer models: one pre-tokenized word -> tokens (HF models/*).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/components.h"

namespace hubzoo::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  // Tokens of one word; offsets are bytes within `word`.
  virtual std::vector<Token> tokenize(std::string_view word) const = 0;
  std::optional<uint32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(uint32_t id) const;
  virtual size_t vocab_size() const { return vocab_.size(); }
  // byte_fallback: the ids of the "<0xXX>" tokens spelling every byte of
  // `piece`, or nullopt when one of them is missing from the vocabulary.
  std::optional<std::vector<uint32_t>> byte_fallback_ids(std::string_view piece) const;

 protected:
  void set_vocab(VocabMap vocab);
  VocabMap vocab_;
  std::unordered_map<uint32_t, std::string> vocab_r_;
};

std::unique_ptr<Model> make_model(const Json& j, const Source& src);
// The model's "type", inferred as HF does for older files that omit it.
std::string model_type(const Json& j);
std::unique_ptr<Model> make_bpe(const Json& j, const Source& src);
// A BPE model from tables instead of a JSON vocab and merges: the same model
// as make_bpe(j) where `options` is j without "vocab" and "merges", `vocab`
// is parse_vocab_object(j["vocab"]) and merge r (its rank) is the ids of its
// two tokens and of their concatenation. Built so for a GGUF's merges derived
// from scores (tokenizer/gguf_tokenizer.cc), which would otherwise be written
// to JSON and looked up again by string: 515k merges for Gemma's vocabulary.
struct BpeMerge {
  uint32_t left, right, merged;
};
std::unique_ptr<Model> make_bpe(const Json& options, VocabMap vocab,
                                const std::vector<BpeMerge>& merges, const Source& src);
std::unique_ptr<Model> make_wordpiece(const Json& j, const Source& src);
std::unique_ptr<Model> make_unigram(const Json& j, const Source& src);

}  // namespace hubzoo::tok
