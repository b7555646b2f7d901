#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <mutex>
#include <random>

#include "engine/test_collector.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;
const fs::path kRepo = fs::path(__FILE__).parent_path().parent_path();
const fs::path kSmolLM2 = kRepo / "models" / "SmolLM2-135M-Instruct";

// A model whose logits at a position are a pure function of its slot's tokens
// so far, like a real decoder's; it checks that every row continues its slot.
// Each position's token id is its value row in the KV cache and the logits
// read them back from there, so pages adopted from the prefix cache count
// exactly as a real model's keys and values do.
class FakeLM : public CausalLM {
 public:
  explicit FakeLM(int64_t vocab, int64_t max_positions = 4096) {
    info_.architecture = "Fake";
    info_.vocab_size = vocab;
    info_.max_position_embeddings = max_positions;
    info_.eos_token_ids = {2};
  }
  const ModelInfo& info() const override { return info_; }
  KvCache new_cache(int64_t num_slots) const override { return KvCache(1, num_slots, 4); }
  std::vector<std::string> capture_names() const override { return {}; }
  void forward(const TokenBatch& batch, KvCache& cache, const ForwardOptions& opt,
               ForwardResult& out) override {
    std::map<int64_t, int64_t> next;
    for (int64_t t = 0; t < batch.size(); ++t) {
      const int64_t slot = batch.slot[t];
      auto [it, fresh] = next.try_emplace(slot, cache.length(slot));
      if (batch.pos[t] != it->second) throw InvalidArgument("position does not continue its slot");
      ++it->second;
    }
    for (const auto& [slot, len] : next) cache.reserve(slot, len);
    peak_bytes = std::max(peak_bytes, cache.bytes());
    for (int64_t t = 0; t < batch.size(); ++t) {
      const float row[4] = {static_cast<float>(batch.ids[t]), 0.0f, 0.0f, 0.0f};
      cache.store_key(0, batch.slot[t], batch.pos[t], row);
      cache.store_value(0, batch.slot[t], batch.pos[t], row);
    }
    ++forward_calls;
    max_rows = std::max(max_rows, batch.size());
    const int64_t v = info_.vocab_size;
    out.logits.assign(opt.logits_rows.size() * v, 0.0f);
    for (size_t r = 0; r < opt.logits_rows.size(); ++r) {
      const int64_t t = opt.logits_rows[r];
      uint64_t seed = 1469598103934665603ull;
      float scratch[4];
      for (int64_t i = 0; i <= batch.pos[t]; ++i) {
        const float id = cache.read_value(0, batch.slot[t], i, 0, 1, scratch)[0];
        seed = (seed ^ static_cast<uint64_t>(id)) * 1099511628211ull;
      }
      std::mt19937_64 rng(seed);
      std::normal_distribution<float> normal(0.0f, 2.0f);
      for (int64_t i = 0; i < v; ++i) out.logits[r * v + i] = normal(rng);
    }
    for (const auto& [slot, len] : next) cache.set_length(slot, len);
  }
  int64_t forward_calls = 0, max_rows = 0, peak_bytes = 0;

 private:
  ModelInfo info_;
};

std::vector<int64_t> prompt_of(int64_t len, int64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> p(len);
  for (auto& id : p) id = 3 + static_cast<int64_t>(rng() % (vocab - 3));
  return p;
}

Completion run_alone(CausalLM& model, const Tokenizer* tok, GenerationRequest r) {
  Scheduler s(model, tok, {.max_slots = 1, .max_queue = 1});
  Collector c;
  c.attach(r);
  s.submit(std::move(r));
  return c.wait();
}

