// WordPiece (HF models/wordpiece): greedy longest-prefix match, continuation
// pieces prefixed with "##"; a word with no full cover becomes [UNK].
#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/token_models.h"

namespace hubzoo::tok {

VocabMap parse_vocab_object(const Json& j, const Source& src);

namespace {

// The vocabulary as an open-addressing hash table over one buffer of token
// bytes: a lookup that fails (most of WordPiece's do) costs one probe of a
// slot holding the hash, where the node-based VocabMap chases pointers.
class FlatVocab {
 public:
  FlatVocab() : slots_(16) {}
  explicit FlatVocab(const VocabMap& vocab) {
    size_t slots = 16;
    while (slots < 2 * vocab.size()) slots *= 2;
    slots_.assign(slots, Slot{});
    for (const auto& [token, id] : vocab) {
      const uint64_t h = hash(token);
      size_t i = h & (slots - 1);
      while (slots_[i].len != kEmpty) i = (i + 1) & (slots - 1);
      slots_[i] = {h, static_cast<uint32_t>(bytes_.size()), static_cast<uint32_t>(token.size()),
                   id};
      bytes_ += token;
    }
  }

  std::optional<uint32_t> find(std::string_view token) const {
    const uint64_t h = hash(token);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask; slots_[i].len != kEmpty; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.hash == h && s.len == token.size() &&
          std::string_view(bytes_).substr(s.offset, s.len) == token) {
        return s.id;
      }
    }
    return std::nullopt;
  }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, len = kEmpty, id = 0;
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

  std::vector<Slot> slots_;
  std::string bytes_;
};

class WordPiece : public Model {
 public:
  WordPiece(const Json& j, const Source& src) {
    set_vocab(parse_vocab_object(field(j, "vocab", src), src));
    unk_ = j.value("unk_token", std::string("[UNK]"));
    prefix_ = j.value("continuing_subword_prefix", std::string("##"));
    max_chars_ =
        uint_or(j, "max_input_chars_per_word", 100, std::numeric_limits<size_t>::max(), src);
    for (const auto& [token, id] : vocab_)
      max_token_bytes_ = std::max(max_token_bytes_, token.size());
    flat_ = FlatVocab(vocab_);
  }

  std::vector<Token> tokenize(std::string_view word) const override {
    if (count_chars(word) > max_chars_) return {unk_token(word)};
    std::vector<Token> out;
    std::string sub;  // the candidate piece, prefix included
    size_t start = 0;
    while (start < word.size()) {
      // No vocabulary token is longer than max_token_bytes_, so candidates start
      // at the last character boundary within that many bytes.
      size_t end = word.size();
      if (end - start > max_token_bytes_) {
        end = start + max_token_bytes_;
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
      }
      bool found = false;
      while (start < end) {
        sub.assign(start > 0 ? prefix_ : std::string_view());
        sub.append(word.substr(start, end - start));
        if (auto id = flat_.find(sub)) {
          out.push_back({*id, sub, {start, end}});
          found = true;
          break;
        }
        // Step back one character (the last one of `sub`, prefix included).
        size_t back = end - 1;
        while (back > start && (static_cast<unsigned char>(word[back]) & 0xC0) == 0x80) --back;
        end = back;
      }
      if (!found) return {unk_token(word)};
      start = end;
    }
    return out;
  }

 private:
  Token unk_token(std::string_view word) const {
    auto id = token_to_id(unk_);
    if (!id) throw InvalidArgument("WordPiece: unk token '" + unk_ + "' is not in the vocabulary");
    return {*id, unk_, {0, word.size()}};
  }

  std::string unk_, prefix_;
  size_t max_chars_ = 100;
  size_t max_token_bytes_ = 0;
  FlatVocab flat_;  // vocab_, for the lookups of tokenize
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const Json& j, const Source& src) {
  return std::make_unique<WordPiece>(j, src);
}

}  // namespace hubzoo::tok
