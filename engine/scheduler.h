// Continuous batching: requests join and leave between forward passes. Each
// step runs one TokenBatch holding a decode row for every running request and
// prefill chunks of newly admitted ones, each request in its own KV-cache slot.
//
// KV memory is paged (layers/kv_cache.h) and budgeted in bytes
// (kv_cache_bytes): a request is admitted when a slot is free (at most
// `max_slots` sequences run) and the pages it can grow to, prompt plus its
// new tokens, fit beside those the running requests may take; so the cache
// never outgrows its budget and a running request always finds its pages.
// A short request reserves only what it can use, not max_context positions.
// A request that cannot be admitted waits in a bounded queue; when the queue
// is full submit() refuses it (QueueFull). A finished or cancelled request's
// pages are released before the next step.
//
// Batch invariance: every row of a step is computed as it would be alone
// (the kernels reduce each row in a fixed order and attention reads only the
// row's own slot), each request samples with its own Sampler, and prefill
// chunks continue the cache exactly where it ends. So a request's tokens do
// not depend on what else runs, how its prompt was chunked, or which slot it got.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "grammar/token_vocabulary.h"
#include "models/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo {

// submit() when every slot is busy and the queue holds max_queue requests.
struct QueueFull : Error {
  using Error::Error;
};
// submit() after shutdown() began.
struct ShuttingDown : Error {
  using Error::Error;
};
// A prompt that does not leave room for one new token in max_context.
struct ContextOverflow : InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

struct SchedulerOptions {
  int64_t max_slots = 4;           // sequences holding KV memory at once
  int64_t max_queue = 64;          // requests waiting for a slot
  int64_t max_context = 0;         // positions per slot (prompt + new); 0: the model's maximum
  int64_t max_batch_tokens = 256;  // prefill tokens per step (decode rows come on top)
  // KV-cache budget in bytes; 0: every slot at max_context, at most half the
  // memory available when the scheduler starts (available_memory_bytes).
  int64_t kv_cache_bytes = 0;
  // Reuse the KV pages of earlier requests' prompts (engine/prefix_cache.h).
  bool prefix_cache = true;
  // > 0: pages only the prefix cache holds (kept for later requests) are
  // evicted, least recently used first, beyond this many bytes once a request
  // finishes, rather than only when the budget needs room. 0: no such limit.
  int64_t max_idle_prefix_bytes = 0;
};

// The memory the system reports available (MemAvailable of /proc/meminfo),
// or 0 where it does not say.
int64_t available_memory_bytes();

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

// One generated token as the callback sees it.
struct TokenEvent {
  int64_t token = 0;
  // Text this token released (may be empty: an incomplete UTF-8 character or
  // a possible stop string is held back). All events' text concatenated is
  // the completion's text.
  std::string text;
  bool end_token = false;  // an EOS or stop token: it ends the text and adds none of its own
  bool has_logprobs = false;
  Logprobs logprobs;  // of the model's raw distribution, before any sampling processor
};

struct Completion {
  FinishReason reason = FinishReason::kStop;
  std::vector<int64_t> tokens;  // generated, including a final EOS / stop token
  std::string text;             // released text; a matched stop string is not in it
  std::string stop_string;      // the stop string that ended it, if one did
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose keys and values came from the prefix cache
  int64_t completion_tokens = 0;
  std::string error;             // kError: what went wrong
  std::exception_ptr exception;  // kError: the exception itself, for a caller that rethrows it
  double queue_seconds = 0, first_token_seconds = 0, total_seconds = 0;
};

struct GenerationRequest {
  std::vector<int64_t> prompt;
  int64_t max_tokens = 16;  // new tokens; also capped by max_context
  SamplingParams sampling;
  std::vector<std::string> stop;        // stop strings (need a tokenizer)
  std::vector<int64_t> stop_token_ids;  // on top of the model's EOS ids
  bool ignore_eos = false;
  int64_t top_logprobs = -1;  // -1: no logprobs; n >= 0: the chosen token's plus n alternatives
  bool skip_special_tokens = true;
  // Structured generation (grammar/grammar.h): every token keeps the text a
  // prefix of a match, and EOS / stop ids come only once it is a complete
  // match (the end tokens are EOS, also under ignore_eos, and stop_token_ids).
  // Null: unconstrained. Needs a tokenizer.
  std::shared_ptr<const grammar::Grammar> grammar;
  // The token bytes the grammar is matched against; null: the tokenizer's
  // (special tokens never allowed). Set for a vocabulary that lets some
  // special tokens stand for their text (tool-call markers).
  std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary;
  // Called on the engine thread, in order; keep them short (hand off to
  // another thread). on_finish is called exactly once, last.
  std::function<void(const TokenEvent&)> on_token;
  std::function<void(const Completion&)> on_finish;
};

struct SchedulerStats {
  int64_t max_slots = 0, max_queue = 0, max_context = 0;
  int64_t running = 0;            // requests holding a slot
  int64_t waiting = 0;            // requests queued for a slot
  int64_t kv_cache_bytes = 0;     // held by requests (0 when idle)
  int64_t kv_total_bytes = 0;     // held in all: with the pages only the prefix cache holds
  int64_t kv_budget_bytes = 0;    // the cache's byte budget (kv_cache_bytes)
  int64_t kv_reserved_bytes = 0;  // what running requests were admitted for (context + 1 token)
  int64_t kv_pages = 0;           // pages held
  // Prefix cache: prompt tokens looked up and found, pages it holds, pages evicted.
  bool prefix_cache = false;
  uint64_t prefix_lookup_tokens = 0, prefix_hit_tokens = 0;
  int64_t prefix_cached_pages = 0;
  uint64_t prefix_evicted_pages = 0;
  uint64_t submitted = 0, rejected = 0;
  uint64_t preempted = 0;               // running requests sent back to the queue for want of pages
  uint64_t finished[4] = {0, 0, 0, 0};  // by FinishReason
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  uint64_t steps = 0, batch_rows = 0;
  double busy_seconds = 0;
  double grammar_seconds = 0;  // computing structured-generation masks
};

