// A decoder-only language model: the interface the engine, CLI and bindings
// use, and the registry keyed by config.json `architectures`.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/safetensors.h"
#include "layers/batch.h"
#include "layers/kv_cache.h"
#include "layers/numerics.h"
#include "ops/thread_pool.h"

namespace hubzoo {

// What every causal LM reports about itself (from config.json and
// generation_config.json).
struct ModelInfo {
  std::string architecture;
  std::filesystem::path snapshot;
  // The GGUF file the model was loaded from (then config, tokenizer and chat
  // template come from its metadata); empty for a safetensors snapshot.
  std::filesystem::path gguf_file;
  std::string config_json;  // the config.json the model was built from (derived for a GGUF)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> eos_token_ids;  // generation_config.json, else config.json
  int64_t bos_token_id = -1;
  int64_t pad_token_id = -1;
  std::map<std::string, std::string> ignored_tensors;  // name -> reason
  // Tensor-name prefixes not run, with the reason (a multimodal checkpoint's
  // vision/audio towers); each of their tensors is in ignored_tensors too.
  std::map<std::string, std::string> ignored_modules;
  // false: bidirectional attention (an encoder such as EmbeddingGemma), which
  // runs each sequence whole and cannot generate.
  bool causal = true;
  // false: the model keeps its keys and values outside the KvCache (the encoder-decoder
  // adapter, engine/seq2seq_causal), whose pages then hold nothing a prefix could reuse.
  bool kv_in_cache = true;
  int64_t num_parameters = 0;
  int64_t weight_bytes = 0;        // resident, as packed for compute
  int64_t quantized_matrices = 0;  // matrices kept block-quantized
  int64_t panel_matrices = 0;      // of their parts, those the int8 kernels read as panels
  // --quantize: matrices read from the quantize-on-load cache, and written to it
  // (io/quant_cache.h).
  int64_t quant_cache_hits = 0, quant_cache_stores = 0;
  Numerics numerics;
  // Where the tokenizer comes from: the GGUF file, else the snapshot folder.
  const std::filesystem::path& tokenizer_source() const {
    return gguf_file.empty() ? snapshot : gguf_file;
  }
};

struct ForwardOptions {
  // Row indices of the batch whose logits are wanted; empty means every row.
  std::vector<int64_t> logits_rows;
  // The caller discards the logits (a prefill-only step passes one placeholder
  // row): no row's logits are wanted, and the result's may be anything.
  bool logits_unused = false;
  // Named intermediates to record: "embed", "layers.{i}", "layers.{i}.self_attn",
  // "layers.{i}.mlp", "norm", "logits".
  std::set<std::string> capture;
};

struct ForwardResult {
  std::vector<float> logits;                           // [rows, vocab]
  std::map<std::string, std::vector<float>> captured;  // name -> [M, features]
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelInfo& info() const = 0;
  // A cache for `num_slots` independent sequences.
  virtual KvCache new_cache(int64_t num_slots) const = 0;
  // Runs the batch: every row's token enters its slot's cache at its position
  // (positions of a slot must continue where its cache ends, in order).
  virtual void forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& options,
                       ForwardResult& result) = 0;
  // Names of the intermediates forward() can capture.
  virtual std::vector<std::string> capture_names() const = 0;
};

// Everything a model family's loader gets.
struct LoadContext {
  std::filesystem::path snapshot;
  JsonObject config{nlohmann::json::object(), "config.json"};
  std::shared_ptr<ThreadPool> pool;
  Numerics numerics;
  // False when the model is loaded as an encoder (embeddings only): a base-model
  // checkpoint without lm_head (e.g. an untied LlamaModel saved by
  // sentence-transformers) then loads, and forward() returns no logits.
  bool needs_lm_head = true;
  // Set for a GGUF file: its tensors under Hugging Face names (else the
  // snapshot's safetensors are opened), and the file itself.
  std::shared_ptr<const Checkpoint> checkpoint;
  std::filesystem::path gguf_file;
};

// Architectures (config.json `architectures[0]`) this build can load.
std::vector<std::string> supported_causal_lms();

struct LoadOptions {
  LoadOptions() = default;
  LoadOptions(int threads, Numerics n) : num_threads(threads), numerics(n) {}
  // From the flags every front end shares (CLI, server, Python): dtype, mode and
  // quantize parsed, InvalidArgument naming a bad value.
  static LoadOptions parse(int threads, const std::string& dtype, const std::string& mode,
                           const std::string& quantize, const std::string& gguf_file) {
    LoadOptions o(threads, Numerics::parse(dtype, mode));
    o.numerics.set_quantize(quantize);
    o.gguf_file = gguf_file;
    return o;
  }
  // 0: all cores. Models asking for the same count share one pool (ThreadPool::shared).
  int num_threads = 0;
  Numerics numerics;  // float32 unless asked (Numerics::parse); quantize on load
  // One .gguf file of the snapshot folder to load (a plain file name), as
  // transformers' gguf_file=; empty: the folder's safetensors, or `model`
  // itself when it is a .gguf path.
  std::string gguf_file;
};

// Where a model reference points: a snapshot folder, and the GGUF file in it
// when the model is one (a .gguf path, or a folder with gguf_file). A folder
// holding .gguf files but no config.json asks for gguf_file, listing them.
struct ModelSource {
  std::filesystem::path snapshot;
  std::filesystem::path gguf_file;  // empty: safetensors
  // As ModelInfo::tokenizer_source(): the GGUF file, else the snapshot folder.
  const std::filesystem::path& tokenizer_source() const {
    return gguf_file.empty() ? snapshot : gguf_file;
  }
};
ModelSource resolve_model_source(const std::string& model, const std::string& gguf_file);

// Loads the snapshot at `model` (a directory, a .gguf file or a repo id in the HF cache).
// Throws ConfigError for an unknown architecture, naming it and the supported ones.
std::unique_ptr<CausalLM> load_causal_lm(const std::string& model, const LoadOptions& options = {});

}  // namespace hubzoo
