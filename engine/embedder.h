// Sentence embeddings as sentence-transformers computes them, read from the
// snapshot: modules.json (Transformer -> Pooling -> Dense* -> Normalize),
// 1_Pooling/config.json, 2_Dense/{config.json, model.safetensors},
// sentence_bert_config.json (max_seq_length, do_lower_case) and
// config_sentence_transformers.json (prompts, default_prompt_name).
//
// Texts are tokenized as transformers' tokenizer(prompt + text,
// truncation=True, max_length=max_seq_length) does, and run as one ragged
// batch per chunk: no padding reaches the encoder, so a text's vector does not
// depend on what else is in the batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/linear.h"
#include "models/encoder.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo {

enum class PoolingMode { kCls, kMax, kMean, kMeanSqrtLen, kWeightedMean, kLastToken };

// sentence-transformers' name of a mode ("cls", "mean", ...).
const char* pooling_mode_name(PoolingMode mode);

// 1_Pooling/config.json: `pooling_mode` (a name or a list) or the legacy
// `pooling_mode_*_token(s)` booleans (none set: mean), `include_prompt`.
struct PoolingConfig {
  int64_t embedding_dimension = 0;
  std::vector<PoolingMode> modes;  // outputs are concatenated in this order
  bool include_prompt = true;
  // Throws ConfigError naming the file and an unknown mode.
  static PoolingConfig parse(const JsonObject& config);
};

// Pools one sequence's hidden states h [len, hidden] into out
// [modes.size() * hidden]; its first `skip` tokens (an excluded prompt) are
// left out as sentence-transformers masks them. With none left: cls takes
// token 0, max gives -inf, the others zeros. bf16_output rounds the averaged
// modes' results, as sentence-transformers casts them back to bf16.
void pool_sequence(const float* h, int64_t len, int64_t hidden, int64_t skip,
                   const std::vector<PoolingMode>& modes, bool bf16_output, float* out);

// modules.json as sentence-transformers reads it: the pipeline's modules in
// order. Without the file, its fallback for a plain transformers checkpoint:
// Transformer + mean Pooling (is_default).
struct ModuleList {
  struct Entry {
    std::string kind;  // the type's last component: "Transformer", "Pooling", "Dense", ...
    std::filesystem::path dir;
  };
  std::filesystem::path file;  // snapshot/modules.json (named in errors even when absent)
  std::vector<Entry> entries;
  bool is_default = false;
  // Throws ConfigError for a list that is empty or has a module without a 'type' string.
  static ModuleList read(const std::filesystem::path& snapshot);
};

struct EmbedderOptions {
  int num_threads = 0;  // 0: all cores
  Numerics numerics;
};

struct EmbedOptions {
  // nullopt: as modules.json says; true: L2-normalise the result (again, if
  // the pipeline has a Normalize module), as encode(normalize_embeddings=True);
  // false: skip the pipeline's Normalize modules.
  std::optional<bool> normalize;
  std::optional<std::string> prompt;       // prepended to every text; wins over prompt_name
  std::optional<std::string> prompt_name;  // a key of the configured prompts
  int64_t batch_size = 32;                 // texts per forward pass, longest first
};

struct EmbedderInfo {
  std::filesystem::path snapshot;
  std::vector<std::string> modules;  // "Transformer", "Pooling", "Dense", "Normalize"
  bool default_modules = false;      // no modules.json: Transformer + mean pooling
  PoolingConfig pooling;
  int64_t max_seq_length = 0;
  bool do_lower_case = false;
  bool truncate_left = false;  // tokenizer_config.json truncation_side
  std::map<std::string, std::string> prompts;
  std::optional<std::string> default_prompt_name;
  int64_t dimension = 0;  // of the output vectors
};

// One text as the encoder gets it.
struct TokenizedText {
  std::vector<int64_t> ids, type_ids;
  bool last_is_special = false;  // the post-processor's or a special added token
};

class Embedder {
 public:
  // Throws FileError / ConfigError / TensorMappingError naming the file and
  // what is wrong (e.g. a missing 1_Pooling/config.json, an unknown pooling mode).
  static std::unique_ptr<Embedder> load(const std::string& model,
                                        const EmbedderOptions& options = {});

  const EmbedderInfo& info() const { return info_; }
  const EncoderInfo& encoder_info() const { return encoder_->info(); }

  // [texts.size(), dimension] row-major; no texts give an empty result.
  // Throws InvalidArgument for an unknown prompt name, a text that is not
  // UTF-8 or that encodes to no tokens, or batch_size <= 0.
  std::vector<float> encode(const std::vector<std::string>& texts,
                            const EmbedOptions& options = {});

  // The prompt encode() uses: prompt, else prompts[prompt_name], else the default prompt.
  std::optional<std::string> resolve_prompt(const EmbedOptions& options) const;
  // prompt + text, tokenized and truncated to max_seq_length.
  TokenizedText tokenize(const std::string& text) const;
  // Tokens of the prompt left out of pooling when include_prompt is false:
  // its length without a trailing special token (sentence-transformers' rule).
  int64_t prompt_length(const std::string& prompt) const;

 private:
  struct Dense;
  Embedder() = default;
  static std::shared_ptr<const Dense> load_dense(const std::filesystem::path& dir,
                                                 const Numerics& numerics, int64_t in_dimension);
  void load_modules(const std::filesystem::path& snapshot, const EmbedderOptions& options);
  // Module 0: the encoder, its tokenizer and max_seq_length.
  void load_transformer(const std::filesystem::path& dir, const EmbedderOptions& options);
  // Pooling (checked against the encoder), then the Dense / Normalize modules in order.
  void load_tail(const ModuleList& modules, const Numerics& numerics);
  // Pooled [n, pooled] -> Dense layers -> (optional) Normalize, in place.
  void finish_rows(std::vector<float>& rows, int64_t n, bool normalize_modules,
                   bool normalize_after) const;

  EmbedderInfo info_;
  std::unique_ptr<Encoder> encoder_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<ThreadPool> pool_;
  Numerics numerics_;
  // The modules after Pooling, in order: a Dense layer or (nullptr) Normalize.
  std::vector<std::shared_ptr<const Dense>> tail_;
};

}  // namespace hubzoo
