// A text encoder: token ids in, last hidden states out. BERT-style encoders
// (BertModel, RobertaModel, XLMRobertaModel) attend bidirectionally; a decoder
// (Llama, Qwen2, Qwen3) used for embeddings attends to earlier tokens. Either
// way a batch is ragged: each sequence attends over its own tokens only, so a
// sequence gives the same bits alone or in any batch.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/causal_lm.h"

namespace hubzoo {

struct EncoderInfo {
  std::string architecture;
  std::filesystem::path snapshot;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t max_position_embeddings = 0;
  // Longest sequence the position table allows (RoBERTa: positions start at
  // pad_token_id + 1, so max_position_embeddings - pad_token_id - 1).
  int64_t max_tokens = 0;
  int64_t pad_token_id = -1;
  // BERT feeds the tokenizer's type ids to token_type_embeddings; RoBERTa's
  // tokenizers return none, so every type id is 0 there.
  bool uses_token_type_ids = false;
  bool causal = false;  // a decoder: each token attends to itself and earlier tokens
  std::map<std::string, std::string> ignored_tensors;  // name -> reason
  int64_t num_parameters = 0;
  Numerics numerics;
};

// Sequences back to back: sequence s holds rows [sum of lengths before s, + lengths[s]).
struct EncoderBatch {
  std::vector<int32_t> ids;       // [M]
  std::vector<int32_t> type_ids;  // [M], or empty for all zeros
  std::vector<int64_t> lengths;   // one per sequence, each >= 1; they sum to M
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  void add(const std::vector<int64_t>& sequence, const std::vector<int64_t>& types = {});
};

struct EncoderOptions {
  // Named intermediates to record (Encoder::capture_names()).
  std::set<std::string> capture;
};

struct EncoderResult {
  std::vector<float> hidden;                           // [M, hidden_size] last hidden states
  std::map<std::string, std::vector<float>> captured;  // name -> [M, features]
};

class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual const EncoderInfo& info() const = 0;
  // Throws InvalidArgument for ids outside the vocabulary, type ids outside
  // type_vocab_size, empty sequences or sequences longer than max_tokens.
  virtual void forward(const EncoderBatch& batch, const EncoderOptions& options,
                       EncoderResult& result) = 0;
  // BERT family: "embed", "layers.{i}.attention", "layers.{i}" (transformers'
  // embeddings, encoder.layer[i].attention and encoder.layer[i] outputs).
  // Decoders: those of CausalLM; the last hidden state is "norm".
  virtual std::vector<std::string> capture_names() const = 0;
};

// Architectures load_encoder() accepts (config.json `architectures[0]`, or
// `model_type` when a config has no architectures).
std::vector<std::string> supported_encoders();

// Loads the snapshot at `model` (a directory or a repo id in the HF cache) as
// an encoder. ConfigError names an unknown architecture and the supported ones.
std::unique_ptr<Encoder> load_encoder(const std::string& model, const LoadOptions& options = {});

// Families (models/bert.cc, models/decoder_encoder.cc).
std::unique_ptr<Encoder> load_bert_encoder(const LoadContext& ctx);     // BertModel, ...
std::unique_ptr<Encoder> load_roberta_encoder(const LoadContext& ctx);  // Roberta, XLM-R
// A loaded decoder whose final norm output is the last hidden state.
std::unique_ptr<Encoder> decoder_as_encoder(std::unique_ptr<CausalLM> lm);

}  // namespace hubzoo
