// GGUF metadata -> config.json and tensor map (transformers 5.23
// integrations/ggml.py GGUF_CONFIG_MAPPING, modeling_gguf_pytorch_utils.py).
#include "models/gguf_import.h"

#include <cmath>
#include <optional>

#include "base/error.h"
#include "models/config_fields.h"

namespace hubzoo {
namespace {

using ojson = nlohmann::ordered_json;

// One architecture: the HF class and model_type, and what transformers reads.
struct ArchInfo {
  const char* gguf;         // general.architecture
  const char* hf_class;     // AutoModelForCausalLM's class for the model_type
  const char* model_type;   // transformers' model_type
  bool head_dim_from_rope;  // llama: rope.dimension_count -> head_dim
  bool head_dim_from_key;   // attention.key_length -> head_dim
  bool sliding_window;      // attention.sliding_window -> sliding_window
  bool moe;                 // expert_count / expert_used_count
  bool gemma;               // norms stored as 1 + w
  bool gemma3_rope;         // rope_parameters per layer type
};

// qwen3: transformers maps no key to head_dim (its Qwen3Config default, 128,
// applies); llama.cpp writes attention.key_length and a file whose value is
// not 128 would not load in transformers, so we read it (equal wherever
// transformers loads the file).
const ArchInfo kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", true, false, false, false, false, false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false, false, false, false, false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, true, false, false, false, false},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", false, true, false, true, false, false},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", false, true, true, false, true, false},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text", false, true, true, false, true, true},
};

// Bounds on the sizes a file states, checked before anything uses them.
constexpr int64_t kMaxHidden = int64_t{1} << 16;
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxContext = int64_t{1} << 24;
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxExperts = 4096;

const ArchInfo& arch_info(const ojson& metadata) {
  const auto it = metadata.find("general.architecture");
  if (it == metadata.end()) throw ConfigError("GGUF metadata: missing key 'general.architecture'");
  if (!it->is_string()) {
    throw ConfigError("GGUF metadata: key 'general.architecture' must be a string");
  }
  const std::string arch = it->get<std::string>();
  for (const auto& a : kArchs) {
    if (arch == a.gguf) return a;
  }
  std::string supported;
  for (const auto& a : kArchs) supported += std::string(supported.empty() ? "" : ", ") + a.gguf;
  throw ConfigError("GGUF metadata: general.architecture '" + arch +
                    "' is not supported (supported: " + supported + ")");
}

// Reads `<arch>.<key>` with bounds; messages name the full key.
class Reader {
 public:
  Reader(const ojson& m, std::string arch) : m_(m), arch_(std::move(arch)) {}

  const ojson* find(const std::string& key) const {
    const auto it = m_.find(arch_ + "." + key);
    return it == m_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // An integer in [lo, hi]; `required` throws when absent.
  std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi,
                                 bool required = false) const {
    const ojson* v = find(key);
    if (!v) {
      if (required) throw ConfigError("GGUF metadata: missing required key '" + full(key) + "'");
      return std::nullopt;
    }
    if (!v->is_number_integer()) {
      throw ConfigError("GGUF metadata: key '" + full(key) + "' must be an integer");
    }
    const bool neg = v->is_number_unsigned() ? false : v->get<int64_t>() < lo;
    const bool big = v->is_number_unsigned() ? v->get<uint64_t>() > static_cast<uint64_t>(hi)
                                             : v->get<int64_t>() > hi;
    if (neg || big) {
      throw ConfigError("GGUF metadata: key '" + full(key) + "' = " + v->dump() +
                        " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                        "]");
    }
    return v->get<int64_t>();
  }

  // A finite number in (lo, hi].
  std::optional<double> number(const std::string& key, double lo, double hi) const {
    const ojson* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number())
      throw ConfigError("GGUF metadata: key '" + full(key) + "' must be a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || !(x > lo) || x > hi) {
      throw ConfigError("GGUF metadata: key '" + full(key) + "' = " + v->dump() +
                        " is out of range");
    }
    return x;
  }

  std::string full(const std::string& key) const { return arch_ + "." + key; }

 private:
  const ojson& m_;
  std::string arch_;
};

// A float32 GGUF value as the Python float transformers stores (exact).
double as_float32(double x) { return static_cast<double>(static_cast<float>(x)); }

// tokenizer.ggml.<key> as a token id below `vocab`, or absent.
void token_id(const ojson& m, const char* key, const char* out, int64_t vocab, ojson& config) {
  const auto it = m.find(std::string("tokenizer.ggml.") + key);
  if (it == m.end() || it->is_null()) return;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
      (vocab > 0 && it->get<int64_t>() >= vocab)) {
    throw ConfigError(std::string("GGUF metadata: key 'tokenizer.ggml.") + key +
                      "' = " + it->dump() + " is not a token id below the vocabulary size " +
                      std::to_string(vocab));
  }
  config[out] = it->get<int64_t>();
}

// vocab_size: `<arch>.vocab_size`, else the token list's length (transformers).
std::optional<int64_t> vocab_size(const ojson& m, const Reader& r) {
  if (auto v = r.integer("vocab_size", 1, kMaxVocab)) return v;
  const auto it = m.find("tokenizer.ggml.tokens");
  if (it == m.end() || !it->is_array()) return std::nullopt;
  if (it->empty() || static_cast<int64_t>(it->size()) > kMaxVocab) {
    throw ConfigError("GGUF metadata: 'tokenizer.ggml.tokens' has " + std::to_string(it->size()) +
                      " entries (must be 1.." + std::to_string(kMaxVocab) + ")");
  }
  return static_cast<int64_t>(it->size());
}

