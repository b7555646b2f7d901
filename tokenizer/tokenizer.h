// A tokenizer read from a Hub tokenizer.json, producing exactly what HF
// `tokenizers` produces: added tokens -> normalizer -> pre-tokenizer -> model
// -> truncation -> post-processor -> padding; decode through the decoder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/components.h"
#include "tokenizer/encoding.h"
#include "tokenizer/token_models.h"

namespace hubzoo {

using tok::Encoding;

class Tokenizer {
 public:
  // Throws FileError / FormatError naming the file and what is wrong.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  static Tokenizer from_json(const nlohmann::json& j, const std::string& source = "tokenizer.json");
  // The same with the model already built (`j`'s "model" names only its
  // type): a GGUF's BPE tables go in as tables (tok::make_bpe).
  static Tokenizer from_json(const nlohmann::json& j, std::unique_ptr<tok::Model> model,
                             const std::string& source);
  // A snapshot directory holding tokenizer.json, used as transformers'
  // AutoTokenizer uses it: the class it picks rebuilds parts of the file
  // (tokenizer_class.h), then tokenizer_config.json applies on top (see
  // apply_tokenizer_config). from_file/from_json are HF `tokenizers` exactly.
  static Tokenizer from_pretrained(const std::filesystem::path& snapshot_dir);

  // Throws InvalidArgument when `text` is not valid UTF-8.
  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  // A pair (HF encode(text, pair)): the post-processor's pair template and
  // type ids. max_length > 0 truncates longest_first to max_length tokens in
  // all (special tokens included), as transformers' tokenizer(a, b,
  // truncation=True, max_length=...); 0 applies tokenizer.json's truncation,
  // if any, the same way. tokenizer/pair_encoding.cc.
  Encoding encode_pair(std::string_view text, std::string_view pair, bool add_special_tokens = true,
                       size_t max_length = 0) const;
  // Padding set to BatchLongest pads to the longest encoding of the batch.
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts,
                                     bool add_special_tokens = true) const;
  // Unknown ids are skipped, as HF does.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  // transformers' tokenizer(text) and decode() on top of the tokenizer.json
  // pipeline: no truncation or padding unless asked (the file's settings are
  // dropped); clean_up_tokenization_spaces applies to decode for non-BPE
  // models; add_bos_token / add_eos_token are ignored, as transformers ignores
  // them when tokenizer.json exists.
  // Throws FormatError naming the field when the config is malformed.
  void apply_tokenizer_config(const nlohmann::json& config, const std::string& source);

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  // Whether `id` is an added token marked special (structured generation
  // never emits one as text: grammar/token_vocabulary.h).
  bool is_special_id(int64_t id) const;
  // With added tokens, as HF's get_vocab_size(with_added_tokens=True).
  size_t vocab_size() const;

 private:
  struct Truncation {
    size_t max_length = 0;
    bool left = false;
  };
  struct Padding {
    std::optional<size_t> fixed;  // nullopt: BatchLongest
    std::optional<size_t> multiple_of;
    bool left = false;
    int64_t pad_id = 0, pad_type_id = 0;
    std::string pad_token = "[PAD]";
  };

  friend class DecodeStream;
  Encoding encode_unpadded(std::string_view text, bool add_special_tokens) const;
  // Added tokens, normalizer, pre-tokenizer and model: no truncation or special tokens.
  Encoding encode_raw(std::string_view text, int64_t type_id) const;
  std::string decode_raw(const std::vector<int64_t>& ids, bool skip_special_tokens) const;
  void pad(Encoding& e, size_t length) const;

  std::unique_ptr<tok::Normalizer> normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::Model> model_;
  std::unique_ptr<tok::PostProcessor> post_processor_;
  std::unique_ptr<tok::Decoder> decoder_;
  tok::AddedVocabulary added_;
  std::optional<Truncation> truncation_;
  std::optional<Padding> padding_;
  bool bpe_model_ = false;
  bool clean_up_spaces_ = false;
};

// Streaming detokenization: push ids one at a time, get the text they complete.
// Text is held back while it would end in an incomplete UTF-8 character, and
// the concatenation of everything returned equals decode() of all ids
// (HF tokenizers' DecodeStream).
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}
  // The newly completed text, or nullopt if none is complete yet.
  std::optional<std::string> step(int64_t id);

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int64_t> ids_;
  std::string prefix_;
  size_t prefix_index_ = 0;
};

}  // namespace hubzoo
