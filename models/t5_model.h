// T5ForConditionalGeneration's model class, shared by its two source files:
// models/t5.cc (loading, the encoder pass, start(), T5EncoderModel) and
// models/t5_decode.cc (the stack both passes run, and the decoder step).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/seq2seq.h"
#include "models/t5.h"

namespace hubzoo::t5 {

constexpr int64_t kMaxTokens = 1 << 16;  // encoder input and decoder sequence, each

class T5State final : public Seq2SeqState {
 public:
  int64_t decoded() const override { return pos; }
  int64_t encoder_length() const override { return enc_len; }
  int64_t enc_len = 0, pos = 0;
  std::vector<std::vector<float>> cross_kv;  // per layer [enc_len, 2 * inner]: k | v
  std::vector<std::vector<float>> self_kv;   // per layer [pos, 2 * inner]: k | v
};

struct Captures {
  const std::set<std::string>& names;
  std::map<std::string, std::vector<float>>& out;
  void operator()(const std::string& name, const float* x, int64_t n) const {
    if (names.count(name)) out[name].assign(x, x + n);
  }
};

// The rows of one forward pass and, per row, where its attention reads.
struct Rows {
  int64_t m = 0;
  std::vector<int64_t> ids;
  std::function<T5Keys(int64_t)> self_keys;
};

// What run_stack runs: the blocks of one stack and where decoder rows keep
// and read their keys/values.
struct StackPass {
  const std::vector<T5Block>& blocks;
  const RMSNorm& final_norm;
  std::string prefix;  // "encoder." or "decoder." (capture names)
  // Called after each layer computed kv, before the rows attend (decoder: copies
  // the rows' keys/values into their states' caches).
  std::function<void(int64_t layer)> store_kv = {};
  std::function<T5Keys(int64_t layer, int64_t row)> cross_keys = {};  // decoder only
};

class T5Model final : public Seq2SeqLM {
 public:
  explicit T5Model(const LoadContext& ctx, bool encoder_only = false);

  const Seq2SeqInfo& info() const override { return info_; }
  std::vector<std::string> capture_names() const override;
  void encode(const EncoderBatch& batch, const std::set<std::string>& capture,
              EncoderResult& out) override;
  std::unique_ptr<Seq2SeqState> start(const float* encoder_states, int64_t len) override;
  void decode(const std::vector<Seq2SeqState*>& states,
              const std::vector<std::vector<int64_t>>& tokens, const std::set<std::string>& capture,
              Seq2SeqDecodeResult& out) override;

 private:
  void check_capture(const std::set<std::string>& capture) const;
  void check_tokens(const std::vector<int64_t>& ids) const;
  FloatWeights take_bias_table(WeightLoader& w, const std::string& stack);
  void load_decoder(WeightLoader& w);
  void fill_info(const LoadContext& ctx, const WeightLoader& w, const Checkpoint& ckpt);
  // decode()'s states as this model's, checked.
  std::vector<T5State*> own_states(const std::vector<Seq2SeqState*>& states) const;
  // Embeds rows.ids, runs the pass's blocks and its final norm -> [m, d_model].
  // kv: [m, 2 * inner], the self-attention keys/values of every row.
  std::vector<float> run_stack(const StackPass& pass, Rows& rows, std::vector<float>& kv,
                               const Captures& cap);

  std::shared_ptr<ThreadPool> pool_;
  T5Config cfg_;
  Numerics numerics_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  Seq2SeqInfo info_;
  FloatWeights shared_, enc_bias_, dec_bias_;  // [vocab, d], [buckets, heads] x 2
  std::vector<T5Block> encoder_, decoder_;
  RMSNorm enc_norm_, dec_norm_;
  Linear lm_head_;
};

}  // namespace hubzoo::t5