// Geometry: layers, widths, heads (kv heads dividing heads), head_dim.
void read_geometry(const ArchInfo& a, const Reader& r, ojson& c) {
  c["hidden_size"] = *r.integer("embedding_length", 1, kMaxHidden, true);
  c["intermediate_size"] = *r.integer("feed_forward_length", 1, kMaxIntermediate, true);
  c["num_hidden_layers"] = *r.integer("block_count", 1, kMaxLayers, true);
  const int64_t heads = *r.integer("attention.head_count", 1, kMaxHeads, true);
  c["num_attention_heads"] = heads;
  if (auto kv = r.integer("attention.head_count_kv", 1, kMaxHeads)) {
    if (heads % *kv != 0) {
      throw ConfigError("GGUF metadata: '" + r.full("attention.head_count") + "' (" +
                        std::to_string(heads) + ") is not a multiple of '" +
                        r.full("attention.head_count_kv") + "' (" + std::to_string(*kv) + ")");
    }
    c["num_key_value_heads"] = *kv;
  }
  const char* head_key = a.head_dim_from_rope  ? "rope.dimension_count"
                         : a.head_dim_from_key ? "attention.key_length"
                                               : nullptr;
  if (head_key) {
    if (auto hd = r.integer(head_key, 2, kMaxHeadDim)) c["head_dim"] = *hd;
  }
  if (auto n = r.integer("context_length", 1, kMaxContext)) c["max_position_embeddings"] = *n;
  if (auto eps = r.number("attention.layer_norm_rms_epsilon", 0.0, 1.0)) {
    c["rms_norm_eps"] = as_float32(*eps);
  }
}

// rope_parameters as transformers 5 writes them; rope.freq_base when stated.
void read_rope(const ArchInfo& a, const Reader& r, ojson& c) {
  const auto theta = r.number("rope.freq_base", 0.0, 1e12);
  if (a.gemma3_rope) {
    // Gemma3TextConfig: full layers take rope_theta, sliding ones 10000.
    ojson full = {{"rope_theta", theta ? as_float32(*theta) : 1e6}, {"rope_type", "default"}};
    ojson sliding = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
    c["rope_parameters"] = {{"full_attention", full}, {"sliding_attention", sliding}};
    return;
  }
  if (theta) c["rope_parameters"] = {{"rope_theta", as_float32(*theta)}, {"rope_type", "default"}};
}

void read_arch_extras(const ArchInfo& a, const Reader& r, ojson& c) {
  if (a.sliding_window) {
    if (auto w = r.integer("attention.sliding_window", 1, kMaxContext)) c["sliding_window"] = *w;
  }
  if (a.moe) {
    const auto experts = r.integer("expert_count", 1, kMaxExperts);
    if (experts) c["num_local_experts"] = *experts;  // to_dict() spelling
    if (auto k = r.integer("expert_used_count", 1, kMaxExperts)) {
      if (experts && *k > *experts) {
        throw ConfigError("GGUF metadata: '" + r.full("expert_used_count") + "' is larger than '" +
                          r.full("expert_count") + "'");
      }
      c["num_experts_per_tok"] = *k;
    }
    // transformers leaves moe_intermediate_size at Qwen3MoeConfig's 768 (it maps
    // no key to it); the file states the width, which must equal the tensors'.
    if (auto w = r.integer("expert_feed_forward_length", 1, kMaxIntermediate)) {
      c["moe_intermediate_size"] = *w;
    }
    c["norm_topk_prob"] = true;  // GGUF_CONFIG_DEFAULTS_MAPPING["qwen3_moe"]
  }
}

}  // namespace

const std::vector<std::string>& gguf_supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& a : kArchs) v.push_back(a.gguf);
    return v;
  }();
  return names;
}

nlohmann::ordered_json gguf_config(const nlohmann::ordered_json& metadata,
                                   const std::vector<std::string>& tensor_names) {
  if (!metadata.is_object()) throw ConfigError("GGUF metadata: not an object");
  const ArchInfo& a = arch_info(metadata);
  const Reader r(metadata, a.gguf);
  ojson c = ojson::object();
  c["architectures"] = ojson::array({a.hf_class});
  c["model_type"] = a.model_type;
  read_geometry(a, r, c);
  read_rope(a, r, c);
  read_arch_extras(a, r, c);
  const auto vocab = vocab_size(metadata, r);
  if (vocab) c["vocab_size"] = *vocab;
  bool has_output = false;
  for (const auto& n : tensor_names) has_output |= n == "output.weight";
  c["tie_word_embeddings"] = !has_output;
  token_id(metadata, "bos_token_id", "bos_token_id", vocab.value_or(0), c);
  token_id(metadata, "eos_token_id", "eos_token_id", vocab.value_or(0), c);
  token_id(metadata, "unknown_token_id", "unk_token_id", vocab.value_or(0), c);
  token_id(metadata, "padding_token_id", "pad_token_id", vocab.value_or(0), c);
  return c;
}

}  // namespace hubzoo
