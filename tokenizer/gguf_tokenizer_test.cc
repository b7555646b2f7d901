// GGUF tokenizer metadata -> tokenizer.json: bad metadata is a ConfigError
// naming the key; ids are checked against transformers in
// python/tests/test_gguf_import.py.
#include "tokenizer/gguf_tokenizer.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace hubzoo {
namespace {

using ojson = nlohmann::ordered_json;

ojson spm_meta() {
  return {{"general.architecture", "llama"},
          {"tokenizer.ggml.model", "llama"},
          {"tokenizer.ggml.tokens", {"<unk>", "<s>", "\u2581", "a", "b", "ab", "\u2581ab"}},
          {"tokenizer.ggml.scores", {0.0, 0.0, -1.0, -2.0, -3.0, -1.5, -1.2}},
          {"tokenizer.ggml.token_type", {2, 3, 1, 1, 1, 1, 1}},
          {"tokenizer.ggml.bos_token_id", 1},
          {"tokenizer.ggml.unknown_token_id", 0}};
}

std::string tokenizer_error(const ojson& meta) {
  try {
    gguf_tokenizer_files(meta);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(GgufTokenizer, SentencepieceMergesFromScoresAndBos) {
  const GgufTokenizerFiles f = gguf_tokenizer_files(spm_meta());
  // generate_merges: best score first ("▁ab" -1.2 before "ab" -1.5).
  EXPECT_EQ(f.tokenizer["model"]["merges"],
            nlohmann::json::parse(R"([["\u2581", "ab"], ["a", "b"]])"));
  EXPECT_EQ(f.config["add_bos_token"], true);  // llama vocabularies default to BOS
  const Tokenizer tok = tokenizer_from_gguf_metadata(spm_meta(), "test.gguf");
  EXPECT_EQ(tok.encode("ab ab").ids, (std::vector<int64_t>{1, 6, 6}));
}

TEST(GgufTokenizer, BadMetadataIsNamed) {
  const std::vector<std::pair<const char*, ojson>> cases = {
      {"tokenizer.ggml.model", "bert"},
      {"tokenizer.ggml.model", 3},
      {"tokenizer.ggml.tokens", nullptr},
      {"tokenizer.ggml.tokens", ojson::array()},
      {"tokenizer.ggml.tokens", {1, 2}},
      {"tokenizer.ggml.scores", {1.0}},
      {"tokenizer.ggml.token_type", "x"},
      {"tokenizer.ggml.merges", {"a b c"}},
      {"tokenizer.ggml.bos_token_id", 7},
      {"tokenizer.ggml.eos_token_id", -1},
      {"tokenizer.ggml.add_bos_token", 1},
      {"tokenizer.chat_template", 5},
      {"tokenizer.ggml.tokens", {std::string(5000, 'x')}},
  };
  for (const auto& [key, value] : cases) {
    ojson m = spm_meta();
    if (value.is_null()) {
      m.erase(key);
    } else {
      m[key] = value;
    }
    const std::string e = tokenizer_error(m);
    EXPECT_NE(e.find(std::string("'") + key + "'"), std::string::npos) << key << ": " << e;
  }
}

}  // namespace
}  // namespace hubzoo