TEST(Scheduler, ConcurrentRequestsGetTheTokensTheyGetAlone) {
  FakeLM model(97);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r;
    r.prompt = prompt_of(3 + 5 * i, i, 97);
    r.max_tokens = 4 + (i * 7) % 13;
    r.ignore_eos = i % 3 == 0;
    if (i % 2) r.sampling = {.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 100u + i};
    requests.push_back(r);
  }
  std::vector<Completion> alone;
  for (const auto& r : requests) alone.push_back(run_alone(model, nullptr, r));

  model.max_rows = 0;
  // Few slots, a small prefill budget: requests wait, prompts are chunked,
  // prefill chunks share steps with decode rows.
  Scheduler s(model, nullptr, {.max_slots = 3, .max_queue = 16, .max_batch_tokens = 7});
  const std::vector<Completion> done = submit_and_wait(s, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Completion& c = done[i];
    EXPECT_EQ(c.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(c.reason, alone[i].reason) << "request " << i;
    EXPECT_EQ(c.prompt_tokens, static_cast<int64_t>(requests[i].prompt.size()));
  }
  EXPECT_LE(model.max_rows, 3 + 7);
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.kv_cache_bytes, 0);
  EXPECT_EQ(st.finished[0] + st.finished[1], requests.size());
}

// A KV budget of a few pages: requests wait for pages (never for lack of a
// slot here), the cache never holds more than the budget, every request gets
// the tokens it gets alone, and the cache is empty when all are done.
TEST(Scheduler, KvBudgetIsNeverExceededAndDrainsToZero) {
  FakeLM model(97);
  const int64_t page = 2 * kKvPage * 4 * sizeof(float);  // FakeLM: one layer, rows of 4
  const int64_t budget = 7 * page;
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 10; ++i) {
    GenerationRequest r;
    r.prompt = prompt_of(3 + 9 * i % 50, 40 + i, 97);
    r.max_tokens = 5 + (i * 5) % 20;
    r.ignore_eos = true;
    requests.push_back(r);
  }
  std::vector<Completion> alone;
  for (const auto& r : requests) alone.push_back(run_alone(model, nullptr, r));
  model.peak_bytes = 0;
  // Without the prefix cache, whose pages outlive requests (PrefixCache tests).
  Scheduler s(model, nullptr,
              {.max_slots = 8,
               .max_queue = 16,
               .max_batch_tokens = 9,
               .kv_cache_bytes = budget,
               .prefix_cache = false});
  const std::vector<Completion> done = submit_and_wait(s, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Completion& c = done[i];
    EXPECT_EQ(c.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(c.reason, FinishReason::kLength) << "request " << i;
  }
  EXPECT_GT(model.peak_bytes, 0);
  EXPECT_LE(model.peak_bytes, budget);
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.kv_budget_bytes, budget);
  EXPECT_EQ(st.kv_cache_bytes, 0);
  EXPECT_EQ(st.kv_reserved_bytes, 0);
  EXPECT_EQ(st.kv_pages, 0);
  // A prompt whose pages alone exceed the budget is refused, as one past max_context is.
  GenerationRequest big;
  big.prompt = prompt_of(7 * kKvPage, 1, 97);
  EXPECT_THROW(s.submit(big), ContextOverflow);
  // One that fits with fewer new tokens than asked ends at the budget (length).
  GenerationRequest capped;
  capped.prompt = prompt_of(6 * kKvPage - 3, 2, 97);
  capped.max_tokens = 50;
  capped.ignore_eos = true;
  Collector c;
  c.attach(capped);
  s.submit(std::move(capped));
  EXPECT_EQ(c.wait().tokens.size(), 3u + kKvPage);
}

// Requests whose prompts share prefixes: whole-page prefixes, one ending
// mid-page, branches of one history, a later turn that continues an earlier
// turn's answer, and an unrelated one.
std::vector<GenerationRequest> prefix_requests() {
  const std::vector<int64_t> history = prompt_of(50, 7, 97);
  std::vector<std::vector<int64_t>> prompts = {history, history, prompt_of(20, 8, 97)};
  for (int branch = 0; branch < 3; ++branch) {  // same history, different next messages
    auto p = history;
    const auto tail = prompt_of(5 + 9 * branch, 20 + branch, 97);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  auto mid = std::vector<int64_t>(history.begin(), history.begin() + 37);  // ends mid-page
  mid.push_back(5);
  prompts.push_back(mid);
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = i == 0 ? 20 : 6 + static_cast<int64_t>(i) * 3;
    r.ignore_eos = true;
    r.top_logprobs = 2;
    if (i % 2) r.sampling = {.temperature = 0.9f, .top_k = 30, .top_p = 0.95f, .seed = 5u + i};
    requests.push_back(r);
  }
  return requests;
}

