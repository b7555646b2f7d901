// GGUF tensor names -> HF names and transforms (gguf-py's tensor name map as
// transformers' get_gguf_hf_weights_map uses it, and its TensorProcessors:
// LlamaTensorProcessor, Gemma2TensorProcessor, Qwen2MoeTensorProcessor).
#include <map>

#include "base/error.h"
#include "models/gguf_import.h"

namespace hubzoo {
namespace {

using ojson = nlohmann::ordered_json;

struct Leaf {
  const char* hf;
  int fused_part;
};

// blk.N.<leaf> -> model.layers.N.<hf>, for every family.
const std::map<std::string, Leaf>& common_leaves() {
  static const std::map<std::string, Leaf> m = {
      {"attn_norm", {"input_layernorm", -1}},    {"attn_q", {"self_attn.q_proj", -1}},
      {"attn_k", {"self_attn.k_proj", -1}},      {"attn_v", {"self_attn.v_proj", -1}},
      {"attn_output", {"self_attn.o_proj", -1}}, {"attn_q_norm", {"self_attn.q_norm", -1}},
      {"attn_k_norm", {"self_attn.k_norm", -1}}, {"ffn_gate", {"mlp.gate_proj", -1}},
      {"ffn_up", {"mlp.up_proj", -1}},           {"ffn_down", {"mlp.down_proj", -1}},
  };
  return m;
}

// Leaves whose HF name depends on the family.
const Leaf* family_leaf(const std::string& arch, const std::string& leaf) {
  static const std::map<std::string, Leaf> gemma = {
      {"ffn_norm", {"pre_feedforward_layernorm", -1}},
      {"post_attention_norm", {"post_attention_layernorm", -1}},
      {"post_ffw_norm", {"post_feedforward_layernorm", -1}},
  };
  static const std::map<std::string, Leaf> dense = {
      {"ffn_norm", {"post_attention_layernorm", -1}},
  };
  static const std::map<std::string, Leaf> moe = {
      {"ffn_norm", {"post_attention_layernorm", -1}},
      {"ffn_gate_inp", {"mlp.gate", -1}},
      {"ffn_gate_exps", {"mlp.experts.gate_up_proj", 0}},
      {"ffn_up_exps", {"mlp.experts.gate_up_proj", 1}},
      {"ffn_down_exps", {"mlp.experts.down_proj", -1}},
  };
  const auto& table = arch.rfind("gemma", 0) == 0 ? gemma : arch == "qwen3moe" ? moe : dense;
  const auto it = table.find(leaf);
  if (it != table.end()) return &it->second;
  const auto c = common_leaves().find(leaf);
  return c == common_leaves().end() ? nullptr : &c->second;
}

int64_t config_int(const ojson& config, const char* key, int64_t fallback) {
  const auto it = config.find(key);
  return it == config.end() || !it->is_number_integer() ? fallback : it->get<int64_t>();
}

// Splits "blk.N.leaf.suffix"; false when `name` is not of that form.
bool split_block_name(const std::string& name, int64_t& layer, std::string& leaf,
                      std::string& suffix) {
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t dot = name.find('.', 4);
  const size_t last = name.rfind('.');
  if (dot == std::string::npos || dot == 4 || last <= dot) return false;
  const std::string digits = name.substr(4, dot - 4);
  if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  layer = std::stoll(digits);
  leaf = name.substr(dot + 1, last - dot - 1);
  suffix = name.substr(last + 1);
  return suffix == "weight" || suffix == "bias";
}

// Llama's q/k permutation, only when the metadata states both head counts
// (transformers' LlamaTensorProcessor skips it otherwise).
void add_llama_permutation(const ojson& config, const std::string& leaf, GgufTensorMapping& t) {
  if (leaf != "attn_q" && leaf != "attn_k") return;
  if (!config.contains("num_attention_heads") || !config.contains("num_key_value_heads")) return;
  const int64_t heads = config_int(config, "num_attention_heads", 0);
  const int64_t kv = config_int(config, "num_key_value_heads", 0);
  const int64_t head_dim =
      config_int(config, "head_dim", config_int(config, "hidden_size", 0) / heads);
  const int64_t n_head = leaf == "attn_q" ? heads : kv;
  t.row_perm = gguf_unpermute_rows(n_head * head_dim, n_head);
}

}  // namespace

GgufTensorMap gguf_tensor_map(const nlohmann::ordered_json& metadata,
                              const nlohmann::ordered_json& config,
                              const std::vector<std::string>& tensor_names) {
  const std::string arch = metadata.value("general.architecture", std::string());
  const int64_t layers = config_int(config, "num_hidden_layers", 0);
  const bool gemma = arch.rfind("gemma", 0) == 0;
  static const std::map<std::string, std::string> globals = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  GgufTensorMap out;
  for (const auto& name : tensor_names) {
    GgufTensorMapping t;
    t.gguf_name = name;
    int64_t layer = 0;
    std::string leaf, suffix;
    if (const auto g = globals.find(name); g != globals.end()) {
      t.hf_name = g->second;
    } else if (name == "rope_freqs.weight") {
      out.ignored.push_back(name + ": RoPE frequency factors; transformers does not load them");
      continue;
    } else if (split_block_name(name, layer, leaf, suffix) && layer < layers) {
      const Leaf* l = family_leaf(arch, leaf);
      if (!l)
        throw TensorMappingError("GGUF tensor '" + name + "' has no HF counterpart for " + arch);
      t.hf_name = "model.layers." + std::to_string(layer) + "." + l->hf;
      t.fused_part = l->fused_part;
      // HF's fused expert tensors are parameters without a .weight suffix.
      if (std::string(l->hf).rfind("mlp.experts.", 0) != 0) t.hf_name += "." + suffix;
      if (arch == "llama") add_llama_permutation(config, leaf, t);
    } else {
      throw TensorMappingError("GGUF tensor '" + name + "' has no HF counterpart for " + arch +
                               " with " + std::to_string(layers) + " layers");
    }
    // Gemma2TensorProcessor: every "norm.weight" is stored as 1 + w.
    t.subtract_one = gemma && name.find("norm.weight") != std::string::npos;
    out.tensors.push_back(std::move(t));
  }
  return out;
}

std::vector<int64_t> gguf_unpermute_rows(int64_t rows, int64_t n_head) {
  if (n_head <= 0 || rows <= 0 || rows % (2 * n_head) != 0) {
    throw InvalidArgument("gguf_unpermute_rows: " + std::to_string(rows) +
                          " rows are not a multiple of 2 x " + std::to_string(n_head) + " heads");
  }
  const int64_t dim = rows / n_head / 2;
  std::vector<int64_t> perm(static_cast<size_t>(rows));
  // w.reshape(n_head, dim, 2).swapaxes(2, 1): out[h][a][j] = w[h][j][a].
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t j = 0; j < dim; ++j) {
        perm[static_cast<size_t>(h * 2 * dim + a * dim + j)] = h * 2 * dim + 2 * j + a;
      }
    }
  }
  return perm;
}

}  // namespace hubzoo
