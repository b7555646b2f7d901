// AutoTokenizer's class choice and the classes' rewrites of tokenizer.json;
// parity with transformers lives in python/tests/test_tokenizer_classes.py.
#include "tokenizer/tokenizer_class.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace hubzoo::tok {
namespace {

std::string choice(const char* declared, const char* model_type, bool byte_level = false) {
  Json config = Json::object(), model = Json::object();
  if (declared) config["tokenizer_class"] = declared;
  if (model_type) model["model_type"] = model_type;
  Json file = {{"pre_tokenizer", byte_level ? Json{{"type", "ByteLevel"}} : Json()}};
  return auto_tokenizer_class(config, model, file);
}

TEST(TokenizerClass, AutoTokenizerChoice) {
  EXPECT_EQ(choice("Qwen2Tokenizer", "qwen2"), "Qwen2Tokenizer");
  EXPECT_EQ(choice("Qwen2TokenizerFast", "qwen3"), "Qwen2Tokenizer");
  EXPECT_EQ(choice(nullptr, "qwen3_moe"), "Qwen2Tokenizer");
  // qwen2's Hub class is replaced by the registered one; qwen3's is trusted.
  EXPECT_EQ(choice("PreTrainedTokenizerFast", "qwen2"), "Qwen2Tokenizer");
  EXPECT_EQ(choice("PreTrainedTokenizerFast", "qwen3"), kBackendClass);
  // A declared class that differs from a backend registration loads the file.
  EXPECT_EQ(choice("LlamaTokenizer", "mistral"), kBackendClass);
  EXPECT_EQ(choice("LlamaTokenizerFast", "phi3"), kBackendClass);
  EXPECT_EQ(choice("GPT2Tokenizer", "olmo2"), kBackendClass);
  EXPECT_EQ(choice("GPT2Tokenizer", "granite"), kBackendClass);
  // No registration for llama: the declared class, unless it is Llama over byte-level.
  EXPECT_EQ(choice("GPT2Tokenizer", "llama"), "GPT2Tokenizer");
  EXPECT_EQ(choice("LlamaTokenizerFast", "llama"), "LlamaTokenizer");
  EXPECT_EQ(choice("LlamaTokenizer", "llama", true), kBackendClass);
  EXPECT_EQ(choice("GemmaTokenizer", "gemma4"), "GemmaTokenizer");
  EXPECT_EQ(choice(nullptr, "gemma3_text"), "GemmaTokenizer");
  EXPECT_EQ(choice("BertTokenizer", nullptr), "BertTokenizer");
  EXPECT_EQ(choice("DistilBertTokenizerFast", "bert"), "DistilBertTokenizer");
  EXPECT_EQ(choice(nullptr, nullptr), kBackendClass);
  EXPECT_EQ(choice("SomeRemoteTokenizer", nullptr), "SomeRemoteTokenizer");
}

Json bpe_file() {
  return {{"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Whitespace"}}},
          {"decoder", nullptr},
          {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", Json::array()}}},
          {"added_tokens", Json::array()}};
}

TEST(TokenizerClass, Qwen2RebuildsPipelineAndAddsSpecials) {
  Json file = bpe_file();
  ASSERT_TRUE(apply_tokenizer_class("Qwen2Tokenizer", Json::object(), file, {"cfg"}));
  EXPECT_EQ(file["normalizer"]["type"], "NFC");
  EXPECT_EQ(file["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(file["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(file["model"]["ignore_merges"], false);
  // unk/eos/pad default to <|endoftext|>: added once, special, not normalized.
  ASSERT_EQ(file["added_tokens"].size(), 1u);
  EXPECT_EQ(file["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(file["added_tokens"][0]["special"], true);
  EXPECT_EQ(file["added_tokens"][0]["normalized"], false);
}

TEST(TokenizerClass, LlamaPrependSchemeFollowsSettings) {
  for (const auto& [config, scheme] : {std::pair{Json::object(), "first"},
                                       {Json{{"legacy", true}}, "always"},
                                       {Json{{"add_prefix_space", false}}, "never"}}) {
    Json file = bpe_file();
    ASSERT_TRUE(apply_tokenizer_class("LlamaTokenizer", config, file, {"cfg"}));
    EXPECT_EQ(file["pre_tokenizer"]["prepend_scheme"], scheme);
    EXPECT_EQ(file["decoder"]["decoders"].size(), scheme == std::string("never") ? 3u : 4u);
  }
}

TEST(TokenizerClass, OtherModelOrUnknownClassKeepsThePipeline) {
  Json file = bpe_file();
  EXPECT_FALSE(apply_tokenizer_class("BertTokenizer", Json::object(), file, {"cfg"}));
  EXPECT_FALSE(apply_tokenizer_class(kBackendClass, Json::object(), file, {"cfg"}));
  EXPECT_EQ(file["pre_tokenizer"]["type"], "Whitespace");
  EXPECT_TRUE(file["added_tokens"].empty());  // no class defaults when the class is not applied
}

TEST(TokenizerClass, BadSettingsNameTheField) {
  for (const auto& [config, field] :
       {std::pair{Json{{"add_prefix_space", "yes"}}, "add_prefix_space"},
        {Json{{"eos_token", 3}}, "eos_token"},
        {Json{{"added_tokens_decoder", {{"-1", {{"content", "x"}}}}}}, "added_tokens_decoder"},
        {Json{{"added_tokens_decoder", {{"7", {{"content", "x"}, {"special", "no"}}}}}}, "special"},
        {Json{{"extra_ids", -2}}, "extra_ids"}}) {
    const bool t5 = field == std::string("extra_ids");
    Json file = bpe_file();
    if (t5) file["model"] = {{"type", "Unigram"}, {"vocab", {{"a", 0.0}}}};
    const char* name = t5 ? "T5Tokenizer" : "Qwen2Tokenizer";
    try {
      apply_tokenizer_class(name, config, file, {"tokenizer_config.json"});
      ADD_FAILURE() << "no error for " << config.dump();
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace hubzoo::tok
