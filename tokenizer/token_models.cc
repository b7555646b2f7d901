#include "tokenizer/token_models.h"

#include <cstdio>
#include <limits>

#include "base/error.h"

namespace hubzoo::tok {

std::optional<std::vector<uint32_t>> Model::byte_fallback_ids(std::string_view piece) const {
  std::vector<uint32_t> ids;
  for (unsigned char b : piece) {
    char code[8];
    std::snprintf(code, sizeof(code), "<0x%02X>", b);
    auto id = token_to_id(code);
    if (!id) return std::nullopt;
    ids.push_back(*id);
  }
  return ids;
}

std::optional<uint32_t> Model::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Model::id_to_token(uint32_t id) const {
  auto it = vocab_r_.find(id);
  if (it == vocab_r_.end()) return std::nullopt;
  return it->second;
}

void Model::set_vocab(VocabMap vocab) {
  vocab_ = std::move(vocab);
  vocab_r_.clear();
  for (const auto& [token, id] : vocab_) vocab_r_[id] = token;
}

namespace {

// Whole words looked up in a vocabulary (HF WordLevel).
class WordLevel : public Model {
 public:
  WordLevel(VocabMap vocab, std::string unk) : unk_(std::move(unk)) { set_vocab(std::move(vocab)); }
  std::vector<Token> tokenize(std::string_view word) const override {
    if (auto id = token_to_id(word)) return {{*id, std::string(word), {0, word.size()}}};
    if (auto id = token_to_id(unk_)) return {{*id, unk_, {0, word.size()}}};
    throw InvalidArgument("WordLevel: unk token '" + unk_ + "' is not in the vocabulary");
  }

 private:
  std::string unk_;
};

}  // namespace

VocabMap parse_vocab_object(const Json& j, const Source& src) {
  if (!j.is_object()) throw FormatError(src.file + ": model 'vocab' must be an object");
  VocabMap vocab;
  vocab.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    vocab[token] = static_cast<uint32_t>(
        to_uint(id, "vocab id of '" + token + "'", src, std::numeric_limits<uint32_t>::max()));
  }
  return vocab;
}

std::string model_type(const Json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"];
  if (!j.is_object()) return "";
  if (j.contains("merges")) return "BPE";  // older files omit the model type
  if (j.contains("vocab") && j["vocab"].is_array()) return "Unigram";
  if (j.contains("continuing_subword_prefix")) return "WordPiece";
  return "WordLevel";
}

std::unique_ptr<Model> make_model(const Json& j, const Source& src) {
  if (j.is_null()) throw FormatError(src.file + ": 'model' is missing");
  if (j.contains("type") && !j["type"].is_string())
    throw FormatError(src.file + ": model 'type' must be a string");
  const std::string type = model_type(j);
  if (type == "BPE") return make_bpe(j, src);
  if (type == "WordPiece") return make_wordpiece(j, src);
  if (type == "Unigram") return make_unigram(j, src);
  if (type == "WordLevel") {
    return std::make_unique<WordLevel>(parse_vocab_object(field(j, "vocab", src), src),
                                       j.value("unk_token", std::string("<unk>")));
  }
  unknown_type("model", type, src);
}

}  // namespace hubzoo::tok
