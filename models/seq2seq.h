// A sequence-to-sequence model (T5, FLAN-T5, mT5): an encoder reads the
// input once, a decoder generates with a self-attention KV cache and attends
// to the encoder's states through cross-attention keys/values computed once
// per request. Batches are ragged, as for CausalLM and Encoder: each row sees
// its own sequence's tokens only, so a request gives the same bits alone or
// in any batch.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/encoder.h"

namespace hubzoo {

struct Seq2SeqInfo {
  std::string architecture;
  std::filesystem::path snapshot;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // d_model
  int64_t num_layers = 0;   // encoder layers
  int64_t num_decoder_layers = 0;
  int64_t max_tokens = 0;  // longest encoder input and longest decoder sequence
  int64_t decoder_start_token_id = 0;
  int64_t pad_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  std::map<std::string, std::string> ignored_tensors;  // name -> reason
  int64_t num_parameters = 0;
  Numerics numerics;
};

// One request's decoder state: its cross-attention keys/values (from the
// encoder states it was started with) and its self-attention KV cache.
class Seq2SeqState {
 public:
  virtual ~Seq2SeqState() = default;
  virtual int64_t decoded() const = 0;         // decoder tokens run so far
  virtual int64_t encoder_length() const = 0;  // encoder positions attended to
};

struct Seq2SeqDecodeResult {
  std::vector<float> logits;                           // [rows, vocab], rows in request order
  std::map<std::string, std::vector<float>> captured;  // name -> [rows, features]
};

class Seq2SeqLM {
 public:
  virtual ~Seq2SeqLM() = default;
  virtual const Seq2SeqInfo& info() const = 0;
  // "encoder.embed", "encoder.layers.{i}[.self_attn|.mlp]", "encoder.norm",
  // "decoder.embed", "decoder.layers.{i}[.self_attn|.cross_attn|.mlp]",
  // "decoder.norm", "logits".
  virtual std::vector<std::string> capture_names() const = 0;
  // Encoder: a ragged batch -> last hidden states [M, hidden_size] (after the
  // final norm). Captures the "encoder.*" names asked for.
  virtual void encode(const EncoderBatch& batch, const std::set<std::string>& capture,
                      EncoderResult& out) = 0;
  // A decoder state over one sequence's encoder states [len, hidden_size]
  // (rows of encode()'s output): cross-attention keys/values are computed here.
  virtual std::unique_ptr<Seq2SeqState> start(const float* encoder_states, int64_t len) = 0;
  // Runs tokens[s] through the decoder after what states[s] holds, for every
  // s in one pass, and appends them to the states' caches. Logits for every
  // new token; captures the "decoder.*" names and "logits" asked for.
  virtual void decode(const std::vector<Seq2SeqState*>& states,
                      const std::vector<std::vector<int64_t>>& tokens,
                      const std::set<std::string>& capture, Seq2SeqDecodeResult& out) = 0;
};

// Whether a config.json names an encoder-decoder model
// (`is_encoder_decoder`, or an architecture load_seq2seq_lm takes).
bool is_seq2seq_config(const JsonObject& config);
std::vector<std::string> supported_seq2seq_lms();
// Loads a snapshot (directory or HF cache repo id) as a Seq2SeqLM;
// ConfigError names an unsupported architecture.
std::unique_ptr<Seq2SeqLM> load_seq2seq_lm(const std::string& model,
                                           const LoadOptions& options = {});

// Families (models/t5.cc).
std::unique_ptr<Seq2SeqLM> load_t5(const LoadContext& ctx);
// T5EncoderModel (sentence-T5, GTR): the encoder stack alone, as an Encoder
// whose capture names are the "encoder.*" ones.
std::unique_ptr<Encoder> load_t5_encoder(const LoadContext& ctx);

}  // namespace hubzoo
