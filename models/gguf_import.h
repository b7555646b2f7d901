// A GGUF file's metadata as the Hub snapshot hubzoo already loads: config.json
// and the GGUF -> HF tensor name map with the transform each tensor needs,
// as transformers 5.23 builds them for `from_pretrained(dir, gguf_file=...)`
// (modeling_gguf_pytorch_utils.load_gguf_checkpoint, integrations/ggml.py).
//
// Input is the metadata object GgufFile::metadata() returns (key -> value,
// arrays as JSON arrays) and the file's tensor names, so nothing here depends
// on how the file was read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hubzoo {

// The GGUF architectures (`general.architecture`) hubzoo imports.
const std::vector<std::string>& gguf_supported_architectures();

// config.json for the file. Keys are those transformers' AutoConfig sets from
// the metadata (architectures, model_type, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim where
// the file states it, max_position_embeddings, rms_norm_eps, rope_parameters,
// sliding_window, vocab_size, tie_word_embeddings, bos/eos/unk/pad_token_id,
// MoE counts); keys the file does not state are left out so the family's
// parser applies transformers' class defaults.
//
// ConfigError naming: an unsupported `general.architecture` (and the supported
// ones); a missing required key (block_count, embedding_length,
// feed_forward_length, attention.head_count); a value of the wrong type or out
// of range (each size bounded before use).
// `tensor_names`: every tensor in the file (tie_word_embeddings is true when
// there is no `output.weight`, as transformers decides).
nlohmann::ordered_json gguf_config(const nlohmann::ordered_json& metadata,
                                   const std::vector<std::string>& tensor_names);

// One GGUF tensor as an HF checkpoint tensor.
struct GgufTensorMapping {
  std::string gguf_name;  // "blk.3.attn_q.weight"
  std::string hf_name;    // "model.layers.3.self_attn.q_proj.weight"
  // llama.cpp's q/k row interleave undone (llama only): HF row i is GGUF row
  // row_perm[i] (weights: whole rows, so quantized rows move as they are;
  // biases: elements). Empty: rows as stored.
  std::vector<int64_t> row_perm;
  // Gemma norms: llama.cpp stores 1 + w; HF holds w = stored - 1.
  bool subtract_one = false;
  // Qwen3-MoE experts: ffn_gate_exps [E, I, H] and ffn_up_exps [E, I, H] are
  // the two halves of HF's fused `experts.gate_up_proj` [E, 2I, H]: this
  // tensor fills rows [fused_part * I, (fused_part + 1) * I) of every expert
  // (gate 0, up 1). -1: the tensor is the whole HF tensor.
  int fused_part = -1;
};

struct GgufTensorMap {
  std::vector<GgufTensorMapping> tensors;  // in `tensor_names` order
  // GGUF tensors transformers does not load, each "name: reason"
  // (e.g. llama's rope_freqs.weight).
  std::vector<std::string> ignored;
};

// The name map and per-tensor transforms for the file's tensors. `config` is
// gguf_config()'s result for the same file (head counts and head_dim size the
// q/k permutation). TensorMappingError naming a tensor that maps to nothing.
GgufTensorMap gguf_tensor_map(const nlohmann::ordered_json& metadata,
                              const nlohmann::ordered_json& config,
                              const std::vector<std::string>& tensor_names);

// llama.cpp's permute undone, as transformers' _reverse_permute_weights: rows
// = n_head * 2 * dim, GGUF row h*2*dim + 2*j + a is HF row h*2*dim + a*dim + j.
// InvalidArgument when rows is not a multiple of 2 * n_head.
std::vector<int64_t> gguf_unpermute_rows(int64_t rows, int64_t n_head);

}  // namespace hubzoo