struct Outcome {
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;  // chosen and top, in order
  int64_t cached = 0;
};

Outcome outcome_of(Collector& c) {
  Outcome o;
  const Completion done = c.wait();
  o.tokens = done.tokens;
  o.cached = done.cached_tokens;
  std::lock_guard lock(c.mu);
  for (const auto& e : c.events) {
    o.logprobs.push_back(e.logprobs.chosen.logprob);
    for (const auto& t : e.logprobs.top) o.logprobs.push_back(t.logprob);
  }
  return o;
}

// Admission counts a request's context, not its whole max_tokens: under a
// budget of a few pages several requests start, grow past what is free, and
// the newest are preempted (their pages freed) and resumed by recomputing
// their prompt and generated tokens. Every request still gets the tokens and
// logprobs it gets alone (greedy and seeded sampling: the sampler's state
// survives), the cache never exceeds the budget, and it drains to zero; with
// the prefix cache a resumed request adopts its own pages back.
TEST(Scheduler, PreemptionResumesWithTheTokensOfARunAlone) {
  FakeLM model(97);
  const int64_t page = 2 * kKvPage * 4 * sizeof(float);  // FakeLM: one layer, rows of 4
  const int64_t budget = 6 * page;
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r;
    r.prompt = prompt_of(4 + 5 * i, 60 + i, 97);
    r.max_tokens = 30 + 3 * i;  // each grows to 3-5 pages of its own
    r.ignore_eos = true;
    r.top_logprobs = 1;
    if (i % 2) r.sampling = {.temperature = 0.9f, .top_k = 30, .top_p = 0.95f, .seed = 70u + i};
    requests.push_back(r);
  }
  std::vector<Outcome> alone;
  for (auto r : requests) {
    Scheduler one(model, nullptr, {.max_slots = 1, .max_queue = 1});
    Collector c;
    c.attach(r);
    one.submit(std::move(r));
    alone.push_back(outcome_of(c));
  }
  for (const bool prefix_cache : {false, true}) {
    SCOPED_TRACE(prefix_cache ? "prefix cache" : "no prefix cache");
    model.peak_bytes = 0;
    Scheduler s(model, nullptr,
                {.max_slots = 8,
                 .max_queue = 16,
                 .max_batch_tokens = 12,
                 .kv_cache_bytes = budget,
                 .prefix_cache = prefix_cache});
    std::vector<Collector> collectors(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      GenerationRequest r = requests[i];
      collectors[i].attach(r);
      s.submit(std::move(r));
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      const Outcome o = outcome_of(collectors[i]);
      EXPECT_EQ(o.tokens, alone[i].tokens) << "request " << i;
      EXPECT_EQ(o.logprobs, alone[i].logprobs) << "request " << i;
      EXPECT_EQ(collectors[i].done->reason, FinishReason::kLength) << "request " << i;
    }
    const SchedulerStats st = s.stats();
    EXPECT_GT(st.preempted, 0u) << "the budget never ran out: nothing was preempted";
    EXPECT_LE(model.peak_bytes, budget);
    EXPECT_EQ(st.kv_cache_bytes, 0);
    EXPECT_EQ(st.kv_reserved_bytes, 0);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
    if (prefix_cache) {
      EXPECT_GT(st.prefix_hit_tokens, 0u);
    }
  }
}

// One request at a time, each waiting for the previous one (a conversation's
// turns); then the turn after the first answer, which continues it.
std::vector<Outcome> run_in_turns(CausalLM& model, const SchedulerOptions& options) {
  Scheduler s(model, nullptr, options);
  std::vector<Outcome> out;
  auto requests = prefix_requests();
  for (auto r : requests) {
    Collector c;
    c.attach(r);
    s.submit(std::move(r));
    out.push_back(outcome_of(c));
  }
  GenerationRequest next = requests[0];  // history + its answer + a new message
  next.prompt.insert(next.prompt.end(), out[0].tokens.begin(), out[0].tokens.end());
  next.prompt.push_back(11);
  Collector c;
  c.attach(next);
  s.submit(std::move(next));
  out.push_back(outcome_of(c));
  EXPECT_EQ(s.stats().kv_cache_bytes, 0);
  return out;
}

