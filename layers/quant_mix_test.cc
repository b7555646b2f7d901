#include "layers/quant_mix.h"

#include <gtest/gtest.h>

#include <map>

#include "base/error.h"

namespace hubzoo {
namespace {

// SmolLM2-135M's matrices (30 layers, tied embeddings, hidden 576, ffn 1536).
std::vector<std::pair<std::string, int64_t>> smollm2() {
  std::vector<std::pair<std::string, int64_t>> out = {{"model.embed_tokens.weight", 576}};
  for (int i = 0; i < 30; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj"})
      out.push_back({p + n + ".weight", 576});
    out.push_back({p + "mlp.down_proj.weight", 1536});
  }
  return out;
}

std::map<std::string, int> type_counts(const std::string& quantize) {
  Numerics n;
  n.set_quantize(quantize);
  std::vector<std::string> names;
  for (const auto& [name, k] : smollm2()) names.push_back(name);
  const QuantMixModel model = quant_mix_model(names);
  EXPECT_EQ(model.n_layers, 30);
  EXPECT_TRUE(model.tied);
  std::map<std::string, int> counts;
  for (const auto& [name, k] : smollm2()) {
    const std::optional<QuantType> t = quant_mix_type(n, model, {name, k});
    ++counts[t ? std::string(quant_name(*t)) : "float"];
  }
  return counts;
}

// The tensor types of llama-quantize's Q4_K_M file of SmolLM2-135M (llama.cpp
// of llama-cpp-python 0.3.36): v_proj of the 14 use_more_bits layers Q6_K ->
// Q8_0 and the other 16 Q4_K -> Q5_0 (576 columns are not whole 256-blocks),
// down_proj Q6_K / Q4_K, the tied embedding Q8_0, everything else Q5_0.
TEST(QuantMix, Q4KMMatchesLlamaQuantizeOnSmolLM2) {
  const std::map<std::string, int> want = {{"Q5_0", 166}, {"Q4_K", 16}, {"Q8_0", 15}, {"Q6_K", 14}};
  EXPECT_EQ(type_counts("q4_k_m"), want);
}

TEST(QuantMix, Q5KMAndPlainTypes) {
  const std::map<std::string, int> q5 = {{"Q5_1", 166}, {"Q5_K", 16}, {"Q8_0", 15}, {"Q6_K", 14}};
  EXPECT_EQ(type_counts("Q5_K_M"), q5);
  // A plain type quantizes whole-block rows only: Q4_K takes the 30 down_proj.
  EXPECT_EQ(type_counts("q4_k"), (std::map<std::string, int>{{"Q4_K", 30}, {"float", 181}}));
  EXPECT_EQ(type_counts("q8_0"), (std::map<std::string, int>{{"Q8_0", 211}}));
}

TEST(QuantMix, UntiedOutputFusedQkvAndNames) {
  Numerics n;
  n.set_quantize("q4_k_m");
  EXPECT_EQ(n.quantize_name(), "Q4_K_M");
  const std::vector<std::string> names = {"model.embed_tokens.weight", "lm_head.weight",
                                          "model.layers.7.self_attn.qkv_proj.weight"};
  const QuantMixModel m = quant_mix_model(names);
  EXPECT_FALSE(m.tied);
  EXPECT_EQ(m.n_layers, 8);
  EXPECT_EQ(quant_mix_type(n, m, {names[0], 512}), QuantType::Q4_K);  // untied embedding
  EXPECT_EQ(quant_mix_type(n, m, {names[1], 512}), QuantType::Q6_K);
  EXPECT_EQ(quant_mix_type(n, m, {names[2], 512}), QuantType::Q5_K);
  EXPECT_EQ(quant_mix_type(n, m, {names[2], 48}), std::nullopt);  // fits no block type
  n.set_quantize("q5_k_m");
  EXPECT_EQ(quant_mix_type(n, m, {names[2], 512}), QuantType::Q6_K);
  n.set_quantize("q4_0");
  EXPECT_EQ(n.quant_mix, QuantMix::kNone);
  EXPECT_EQ(n.quantize_name(), "Q4_0");
  EXPECT_THROW(n.set_quantize("q4_k_x"), InvalidArgument);
}

}  // namespace
}  // namespace hubzoo