class PrefixCache;

class Scheduler {
 public:
  // `tokenizer` may be null (token ids only): events and completions then
  // carry no text, and stop strings are refused. Starts the engine thread.
  Scheduler(CausalLM& model, const Tokenizer* tokenizer, const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request and returns its id. Throws InvalidArgument for bad
  // parameters, ContextOverflow when the prompt leaves no room, QueueFull,
  // ShuttingDown. Callbacks run only for accepted requests.
  uint64_t submit(GenerationRequest request);
  // Queues every request or none (the first invalid one throws, as submit()
  // would; QueueFull when they do not all fit). Returns their ids in order.
  // Requests queued together are admitted together (as one batch) when
  // enough slots are free.
  std::vector<uint64_t> submit_all(std::vector<GenerationRequest> requests);
  // Ends a request between steps (reason kCancelled) and frees its slot.
  // Unknown or finished ids are ignored.
  void cancel(uint64_t id);
  // Refuses new requests, cancels every queued and running one and stops
  // the engine thread. Idempotent; the destructor calls it.
  void shutdown();

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }
  const ModelInfo& model_info() const { return model_.info(); }

 private:
  struct Sequence;
  void loop();
  // Under mu_: moves waiting requests into free slots, drops cancelled ones.
  void admit_locked(std::vector<std::shared_ptr<Sequence>>& finished);
  // Throws what submit() throws for a request that is not valid.
  void validate_request(const GenerationRequest& r) const;
  // max_new, or less where the pages of prompt_len + max_new positions would
  // not fit the KV budget.
  int64_t max_new_within_budget(int64_t prompt_len, int64_t max_new) const;
  void step();
  // KV bytes the running requests hold and still need (admission's measure).
  int64_t committed_bytes() const;
  // Reserves the pages of the rows step() is about to run, preempting the
  // newest running requests while the budget has no room for them.
  void reserve_step_pages();
  // Frees a running request's slot and queues it first to resume: it will
  // prefill its prompt and generated tokens again (adopting what the prefix
  // index still holds of them) and continue with the same sampler state.
  void preempt(const std::shared_ptr<Sequence>& s);
  // Samples a token for `s` from its logits; true if it finished.
  bool advance(Sequence& s, float* logits);
  // Masks `logits` with the request's grammar; throws when no token may follow.
  void constrain(Sequence& s, float* logits);
  // A newly admitted request adopts the cached pages of its prompt's prefix.
  void adopt_prefix(Sequence& s);
  void record_cache_locked();  // the cache's accounting into stats_, under mu_
  void finish(const std::shared_ptr<Sequence>& s, FinishReason reason,
              std::exception_ptr error = nullptr);

  // The tokenizer's token bytes for structured generation, built on first use.
  std::shared_ptr<const grammar::TokenVocabulary> token_vocabulary();

  CausalLM& model_;
  const Tokenizer* tokenizer_;
  std::once_flag vocab_once_;
  std::shared_ptr<const grammar::TokenVocabulary> vocab_;
  SchedulerOptions options_;
  KvCache cache_;
  std::unique_ptr<PrefixCache> prefix_;  // null: no prefix reuse

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::map<uint64_t, std::shared_ptr<Sequence>> live_;  // waiting or running, by id
  std::vector<int64_t> free_slots_;
  int64_t reserved_bytes_ = 0;  // KV bytes the running requests were admitted for
  SchedulerStats stats_;

  // Engine thread only.
  std::vector<std::shared_ptr<Sequence>> running_;  // admission order
  ForwardResult out_;
  std::thread thread_;
};

// The synchronous path of the CLI: runs `requests`
// to completion on a Scheduler of their own and returns their completions in
// order. Every request gets a slot and every prompt is prefilled in the first
// step, as one batch. A request with max_tokens 0 completes at once with no
// tokens. A request that fails rethrows its exception here. kv_cache_bytes:
// SchedulerOptions::kv_cache_bytes (requests beyond it wait their turn).
std::vector<Completion> run_to_completion(CausalLM& model, const Tokenizer* tokenizer,
                                          std::vector<GenerationRequest> requests,
                                          int64_t kv_cache_bytes = 0);

// Requests run to completion on an existing Scheduler (its prefix cache
// serves them and keeps their pages for later calls): queued together with
// submit_all(), their completions returned in order; a request with
// max_tokens 0 completes at once with no tokens. Throws what submit_all()
// throws, or a failed request's exception. Several threads may call it on
// one Scheduler at once: their requests share its steps.
std::vector<Completion> run_requests(Scheduler& scheduler, std::vector<GenerationRequest> requests);

// One request run to completion (the CLI's generate and chat).
Completion run_one_to_completion(CausalLM& model, const Tokenizer* tokenizer,
                                 GenerationRequest request);

}  // namespace hubzoo