TEST(Scheduler, PrefixCacheGivesTheTokensAndLogprobsOfAFreshPrefill) {
  FakeLM model(97);
  SchedulerOptions on{.max_slots = 2, .max_queue = 8, .max_batch_tokens = 13};
  SchedulerOptions off = on;
  off.prefix_cache = false;
  const auto cached = run_in_turns(model, on), fresh = run_in_turns(model, off);
  ASSERT_EQ(cached.size(), fresh.size());
  for (size_t i = 0; i < cached.size(); ++i) {
    EXPECT_EQ(cached[i].tokens, fresh[i].tokens) << "request " << i;
    EXPECT_EQ(cached[i].logprobs, fresh[i].logprobs) << "request " << i;
    EXPECT_EQ(fresh[i].cached, 0);
  }
  EXPECT_EQ(cached[0].cached, 0);
  EXPECT_EQ(cached[1].cached, 48);  // 50 tokens: three whole pages
  EXPECT_EQ(cached[2].cached, 0);   // unrelated
  EXPECT_EQ(cached[3].cached, 48);  // branches of the history
  EXPECT_EQ(cached[5].cached, 48);
  EXPECT_EQ(cached[6].cached, 32);  // the history's first 37 tokens: two pages, then recomputed
  // The next turn: history (50) + first answer (20) + 1: 4 whole pages, the
  // last of them holding history and answer.
  EXPECT_EQ(cached[7].cached, 64);
}

// Many requests sharing prefixes at once, in a budget small enough that the
// prefix cache must evict: the same tokens as without it, never past the budget.
TEST(Scheduler, PrefixCacheUnderLoadAndEvictionKeepsTokensAndBudget) {
  FakeLM model(97);
  const int64_t page = 2 * kKvPage * 4 * sizeof(float);
  std::vector<GenerationRequest> requests;
  for (int round = 0; round < 3; ++round) {
    for (auto& r : prefix_requests()) requests.push_back(r);
  }
  auto run = [&](bool prefix) {
    model.peak_bytes = 0;
    SchedulerOptions o{.max_slots = 4, .max_queue = 64, .max_batch_tokens = 11};
    o.kv_cache_bytes = 14 * page;
    o.prefix_cache = prefix;
    Scheduler s(model, nullptr, o);
    std::vector<Collector> collectors(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      auto r = requests[i];
      collectors[i].attach(r);
      s.submit(std::move(r));
    }
    std::vector<Outcome> out;
    for (auto& c : collectors) out.push_back(outcome_of(c));
    const SchedulerStats st = s.stats();
    EXPECT_LE(model.peak_bytes, o.kv_cache_bytes);
    EXPECT_LE(st.kv_total_bytes, o.kv_cache_bytes);
    EXPECT_EQ(st.kv_cache_bytes, 0);
    EXPECT_EQ(st.kv_reserved_bytes, 0);
    EXPECT_EQ(st.prefix_cache, prefix);
    if (prefix) {
      EXPECT_GT(st.prefix_hit_tokens, 0u);
      EXPECT_GT(st.prefix_evicted_pages, 0u);
      EXPECT_EQ(st.kv_total_bytes, st.prefix_cached_pages * page);
    } else {
      EXPECT_EQ(st.kv_total_bytes, 0);
    }
    return out;
  };
  const auto cached = run(true), fresh = run(false);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(cached[i].tokens, fresh[i].tokens) << "request " << i;
    EXPECT_EQ(cached[i].logprobs, fresh[i].logprobs) << "request " << i;
  }
}

// Requests that arrive together with one shared prefix (a system prompt):
// one prefills it, the others wait for its pages and adopt them.
TEST(Scheduler, RequestsArrivingTogetherShareOnePrefill) {
  FakeLM model(97);
  const std::vector<int64_t> system = prompt_of(40, 70, 97);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    r.prompt = system;
    const auto tail = prompt_of(3 + i, 80 + i, 97);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = 5;
    r.ignore_eos = true;
    requests.push_back(r);
  }
  auto run = [&](bool prefix) {
    SchedulerOptions o{.max_slots = 4, .max_queue = 4, .max_batch_tokens = 64};
    o.prefix_cache = prefix;
    Scheduler s(model, nullptr, o);
    std::vector<Collector> collectors(requests.size());
    auto batch = requests;
    for (size_t i = 0; i < batch.size(); ++i) collectors[i].attach(batch[i]);
    s.submit_all(std::move(batch));
    std::vector<Outcome> out;
    for (auto& c : collectors) out.push_back(outcome_of(c));
    return out;
  };
  const auto cached = run(true), fresh = run(false);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(cached[i].tokens, fresh[i].tokens) << "request " << i;
    EXPECT_EQ(cached[i].cached, i == 0 ? 0 : 32) << "request " << i;
  }
}

