// WordPiece (HF models/wordpiece): greedy longest-prefix match, continuation
// pieces prefixed with "##"; a word with no full cover becomes [UNK].
#include "base/error.h"
#include "tokenizer/models.h"

namespace hubzoo::tok {

VocabMap parse_vocab_object(const Json& j, const Source& src);

namespace {

class WordPiece : public Model {
 public:
  WordPiece(const Json& j, const Source& src) {
    set_vocab(parse_vocab_object(field(j, "vocab", src), src));
    unk_ = j.value("unk_token", std::string("[UNK]"));
    prefix_ = j.value("continuing_subword_prefix", std::string("##"));
    max_chars_ = j.value("max_input_chars_per_word", size_t{100});
  }

  std::vector<Token> tokenize(std::string_view word) const override {
    if (count_chars(word) > max_chars_) return {unk_token(word)};
    std::vector<Token> out;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      bool found = false;
      while (start < end) {
        std::string sub(word.substr(start, end - start));
        if (start > 0) sub = prefix_ + sub;
        if (auto id = token_to_id(sub)) {
          out.push_back({*id, std::move(sub), {start, end}});
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
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const Json& j, const Source& src) {
  return std::make_unique<WordPiece>(j, src);
}

}  // namespace hubzoo::tok
