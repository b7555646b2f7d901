// GGUF metadata -> config.json / tensor map: bad metadata is a ConfigError
// naming the key; the shapes and transforms themselves are checked against
// transformers in python/tests/test_gguf_import.py.
#include "models/gguf_import.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "models/gemma.h"
#include "models/llama.h"

namespace hubzoo {
namespace {

using ojson = nlohmann::ordered_json;

ojson llama_meta() {
  return {{"general.architecture", "llama"},
          {"llama.embedding_length", 32},
          {"llama.block_count", 2},
          {"llama.feed_forward_length", 64},
          {"llama.attention.head_count", 4},
          {"llama.attention.head_count_kv", 2},
          {"llama.rope.dimension_count", 8},
          {"llama.rope.freq_base", 10000.0},
          {"tokenizer.ggml.tokens", {"a", "b"}}};
}

// The ConfigError message of gguf_config(meta), or "" when it does not throw.
std::string config_error(const ojson& meta) {
  try {
    gguf_config(meta, {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(GgufConfig, LlamaFields) {
  const ojson c = gguf_config(llama_meta(), {"token_embd.weight"});
  EXPECT_EQ(c["architectures"], ojson::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["head_dim"], 8);
  EXPECT_EQ(c["vocab_size"], 2);
  EXPECT_EQ(c["rope_parameters"]["rope_theta"], 10000.0);
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(gguf_config(llama_meta(), {"output.weight"})["tie_word_embeddings"], false);
}

TEST(GgufConfig, UnsupportedArchitectureNamesItAndTheSupportedOnes) {
  ojson m = llama_meta();
  m["general.architecture"] = "mamba";
  const std::string e = config_error(m);
  EXPECT_NE(e.find("'mamba' is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("llama, qwen2, qwen3, qwen3moe, gemma2, gemma3"), std::string::npos) << e;
  m.erase("general.architecture");
  EXPECT_NE(config_error(m).find("'general.architecture'"), std::string::npos);
}

TEST(GgufConfig, MissingRequiredKeyIsNamed) {
  for (const char* key : {"llama.embedding_length", "llama.block_count",
                          "llama.feed_forward_length", "llama.attention.head_count"}) {
    ojson m = llama_meta();
    m.erase(key);
    const std::string e = config_error(m);
    EXPECT_NE(e.find(std::string("missing required key '") + key + "'"), std::string::npos) << e;
  }
}

TEST(GgufConfig, AbsurdOrMistypedValuesAreNamed) {
  const std::vector<std::pair<const char*, ojson>> cases = {
      {"llama.block_count", 1000000000000000LL},
      {"llama.block_count", 0},
      {"llama.embedding_length", -5},
      {"llama.embedding_length", 18446744073709551615ULL},
      {"llama.feed_forward_length", 1.5},
      {"llama.attention.head_count", "4"},
      {"llama.attention.head_count_kv", 3},  // does not divide 4 heads
      {"llama.rope.dimension_count", 1 << 20},
      {"llama.context_length", -1},
      {"llama.rope.freq_base", -1.0},
      {"llama.attention.layer_norm_rms_epsilon", 2.0},
      {"llama.vocab_size", 1LL << 40},
  };
  for (const auto& [key, value] : cases) {
    ojson m = llama_meta();
    m[key] = value;
    const std::string e = config_error(m);
    EXPECT_NE(e.find(std::string("'") + key + "'"), std::string::npos) << key << ": " << e;
  }
  ojson m = llama_meta();
  m["tokenizer.ggml.bos_token_id"] = 9;  // beyond the 2-token vocabulary
  EXPECT_NE(config_error(m).find("'tokenizer.ggml.bos_token_id'"), std::string::npos);
}

TEST(GgufConfig, Gemma3RopeAndWindow) {
  ojson m = {{"general.architecture", "gemma3"},
             {"gemma3.embedding_length", 64},
             {"gemma3.block_count", 2},
             {"gemma3.feed_forward_length", 128},
             {"gemma3.attention.head_count", 4},
             {"gemma3.attention.key_length", 16},
             {"gemma3.attention.sliding_window", 8},
             {"gemma3.rope.freq_base", 1e6}};
  const ojson c = gguf_config(m, {});
  EXPECT_EQ(c["architectures"], ojson::array({"Gemma3ForCausalLM"}));
  EXPECT_EQ(c["model_type"], "gemma3_text");
  EXPECT_EQ(c["head_dim"], 16);
  EXPECT_EQ(c["sliding_window"], 8);
  EXPECT_EQ(c["rope_parameters"]["full_attention"]["rope_theta"], 1e6);
  EXPECT_EQ(c["rope_parameters"]["sliding_attention"]["rope_theta"], 10000.0);
}

// The configs made here are what hubzoo's own family parsers take.
TEST(GgufConfig, FamilyParsersAcceptTheResult) {
  const JsonObject llama(nlohmann::json::parse(gguf_config(llama_meta(), {}).dump()), "gguf");
  const DecoderSpec spec = llama_spec(llama, LlamaVariant{});
  EXPECT_EQ(spec.hidden_size, 32);
  EXPECT_EQ(spec.vocab_size, 2);
  EXPECT_TRUE(spec.tie_word_embeddings);
  EXPECT_EQ(spec.rope_full.theta, 10000.0);

  ojson m = {{"general.architecture", "gemma3"},
             {"gemma3.embedding_length", 64},
             {"gemma3.block_count", 6},
             {"gemma3.feed_forward_length", 128},
             {"gemma3.attention.head_count", 4},
             {"gemma3.attention.key_length", 16},
             {"gemma3.attention.sliding_window", 8},
             {"gemma3.rope.freq_base", 1e6}};
  const GemmaConfig g =
      parse_gemma_config(JsonObject(nlohmann::json::parse(gguf_config(m, {}).dump()), "gguf"), 3);
  EXPECT_EQ(g.attn.head_dim, 16);
  EXPECT_EQ(g.sliding_window, 8);
  EXPECT_EQ(g.rope_full.theta, 1e6);
  EXPECT_EQ(g.rope_sliding.theta, 10000.0);
  ASSERT_EQ(g.layer_types.size(), 6u);  // Gemma3TextConfig's pattern: every 6th layer global
  EXPECT_EQ(g.layer_types[4], LayerType::kSliding);
  EXPECT_EQ(g.layer_types[5], LayerType::kFull);

  const ojson moe_meta = {
      {"general.architecture", "qwen3moe"}, {"qwen3moe.embedding_length", 32},
      {"qwen3moe.block_count", 2},          {"qwen3moe.feed_forward_length", 64},
      {"qwen3moe.attention.head_count", 4}, {"qwen3moe.expert_count", 8},
      {"qwen3moe.expert_used_count", 2},    {"qwen3moe.expert_feed_forward_length", 48}};
  const SparseLayers moe = parse_qwen3_moe_layers(
      JsonObject(nlohmann::json::parse(gguf_config(moe_meta, {}).dump()), "gguf"), 32, 2);
  EXPECT_EQ(moe.moe.num_experts, 8);
  EXPECT_EQ(moe.moe.num_experts_per_tok, 2);
  EXPECT_EQ(moe.moe.moe_intermediate_size, 48);
  EXPECT_TRUE(moe.moe.norm_topk_prob);
}

TEST(GgufUnpermute, InvertsLlamaCppsInterleave) {
  // 1 head of 2 * 2 rows: GGUF rows [r0, r2, r1, r3] of HF's [r0, r1, r2, r3].
  EXPECT_EQ(gguf_unpermute_rows(4, 1), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(gguf_unpermute_rows(8, 2), (std::vector<int64_t>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_THROW(gguf_unpermute_rows(6, 2), InvalidArgument);
  EXPECT_THROW(gguf_unpermute_rows(4, 0), InvalidArgument);
}

TEST(GgufTensorMap, NamesTransformsAndErrors) {
  const ojson meta = llama_meta();
  const std::vector<std::string> names = {"token_embd.weight", "blk.1.attn_q.weight",
                                          "blk.0.attn_k.weight", "blk.0.ffn_norm.weight",
                                          "rope_freqs.weight"};
  const ojson config = gguf_config(meta, names);
  const GgufTensorMap map = gguf_tensor_map(meta, config, names);
  ASSERT_EQ(map.tensors.size(), 4u);
  EXPECT_EQ(map.tensors[1].hf_name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(map.tensors[1].row_perm, gguf_unpermute_rows(32, 4));
  EXPECT_EQ(map.tensors[2].row_perm, gguf_unpermute_rows(16, 2));
  EXPECT_EQ(map.tensors[3].hf_name, "model.layers.0.post_attention_layernorm.weight");
  EXPECT_FALSE(map.tensors[3].subtract_one);
  ASSERT_EQ(map.ignored.size(), 1u);
  EXPECT_EQ(map.ignored[0].rfind("rope_freqs.weight:", 0), 0u);
  for (const char* bad : {"blk.2.attn_q.weight", "blk.0.mystery.weight", "extra.weight",
                          "blk.99999999999.attn_q.weight"}) {
    EXPECT_THROW(gguf_tensor_map(meta, config, {bad}), TensorMappingError) << bad;
  }
}

}  // namespace
}  // namespace hubzoo