TEST(Scheduler, StopsAtEosAndMaxTokens) {
  FakeLM model(5);  // EOS (2) is likely
  GenerationRequest r;
  r.prompt = {3, 4};
  r.max_tokens = 1000;
  r.sampling.temperature = 1.0f;
  const Completion c = run_alone(model, nullptr, r);
  EXPECT_EQ(c.reason, FinishReason::kStop);
  EXPECT_EQ(c.tokens.back(), 2);
  r.ignore_eos = true;
  r.max_tokens = 9;
  const Completion d = run_alone(model, nullptr, r);
  EXPECT_EQ(d.reason, FinishReason::kLength);
  EXPECT_EQ(d.completion_tokens, 9);
}

TEST(Scheduler, ContextLimitEndsWithLengthAndRefusesLongPrompts) {
  FakeLM model(50, 16);
  Scheduler s(model, nullptr, {.max_slots = 1, .max_queue = 0});
  GenerationRequest r;
  r.prompt = prompt_of(10, 1, 50);
  r.max_tokens = 100;
  r.ignore_eos = true;
  Collector c;
  c.attach(r);
  s.submit(r);
  const Completion done = c.wait();
  EXPECT_EQ(done.reason, FinishReason::kLength);
  EXPECT_EQ(done.completion_tokens, 6);  // 10 + 6 = 16 positions
  r.prompt = prompt_of(16, 1, 50);
  EXPECT_THROW(s.submit(r), ContextOverflow);
  r.prompt = {49, 50};
  EXPECT_THROW(s.submit(r), InvalidArgument);
  r.prompt = {1};
  r.sampling.top_p = 0.0f;
  EXPECT_THROW(s.submit(r), InvalidArgument);
}

TEST(Scheduler, FullQueueRefusesAndCancelFreesTheSlot) {
  FakeLM model(64);
  Scheduler s(model, nullptr, {.max_slots = 2, .max_queue = 1});
  GenerationRequest endless;
  endless.prompt = {5, 6, 7};
  endless.max_tokens = 1 << 30;
  endless.ignore_eos = true;
  std::vector<Collector> c(3);
  std::vector<uint64_t> ids;
  for (auto& col : c) {
    auto r = endless;
    col.attach(r);
    ids.push_back(s.submit(std::move(r)));
  }
  EXPECT_THROW(s.submit(endless), QueueFull);
  EXPECT_EQ(s.stats().rejected, 1u);
  // Cancelling a running one lets the queued one in; then cancel everything.
  s.cancel(ids[0]);
  EXPECT_EQ(c[0].wait().reason, FinishReason::kCancelled);
  for (int i = 0; i < 200 && s.stats().waiting > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.stats().waiting, 0);
  EXPECT_EQ(s.stats().running, 2);
  s.cancel(ids[1]);
  s.cancel(ids[2]);
  EXPECT_EQ(c[1].wait().reason, FinishReason::kCancelled);
  EXPECT_EQ(c[2].wait().reason, FinishReason::kCancelled);
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_cache_bytes, 0);
  EXPECT_EQ(st.finished[static_cast<int>(FinishReason::kCancelled)], 3u);
  s.cancel(12345);  // unknown: ignored
}

TEST(Scheduler, ShutdownCancelsEverythingAndRefusesNewRequests) {
  FakeLM model(64);
  Scheduler s(model, nullptr, {.max_slots = 1, .max_queue = 4});
  GenerationRequest endless;
  endless.prompt = {5};
  endless.max_tokens = 1 << 30;
  endless.ignore_eos = true;
  std::vector<Collector> c(3);
  for (auto& col : c) {
    auto r = endless;
    col.attach(r);
    s.submit(std::move(r));
  }
  s.shutdown();
  for (auto& col : c) EXPECT_EQ(col.wait().reason, FinishReason::kCancelled);
  EXPECT_THROW(s.submit(endless), ShuttingDown);
}

