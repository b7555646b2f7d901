// The encoder-decoder adapter under the Scheduler, with a fake Seq2SeqLM
// whose logits are a pure function of (the whole encoder input, the decoder
// tokens so far): a prompt cut into chunks, a placeholder logits row, slot
// reuse and concurrent requests must all give the tokens computed directly.
#include "engine/seq2seq_causal.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "engine/scheduler.h"
#include "engine/test_collector.h"

namespace hubzoo {
namespace {

constexpr int64_t kVocab = 23;
constexpr int64_t kStart = 0;

struct FakeState : Seq2SeqState {
  int64_t decoded() const override { return static_cast<int64_t>(tokens.size()); }
  int64_t encoder_length() const override { return static_cast<int64_t>(input.size()); }
  std::vector<int64_t> input, tokens;
};

// The token a request gets next: a hash of its whole input and its decoder tokens.
int64_t next_token(const std::vector<int64_t>& input, const std::vector<int64_t>& decoded) {
  uint64_t h = 1469598103934665603ull;
  for (const int64_t t : input) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  h = (h ^ 0xffu) * 1099511628211ull;
  for (const int64_t t : decoded) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return 3 + static_cast<int64_t>(h % (kVocab - 3));  // never EOS (2)
}

class FakeSeq2Seq : public Seq2SeqLM {
 public:
  FakeSeq2Seq() {
    info_.architecture = "FakeSeq2Seq";
    info_.vocab_size = kVocab;
    info_.hidden_size = 1;
    info_.num_decoder_layers = 1;
    info_.max_tokens = 512;
    info_.decoder_start_token_id = kStart;
    info_.eos_token_ids = {2};
  }
  const Seq2SeqInfo& info() const override { return info_; }
  std::vector<std::string> capture_names() const override { return {}; }
  // hidden = the token id, so start() sees the whole input.
  void encode(const EncoderBatch& batch, const std::set<std::string>&,
              EncoderResult& out) override {
    ++encode_calls;
    encoded_rows += batch.size();
    out.hidden.assign(batch.ids.begin(), batch.ids.end());
  }
  std::unique_ptr<Seq2SeqState> start(const float* states, int64_t len) override {
    auto s = std::make_unique<FakeState>();
    for (int64_t i = 0; i < len; ++i) s->input.push_back(static_cast<int64_t>(states[i]));
    return s;
  }
  void decode(const std::vector<Seq2SeqState*>& states,
              const std::vector<std::vector<int64_t>>& tokens, const std::set<std::string>&,
              Seq2SeqDecodeResult& out) override {
    ++decode_calls;
    max_states = std::max(max_states, static_cast<int64_t>(states.size()));
    out.logits.clear();
    for (size_t s = 0; s < states.size(); ++s) {
      auto* st = dynamic_cast<FakeState*>(states[s]);
      for (const int64_t t : tokens[s]) {
        if (st->tokens.empty() && t != kStart) ADD_FAILURE() << "first decoder token not start";
        st->tokens.push_back(t);
        std::vector<float> row(kVocab, 0.0f);
        const std::vector<int64_t> decoded(st->tokens.begin() + 1, st->tokens.end());
        row[next_token(st->input, decoded)] = 10.0f;
        out.logits.insert(out.logits.end(), row.begin(), row.end());
      }
    }
  }
  int64_t encode_calls = 0, encoded_rows = 0, decode_calls = 0, max_states = 0;

 private:
  Seq2SeqInfo info_;
};

std::vector<int64_t> expected(const std::vector<int64_t>& input, int64_t n) {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < n) out.push_back(next_token(input, out));
  return out;
}

std::vector<int64_t> prompt_of(int64_t len, int64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> p(len);
  for (auto& id : p) id = 3 + static_cast<int64_t>(rng() % (kVocab - 3));
  return p;
}

// Runs the requests on one Scheduler with the given options; their completions in order.
std::vector<Completion> serve(CausalLM& lm, const SchedulerOptions& so,
                              const std::vector<std::vector<int64_t>>& prompts, int64_t n) {
  Scheduler s(lm, nullptr, so);
  std::vector<GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = prompts[i];
    requests[i].max_tokens = n;
  }
  // Queued together: the test of shared decode calls must not depend on
  // whether the engine thread ran the first request before the next arrived.
  return submit_and_wait(s, std::move(requests), /*together=*/true);
}

TEST(Seq2SeqCausal, ChunkedPromptsReachTheEncoderWholeAndOnce) {
  auto fake = std::make_unique<FakeSeq2Seq>();
  FakeSeq2Seq* f = fake.get();
  auto lm = seq2seq_as_causal_lm(std::move(fake));
  const std::vector<int64_t> prompt = prompt_of(11, 1);
  // One token per step: every prefill step is a one-token chunk whose row is the
  // scheduler's placeholder logits row; only the last one ends the prompt.
  for (const int64_t chunk : {1, 3, 64}) {
    const auto c = serve(*lm, {.max_slots = 1, .max_batch_tokens = chunk}, {prompt}, 6);
    EXPECT_EQ(c[0].tokens, expected(prompt, 6)) << "chunk " << chunk;
    EXPECT_EQ(c[0].reason, FinishReason::kLength);
  }
  EXPECT_EQ(f->encode_calls, 3);
  EXPECT_EQ(f->encoded_rows, 3 * 11);
}

TEST(Seq2SeqCausal, ConcurrentRequestsShareDecodeCallsAndGetTheirOwnTokens) {
  auto fake = std::make_unique<FakeSeq2Seq>();
  FakeSeq2Seq* f = fake.get();
  auto lm = seq2seq_as_causal_lm(std::move(fake));
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < 6; ++i) prompts.push_back(prompt_of(2 + 5 * i, 10 + i));
  // 3 slots for 6 requests: slots are reused by later requests.
  const auto c = serve(*lm, {.max_slots = 3, .max_batch_tokens = 8}, prompts, 9);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(c[i].tokens, expected(prompts[i], 9)) << "request " << i;
  }
  EXPECT_GT(f->max_states, 1);  // decoder rows of several requests in one decode()
  EXPECT_EQ(f->encoded_rows, std::accumulate(prompts.begin(), prompts.end(), int64_t{0},
                                             [](int64_t a, const auto& p) {
                                               return a + static_cast<int64_t>(p.size());
                                             }));
}

TEST(Seq2SeqCausal, BadRowsAreTypedErrors) {
  auto lm = seq2seq_as_causal_lm(std::make_unique<FakeSeq2Seq>());
  KvCache cache = lm->new_cache(2);
  ForwardResult out;
  TokenBatch b;
  b.add(5, 0, 3);  // does not continue an empty slot
  EXPECT_THROW(lm->forward(b, cache, {}, out), InvalidArgument);
  TokenBatch c;
  c.add(kVocab, 0, 0);
  EXPECT_THROW(lm->forward(c, cache, {}, out), InvalidArgument);
  TokenBatch d;
  d.add(4, 7, 0);
  EXPECT_THROW(lm->forward(d, cache, {}, out), InvalidArgument);
  ForwardOptions cap;
  cap.capture = {"logits"};
  TokenBatch e;
  e.add(4, 0, 0);
  EXPECT_THROW(lm->forward(e, cache, cap, out), InvalidArgument);
}

}  // namespace
}  // namespace hubzoo
