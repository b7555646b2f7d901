// The bytes each token id stands for, and a byte trie over them, built once
// per tokenizer. A grammar step walks the trie (grammar/matcher.h): a subtree
// whose prefix the automaton rejects is skipped whole, so a step costs far
// less than checking every token.
//
// Token strings are turned into bytes as the tokenizer's decoder would:
// byte-level BPE (GPT-2's byte-to-unicode table; a token with a character
// outside it, e.g. an added token, is taken as raw text, as HF's ByteLevel
// decoder does), metaspace ("▁" is a space) with byte fallback ("<0xHH>" is
// byte HH), or raw text. Special added tokens and ids without a token stand
// for no bytes and are never allowed as text (but those named to from_tokenizer).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hubzoo::grammar {

enum class VocabKind { kRaw, kByteLevel, kMetaspace };

class TokenVocabulary {
 public:
  // Detects the kind from the vocabulary: byte-level when every token maps
  // through the byte-to-unicode table and some use "Ġ"; metaspace when tokens
  // use "▁"; else raw.
  // `special_as_text`: special tokens whose content is one of these strings
  // stand for that text instead (tool-call markers such as Mistral's
  // "[TOOL_CALLS]", which a tool-call grammar writes).
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(
      const Tokenizer& tokenizer, const std::vector<std::string>& special_as_text = {});
  // Token bytes given directly (nullopt: never allowed as text). Tests and tools.
  static std::shared_ptr<const TokenVocabulary> from_bytes(
      std::vector<std::optional<std::string>> bytes, VocabKind kind = VocabKind::kRaw);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  VocabKind kind() const { return kind_; }
  // nullptr: the token is special or unknown.
  const std::string* bytes(int64_t id) const {
    return id >= 0 && id < size() && bytes_[id] ? &*bytes_[id] : nullptr;
  }

  // Trie in preorder: node 0 is the root (no byte). end[i] is one past node
  // i's subtree; the tokens ending at node i are token_ids[first_token[i] ..
  // first_token[i + 1]).
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<int32_t> depth, end, first_token;
    std::vector<int32_t> token_ids;
  };
  const Trie& trie() const { return trie_; }

 private:
  void build_trie();

  std::vector<std::optional<std::string>> bytes_;
  VocabKind kind_ = VocabKind::kRaw;
  Trie trie_;
};

// One token string as bytes for `kind` (exposed for tests).
std::string token_string_bytes(const std::string& token, VocabKind kind);

}  // namespace hubzoo::grammar