TEST(Scheduler, SubmitAllQueuesEveryRequestOrNone) {
  FakeLM model(64);
  Scheduler s(model, nullptr, {.max_slots = 1, .max_queue = 1});
  GenerationRequest ok;
  ok.prompt = {5, 6};
  ok.max_tokens = 3;
  GenerationRequest bad = ok;
  bad.prompt = {5, 64};  // past the vocabulary
  std::vector<GenerationRequest> two = {ok, bad};
  EXPECT_THROW(s.submit_all(two), InvalidArgument);
  std::vector<GenerationRequest> three = {ok, ok, ok};  // one slot + one queued: no room
  EXPECT_THROW(s.submit_all(three), QueueFull);
  EXPECT_EQ(s.stats().submitted, 0u);
  EXPECT_EQ(s.stats().rejected, 3u);
}

// Fails every forward pass with a typed error.
class FailingLM : public FakeLM {
 public:
  FailingLM() : FakeLM(32) {}
  void forward(const TokenBatch&, KvCache&, const ForwardOptions&, ForwardResult&) override {
    throw FormatError("weights went missing");
  }
};

TEST(Scheduler, RunToCompletionMatchesRequestsAloneInOrder) {
  FakeLM model(97);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    r.prompt = prompt_of(2 + 3 * i, 7 + i, 97);
    r.max_tokens = 3 + i;
    r.sampling = {.temperature = 0.9f, .seed = 5};  // one seed for every row, as generate()
    requests.push_back(r);
  }
  requests[2].max_tokens = 0;  // completes at once, no tokens
  std::vector<Completion> alone;
  for (const auto& r : requests) {
    alone.push_back(r.max_tokens ? run_alone(model, nullptr, r) : Completion{});
  }
  int64_t events = 0;
  for (auto& r : requests) r.on_token = [&](const TokenEvent&) { ++events; };
  model.max_rows = 0;
  const auto done = run_to_completion(model, nullptr, requests);
  ASSERT_EQ(done.size(), requests.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(done[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(done[i].prompt_tokens, static_cast<int64_t>(requests[i].prompt.size()));
    tokens += static_cast<int64_t>(done[i].tokens.size());
  }
  EXPECT_TRUE(done[2].tokens.empty());
  EXPECT_EQ(done[2].reason, FinishReason::kLength);
  EXPECT_EQ(events, tokens);  // every token streamed through its request's callback
  // Every prompt entered the first step together.
  EXPECT_EQ(model.max_rows, 2 + 5 + 11 + 14);
}

TEST(Scheduler, RunToCompletionRethrowsTheTypedError) {
  FailingLM model;
  GenerationRequest r;
  r.prompt = {3, 4};
  std::vector<GenerationRequest> one = {r};
  EXPECT_THROW(run_to_completion(model, nullptr, one), FormatError);
  one[0].prompt = {3, 40};  // past the vocabulary: refused before anything runs
  EXPECT_THROW(run_to_completion(model, nullptr, one), InvalidArgument);
  EXPECT_TRUE(run_to_completion(model, nullptr, {}).empty());
}

class SchedulerSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kSmolLM2 / "config.json"))
        << kSmolLM2 << " missing: run scripts/prepare_models.py (scripts/test does)";
  }
};

