// The block type --quantize gives each matrix. A plain type (q8_0, q4_k, ...)
// quantizes every matrix whose rows are whole blocks and keeps the others
// float. The mixes q4_k_m / q5_k_m follow llama-quantize's choices for its
// Q4_K_M / Q5_K_M file types without an importance matrix
// (llama_tensor_get_type in llama.cpp's src/llama-quant.cpp), for the dense
// models hubzoo runs:
// - output (lm_head, or the embedding table when tied): Q6_K, or Q8_0 when
//   its rows are not whole 256-blocks;
// - v_proj and down_proj of the layers use_more_bits picks (the first and
//   last eighth and every third between): Q6_K;
// - a fused qkv_proj: Q5_K (q4_k_m) / Q6_K (q5_k_m);
// - everything else the base type (Q4_K / Q5_K);
// then llama-quantize's fallback for rows that are not whole blocks: Q4_K ->
// Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (a matrix that fits none stays float,
// where llama-quantize writes F16).
// Not reproduced: llama.cpp's rules for Falcon, 70B models and 8-expert MoE
// models; stacked MoE experts take the dense rules of their layer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layers/numerics.h"
#include "tensor/quant_type.h"

namespace hubzoo {

struct QuantMixModel {
  int64_t n_layers = 0;  // 1 + the largest N of the names' "layers.N."
  bool tied = false;     // no lm_head.weight: the embedding table is the output
};
// What the mixes need to know of a checkpoint, from its tensor names.
QuantMixModel quant_mix_model(const std::vector<std::string>& names);

struct QuantMixTensor {
  const std::string& name;  // the HF tensor name
  int64_t k = 0;            // columns
};
// The type of matrix `t` under numerics.quantize / quant_mix; nullopt: keep it float.
std::optional<QuantType> quant_mix_type(const Numerics& numerics, const QuantMixModel& model,
                                        const QuantMixTensor& t);

}  // namespace hubzoo