TEST_F(SchedulerSmolLM2, StreamedTextAndStopStringsAcrossTokens) {
  auto model = std::make_unique<FakeLM>(49152);
  const Tokenizer tok = Tokenizer::from_pretrained(kSmolLM2);
  GenerationRequest r;
  r.prompt = tok.encode("Hello").ids;
  r.max_tokens = 24;
  r.ignore_eos = true;
  r.top_logprobs = 3;
  Collector all;
  all.attach(r);
  {
    Scheduler s(*model, &tok, {.max_slots = 1, .max_queue = 0});
    s.submit(r);
    all.wait();
  }
  const Completion c = *all.done;
  EXPECT_EQ(c.text, tok.decode(c.tokens, true));
  std::string streamed;
  for (const auto& e : all.events) {
    streamed += e.text;
    ASSERT_TRUE(e.has_logprobs);
    ASSERT_EQ(e.logprobs.top.size(), 3u);
    EXPECT_EQ(e.logprobs.chosen.id, e.token);  // greedy: the chosen one is the most likely
    EXPECT_EQ(e.logprobs.top[0].id, e.token);
    EXPECT_LE(e.logprobs.chosen.logprob, 0.0f);
  }
  EXPECT_EQ(streamed, c.text);

  // A stop string made of the end of one token's text and the start of the next's.
  auto ascii = [](const std::string& t) {
    return !t.empty() && std::all_of(t.begin(), t.end(), [](char ch) { return ch > 32; });
  };
  std::string stop;
  for (size_t k = 1; k + 1 < c.tokens.size() && stop.empty(); ++k) {
    const std::string a = tok.decode({c.tokens[k]}, true), b = tok.decode({c.tokens[k + 1]}, true);
    if (ascii(a) && ascii(b)) stop = a.substr(a.size() - 1) + b.substr(0, 1);
  }
  ASSERT_FALSE(stop.empty());
  const size_t at = c.text.find(stop);
  ASSERT_NE(at, std::string::npos);
  r.stop = {"never appears in this text", stop};
  Collector stopped;
  stopped.attach(r);
  Scheduler s(*model, &tok, {.max_slots = 1, .max_queue = 0});
  s.submit(r);
  const Completion d = stopped.wait();
  EXPECT_EQ(d.reason, FinishReason::kStop);
  EXPECT_EQ(d.stop_string, stop);
  EXPECT_EQ(d.text, c.text.substr(0, at));
  std::string streamed_stopped;
  for (const auto& e : stopped.events) streamed_stopped += e.text;
  EXPECT_EQ(streamed_stopped, d.text);
}

// Greedy tokens of one sequence alone, from the model directly: the whole
// prompt in one forward, then one decode step per token.
std::vector<int64_t> greedy_alone(CausalLM& model, const std::vector<int64_t>& prompt, int64_t n) {
  const int64_t vocab = model.info().vocab_size;
  KvCache cache = model.new_cache(1);
  TokenBatch step;
  for (size_t i = 0; i < prompt.size(); ++i) {
    step.add(static_cast<int32_t>(prompt[i]), 0, static_cast<int32_t>(i));
  }
  ForwardOptions fwd;
  fwd.logits_rows = {step.size() - 1};
  ForwardResult out;
  std::vector<int64_t> tokens;
  for (int64_t k = 0; k < n; ++k) {
    model.forward(step, cache, fwd, out);
    tokens.push_back(std::max_element(out.logits.begin(), out.logits.begin() + vocab) -
                     out.logits.begin());
    step = TokenBatch();
    step.add(static_cast<int32_t>(tokens.back()), 0,
             static_cast<int32_t>(prompt.size() + tokens.size() - 1));
    fwd.logits_rows = {0};
  }
  return tokens;
}

TEST_F(SchedulerSmolLM2, BitIdenticalToTheModelAloneWithChunkedPrefill) {
  auto model = load_causal_lm(kSmolLM2.string());
  const int64_t vocab = model->info().vocab_size;
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_of(5 + 9 * i, 40 + i, vocab));
  std::vector<std::vector<int64_t>> expected;
  for (const auto& p : prompts) expected.push_back(greedy_alone(*model, p, 6));
  Scheduler s(*model, nullptr, {.max_slots = 4, .max_queue = 8, .max_batch_tokens = 13});
  std::vector<Collector> c(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = 6;
    r.ignore_eos = true;
    c[i].attach(r);
    s.submit(std::move(r));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(c[i].wait().tokens, expected[i]) << "prompt " << i;
  }
  // The synchronous path: every prompt in one prefill step, one slot each.
  std::vector<GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = prompts[i];
    requests[i].max_tokens = 6;
    requests[i].ignore_eos = true;
  }
  const auto done = run_to_completion(*model, nullptr, std::move(requests));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(done[i].tokens, expected[i]) << "prompt " << i;
  }
}

}  // namespace
}  // namespace hubzoo
