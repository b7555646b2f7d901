#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>

#include "engine/prefix_cache.h"
#include "engine/stop_strings.h"
#include "grammar/matcher.h"

namespace hubzoo {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
// The message of a caught exception (every one the engine catches is a std::exception).
std::string what(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}
}  // namespace

struct Scheduler::Sequence {
  Sequence(uint64_t id_, GenerationRequest r)
      : id(id_), req(std::move(r)), context(req.prompt), sampler(req.sampling), stops(req.stop) {}
  uint64_t id;
  GenerationRequest req;
  // The tokens to prefill: the prompt, or after a preemption the prompt and
  // every token generated so far (recomputed: the same bits, layers/batch.h).
  std::vector<int64_t> context;
  Sampler sampler;
  std::optional<DecodeStream> decode;
  StopStrings stops;
  std::vector<int64_t> stop_ids;  // EOS (unless ignored) and the request's own
  int64_t max_new = 0;
  int64_t slot = -1;
  int64_t kv_bytes = 0;   // KV bytes it was admitted for: its context and one new token
  int64_t prefilled = 0;  // context tokens in the cache
  int64_t preemptions = 0;
  bool prefix_checked = false, prompt_indexed = false;
  Completion done;
  std::atomic<bool> cancelled{false};
  bool finished = false;
  Clock::time_point submitted = Clock::now(), admitted, first_token;
  std::vector<float> raw_logits;                     // copy kept for logprobs
  std::unique_ptr<grammar::GrammarMatcher> matcher;  // structured generation, if asked
};

std::shared_ptr<const grammar::TokenVocabulary> Scheduler::token_vocabulary() {
  std::call_once(vocab_once_,
                 [&] { vocab_ = grammar::TokenVocabulary::from_tokenizer(*tokenizer_); });
  return vocab_;
}

Scheduler::Scheduler(CausalLM& model, const Tokenizer* tokenizer, const SchedulerOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      cache_(model.new_cache(std::max<int64_t>(options.max_slots, 1))) {
  if (options_.max_slots <= 0) throw InvalidArgument("max_slots must be > 0");
  if (options_.max_queue < 0) throw InvalidArgument("max_queue must be >= 0");
  if (options_.max_batch_tokens <= 0) throw InvalidArgument("max_batch_tokens must be > 0");
  const int64_t model_max = model.info().max_position_embeddings;
  if (options_.max_context <= 0) options_.max_context = model_max > 0 ? model_max : 2048;
  if (model_max > 0 && options_.max_context > model_max) {
    throw InvalidArgument("max_context " + std::to_string(options_.max_context) +
                          " exceeds the model's max_position_embeddings " +
                          std::to_string(model_max));
  }
  for (int64_t s = options_.max_slots - 1; s >= 0; --s) free_slots_.push_back(s);
  stats_.max_slots = options_.max_slots;
  stats_.max_queue = options_.max_queue;
  stats_.max_context = options_.max_context;
  // The cache's own accounting: a sliding-window layer needs only its window.
  const int64_t whole_slots = options_.max_slots * cache_.slot_bytes_at(options_.max_context);
  if (options_.kv_cache_bytes < 0) throw InvalidArgument("kv_cache_bytes must be >= 0");
  if (options_.max_idle_prefix_bytes < 0) {
    throw InvalidArgument("max_idle_prefix_bytes must be >= 0");
  }
  if (options_.kv_cache_bytes == 0) {
    const int64_t half_available = available_memory_bytes() / 2;
    options_.kv_cache_bytes =
        half_available > 0 ? std::min(whole_slots, half_available) : whole_slots;
  }
  cache_.set_budget_bytes(options_.kv_cache_bytes);
  stats_.kv_budget_bytes = options_.kv_cache_bytes;
  if (options_.prefix_cache && model.info().kv_in_cache && PrefixCache::supported(cache_)) {
    const ModelInfo& info = model.info();
    const std::string numerics =
        std::string(info.numerics.dtype_name()) + "/" + info.numerics.mode_name() + "/" +
        std::to_string(info.quantized_matrices) + "/" + std::to_string(info.weight_bytes);
    prefix_ = std::make_unique<PrefixCache>(
        cache_,
        model_seed(info.architecture, info.snapshot.string(), info.gguf_file.string(), numerics));
    cache_.set_make_room([this] { return prefix_->evict_one(); });
    stats_.prefix_cache = true;
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::validate_request(const GenerationRequest& request) const {
  const ModelInfo& info = model_.info();
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) throw InvalidArgument("the prompt is empty");
  for (int64_t id : request.prompt) {
    if (id < 0 || id >= info.vocab_size) {
      throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(info.vocab_size) + ")");
    }
  }
  validate(request.sampling, info.vocab_size);
  if (request.max_tokens <= 0) throw InvalidArgument("max_tokens must be > 0");
  if (request.top_logprobs > info.vocab_size) {
    throw InvalidArgument("top_logprobs exceeds the vocabulary size");
  }
  if (!tokenizer_ && !request.stop.empty()) {
    throw InvalidArgument("stop strings need a tokenizer");
  }
  if (!tokenizer_ && request.grammar) {
    throw InvalidArgument("structured generation needs a tokenizer");
  }
  if (prompt_len >= options_.max_context) {
    throw ContextOverflow(
        "the prompt is " + std::to_string(prompt_len) + " tokens; the maximum context is " +
        std::to_string(options_.max_context) + " tokens, which leaves no room for a new token");
  }
  if (cache_.slot_bytes_at(prompt_len + 1) > options_.kv_cache_bytes) {
    throw ContextOverflow("the prompt is " + std::to_string(prompt_len) +
                          " tokens; with a new token its KV cache would take " +
                          std::to_string(cache_.slot_bytes_at(prompt_len + 1)) +
                          " bytes, more than the whole KV budget of " +
                          std::to_string(options_.kv_cache_bytes) + " bytes");
  }
}

int64_t Scheduler::max_new_within_budget(int64_t prompt_len, int64_t max_new) const {
  // slot_bytes_at grows with n: the largest max_new whose pages fit the budget
  // (validate_request made sure that 1 does).
  int64_t lo = 1, hi = max_new;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (cache_.slot_bytes_at(prompt_len + mid) <= options_.kv_cache_bytes) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

uint64_t Scheduler::submit(GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one))[0];
}

std::vector<uint64_t> Scheduler::submit_all(std::vector<GenerationRequest> requests) {
  for (const auto& r : requests) validate_request(r);
  const ModelInfo& info = model_.info();
  const int64_t n = static_cast<int64_t>(requests.size());
  std::vector<uint64_t> ids;
  std::unique_lock lock(mu_);
  if (stopping_) throw ShuttingDown("the server is shutting down");
  // Requests that would wait for a slot once these are queued.
  const int64_t would_wait =
      static_cast<int64_t>(waiting_.size()) + n - static_cast<int64_t>(free_slots_.size());
  if (would_wait > options_.max_queue) {
    stats_.rejected += static_cast<uint64_t>(n);
    throw QueueFull("all " + std::to_string(options_.max_slots) + " slots are busy and " +
                    std::to_string(options_.max_queue) + " requests are queued");
  }
  for (auto& request : requests) {
    const uint64_t id = next_id_++;
    const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
    auto s = std::make_shared<Sequence>(id, std::move(request));
    s->max_new = max_new_within_budget(
        prompt_len, std::min(s->req.max_tokens, options_.max_context - prompt_len));
    s->kv_bytes = cache_.slot_bytes_at(prompt_len + 1);
    s->stop_ids = s->req.stop_token_ids;
    if (!s->req.ignore_eos) {
      s->stop_ids.insert(s->stop_ids.end(), info.eos_token_ids.begin(), info.eos_token_ids.end());
    }
    s->sampler.set_prompt(s->req.prompt);
    if (s->req.grammar) {
      std::vector<int64_t> ends = s->req.stop_token_ids;
      ends.insert(ends.end(), info.eos_token_ids.begin(), info.eos_token_ids.end());
      s->matcher = std::make_unique<grammar::GrammarMatcher>(
          s->req.grammar,
          s->req.grammar_vocabulary ? s->req.grammar_vocabulary : token_vocabulary(),
          std::move(ends));
    }
    if (tokenizer_) s->decode.emplace(*tokenizer_, s->req.skip_special_tokens);
    s->done.prompt_tokens = prompt_len;
    waiting_.push_back(s);
    live_[id] = s;
    ++stats_.submitted;
    ids.push_back(id);
  }
  lock.unlock();
  cv_.notify_all();
  return ids;
}

void Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) return;
    it->second->cancelled = true;
  }
  cv_.notify_all();
}

void Scheduler::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mu_);
  SchedulerStats s = stats_;
  s.running = options_.max_slots - static_cast<int64_t>(free_slots_.size());
  s.kv_reserved_bytes = reserved_bytes_;
  s.waiting = static_cast<int64_t>(waiting_.size());
  return s;
}

int64_t Scheduler::committed_bytes() const {
  // What the slots hold (pages only the prefix index holds can be evicted),
  // plus what each running request still needs for the rest of its context
  // and its next page of growth: room kept so that a new admission is not
  // preempted at once by the requests already running.
  int64_t bytes = cache_.bytes() - (prefix_ ? prefix_->idle_bytes() : 0);
  for (const auto& s : running_) {
    const int64_t len = cache_.length(s->slot);
    const int64_t until =
        std::max<int64_t>(static_cast<int64_t>(s->context.size()) + 1, len) + kKvPage;
    bytes += std::max<int64_t>(0, cache_.slot_bytes_at(until) - cache_.slot_bytes_at(len));
  }
  return bytes;
}

void Scheduler::admit_locked(std::vector<std::shared_ptr<Sequence>>& cancelled) {
  std::erase_if(waiting_, [&](const std::shared_ptr<Sequence>& s) {
    if (!s->cancelled) return false;
    cancelled.push_back(s);
    return true;
  });
  // In order: a request waits until its context's pages fit beside what the
  // running ones hold and still need. Admitted requests grow page by page;
  // when the budget runs out the newest is preempted (reserve_step_pages).
  if (waiting_.empty() || free_slots_.empty()) return;
  int64_t committed = running_.empty() ? 0 : committed_bytes();  // walks the prefix index
  while (!waiting_.empty() && !free_slots_.empty() &&
         (running_.empty() || committed + waiting_.front()->kv_bytes <= options_.kv_cache_bytes)) {
    auto s = waiting_.front();
    waiting_.pop_front();
    committed += s->kv_bytes;
    reserved_bytes_ += s->kv_bytes;
    s->slot = free_slots_.back();
    free_slots_.pop_back();
    if (s->preemptions == 0) s->admitted = Clock::now();
    running_.push_back(s);
  }
}

void Scheduler::reserve_step_pages() {
  // The rows step() will add, in its order: a decode row for each request
  // past its context, then prefill chunks in admission order within
  // max_batch_tokens. Pages are reserved oldest request first; when the
  // budget has no room (after the prefix index evicted what it could), the
  // newest running request is preempted, so the oldest always progress.
  int64_t budget = options_.max_batch_tokens;
  for (size_t i = 0; i < running_.size(); ++i) {
    const std::shared_ptr<Sequence> s = running_[i];
    const int64_t context_len = static_cast<int64_t>(s->context.size());
    int64_t target = 0;
    if (s->prefilled >= context_len) {
      target = cache_.length(s->slot) + 1;
    } else if (s->prefix_checked && budget > 0) {
      const int64_t n = std::min(context_len - s->prefilled, budget);
      budget -= n;
      target = s->prefilled + n;
    } else {
      continue;
    }
    while (true) {
      try {
        cache_.reserve(s->slot, target);
        break;
      } catch (const KvCacheFull&) {
        const std::shared_ptr<Sequence> victim = running_.back();
        if (running_.size() == 1) throw;  // alone it always fits (max_new_within_budget)
        preempt(victim);
        if (victim == s) break;
      }
    }
  }
}

void Scheduler::preempt(const std::shared_ptr<Sequence>& s) {
  // Everything computed so far, for its own resumption (the prefix index
  // keeps the whole pages until memory is needed) and for anyone sharing it.
  std::vector<int64_t> tokens = s->req.prompt;
  tokens.insert(tokens.end(), s->done.tokens.begin(), s->done.tokens.end());
  if (prefix_) prefix_->insert(s->slot, tokens, cache_.length(s->slot));
  cache_.clear(s->slot);
  std::erase(running_, s);
  // It resumes by prefilling its prompt and every token it generated: the
  // last one's logits give the next token, as a decode row's would.
  s->context = std::move(tokens);
  s->prefilled = 0;
  s->prefix_checked = false;
  s->prompt_indexed = false;
  ++s->preemptions;
  std::lock_guard lock(mu_);
  free_slots_.push_back(s->slot);
  reserved_bytes_ -= s->kv_bytes;
  s->kv_bytes = cache_.slot_bytes_at(static_cast<int64_t>(s->context.size()) + 1);
  s->slot = -1;
  waiting_.push_front(s);  // first in line: admission is in order
  ++stats_.preempted;
}

void Scheduler::loop() {
  while (true) {
    for (const auto& s : std::vector(running_)) {
      if (s->cancelled) finish(s, FinishReason::kCancelled);
    }
    std::vector<std::shared_ptr<Sequence>> dropped;
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      stop = stopping_;
      if (stop) {
        dropped.assign(waiting_.begin(), waiting_.end());
        waiting_.clear();
      } else {
        admit_locked(dropped);
      }
    }
    for (const auto& s : dropped) finish(s, FinishReason::kCancelled);
    if (stop) {
      for (const auto& s : std::vector(running_)) finish(s, FinishReason::kCancelled);
      return;
    }
    if (running_.empty()) continue;
    try {
      step();
    } catch (const std::exception&) {  // e.g. out of memory: fail what runs, keep serving
      const std::exception_ptr error = std::current_exception();
      for (const auto& s : std::vector(running_)) finish(s, FinishReason::kError, error);
    }
  }
}

void Scheduler::step() {
  const auto t0 = Clock::now();
  const int64_t vocab = model_.info().vocab_size;
  TokenBatch batch;
  ForwardOptions fwd;
  std::vector<std::shared_ptr<Sequence>> owners;  // of each logits row
  std::vector<std::shared_ptr<Sequence>> in_batch;
  for (const auto& s : running_) adopt_prefix(*s);
  reserve_step_pages();
  // A decode row for every sequence past its context.
  for (const auto& s : running_) {
    const int64_t prompt_len = static_cast<int64_t>(s->req.prompt.size());
    if (s->prefilled < static_cast<int64_t>(s->context.size())) continue;
    const int64_t pos = prompt_len + static_cast<int64_t>(s->done.tokens.size()) - 1;
    batch.add(static_cast<int32_t>(s->done.tokens.back()), static_cast<int32_t>(s->slot),
              static_cast<int32_t>(pos));
    fwd.logits_rows.push_back(batch.size() - 1);
    owners.push_back(s);
    in_batch.push_back(s);
  }
  // Prefill chunks in admission order, within the token budget.
  int64_t budget = options_.max_batch_tokens;
  for (const auto& s : running_) {
    const int64_t context_len = static_cast<int64_t>(s->context.size());
    if (s->prefilled >= context_len || budget == 0 || !s->prefix_checked) continue;
    const int64_t n = std::min(context_len - s->prefilled, budget);
    for (int64_t i = s->prefilled; i < s->prefilled + n; ++i) {
      batch.add(static_cast<int32_t>(s->context[i]), static_cast<int32_t>(s->slot),
                static_cast<int32_t>(i));
    }
    s->prefilled += n;
    budget -= n;
    in_batch.push_back(s);
    if (s->prefilled == context_len) {
      fwd.logits_rows.push_back(batch.size() - 1);
      owners.push_back(s);
    }
  }
  if (batch.size() == 0) return;
  // An empty list would ask for every row's logits; a chunk-only step needs none.
  const bool dummy_row = fwd.logits_rows.empty();
  if (dummy_row) fwd.logits_rows.push_back(0);
  fwd.logits_unused = dummy_row;
  try {
    model_.forward(batch, cache_, fwd, out_);
  } catch (const std::exception&) {
    const std::exception_ptr error = std::current_exception();
    for (const auto& s : in_batch) finish(s, FinishReason::kError, error);
    return;
  }
  // Prompts prefilled in full: their whole pages join the prefix cache now,
  // for requests that share them while this one still runs.
  for (const auto& s : in_batch) {
    if (!prefix_ || s->prompt_indexed || s->prefilled < static_cast<int64_t>(s->context.size()))
      continue;
    s->prompt_indexed = true;
    prefix_->insert(s->slot, s->context, cache_.length(s->slot));
  }
  for (size_t r = 0; r < owners.size(); ++r) {
    const auto& s = owners[r];
    if (s->finished) continue;
    std::optional<FinishReason> reason;
    std::exception_ptr error;
    try {
      float* logits = &out_.logits[r * vocab];
      if (!advance(*s, logits)) continue;
      reason = s->done.reason;
    } catch (const std::exception&) {
      reason = FinishReason::kError;
      error = std::current_exception();
    }
    finish(s, *reason, error);
  }
  std::lock_guard lock(mu_);
  ++stats_.steps;
  stats_.batch_rows += static_cast<uint64_t>(batch.size());
  stats_.busy_seconds += seconds_between(t0, Clock::now());
  record_cache_locked();
}

void Scheduler::record_cache_locked() {
  stats_.kv_total_bytes = cache_.bytes();
  stats_.kv_cache_bytes = cache_.bytes() - (prefix_ ? prefix_->idle_bytes() : 0);
  stats_.kv_pages = cache_.pages_held();
  if (prefix_) {
    stats_.prefix_cached_pages = prefix_->cached_pages();
    stats_.prefix_evicted_pages = prefix_->evicted_pages();
  }
}

void Scheduler::adopt_prefix(Sequence& s) {
  if (s.prefix_checked) return;
  if (prefix_ && s.prefilled == 0) {
    // Another request still prefilling the same first page (requests that
    // arrive together with one system prompt): wait for its pages, indexed
    // once its prompt is prefilled, rather than compute them again.
    const auto& p = s.context;
    for (const auto& t : running_) {
      const auto& q = t->context;
      if (t.get() == &s || !t->prefix_checked || t->prompt_indexed) continue;
      const auto page = static_cast<size_t>(kKvPage);
      if (p.size() > page && q.size() > page && std::equal(p.begin(), p.begin() + page, q.begin()))
        return;
    }
  }
  s.prefix_checked = true;
  if (!prefix_ || s.prefilled > 0) return;
  // The last context token always runs: its logits give the next new token.
  const int64_t context_len = static_cast<int64_t>(s.context.size());
  const int64_t cached = prefix_->adopt(s.slot, s.context, context_len - 1);
  if (cached > 0) {
    cache_.set_length(s.slot, cached);
    s.prefilled = cached;
  }
  // What the request reports is its prompt's first lookup; a resumed one's
  // hits show in the counters only.
  if (s.preemptions == 0) s.done.cached_tokens = cached;
  std::lock_guard lock(mu_);
  stats_.prefix_lookup_tokens += static_cast<uint64_t>(context_len);
  stats_.prefix_hit_tokens += static_cast<uint64_t>(cached);
}

bool Scheduler::advance(Sequence& s, float* logits) {
  const int64_t vocab = model_.info().vocab_size;
  const bool want_logprobs = s.req.top_logprobs >= 0;
  if (want_logprobs) s.raw_logits.assign(logits, logits + vocab);
  if (s.matcher) constrain(s, logits);
  const int64_t token = s.sampler.sample(logits, vocab);
  if (s.matcher && !s.matcher->accept(token)) {
    throw Error("structured generation: the sampler chose token " + std::to_string(token) +
                ", which the grammar does not allow");
  }
  if (s.done.tokens.empty()) s.first_token = Clock::now();
  s.done.tokens.push_back(token);
  TokenEvent event;
  event.token = token;
  if (want_logprobs) {
    event.has_logprobs = true;
    event.logprobs = compute_logprobs(s.raw_logits.data(), vocab, token, s.req.top_logprobs);
  }
  std::optional<FinishReason> reason;
  if (std::find(s.stop_ids.begin(), s.stop_ids.end(), token) != s.stop_ids.end() ||
      (s.matcher && s.matcher->ended())) {
    event.text = s.stops.flush();
    event.end_token = true;
    reason = FinishReason::kStop;
  } else {
    if (s.decode) {
      auto r = s.stops.push(s.decode->step(token).value_or(""));
      event.text = std::move(r.text);
      if (r.stopped) {
        s.done.stop_string = r.matched;
        reason = FinishReason::kStop;
      }
    }
    if (!reason && static_cast<int64_t>(s.done.tokens.size()) >= s.max_new) {
      event.text += s.stops.flush();
      reason = FinishReason::kLength;
    }
  }
  s.done.text += event.text;
  if (s.req.on_token) s.req.on_token(event);
  if (reason) s.done.reason = *reason;
  return reason.has_value();
}

void Scheduler::constrain(Sequence& s, float* logits) {
  const auto t0 = Clock::now();
  const int64_t allowed = s.matcher->mask_logits(logits, model_.info().vocab_size);
  {
    std::lock_guard lock(mu_);
    stats_.grammar_seconds += seconds_between(t0, Clock::now());
  }
  if (allowed == 0) {
    throw Error(s.matcher->is_accepting()
                    ? "structured generation: the output is complete but the request has no end "
                      "token (EOS or stop_token_ids) to end it"
                    : "structured generation: no token of the vocabulary continues the output");
  }
}

void Scheduler::finish(const std::shared_ptr<Sequence>& s, FinishReason reason,
                       std::exception_ptr error) {
  if (s->finished) return;
  s->finished = true;
  if (s->slot >= 0 && prefix_ && reason != FinishReason::kError) {
    // Its whole pages, prompt and answer, for the next turn of a conversation.
    std::vector<int64_t> tokens = s->req.prompt;
    tokens.insert(tokens.end(), s->done.tokens.begin(), s->done.tokens.end());
    prefix_->insert(s->slot, tokens,
                    std::min<int64_t>(cache_.length(s->slot), static_cast<int64_t>(tokens.size())));
  }
  if (s->slot >= 0) cache_.clear(s->slot);
  if (prefix_ && options_.max_idle_prefix_bytes > 0) prefix_->trim(options_.max_idle_prefix_bytes);
  std::erase(running_, s);
  const auto now = Clock::now();
  Completion& c = s->done;
  c.reason = reason;
  c.exception = error;
  c.error = error ? what(error) : "";
  c.completion_tokens = static_cast<int64_t>(c.tokens.size());
  const auto admitted = s->slot >= 0 || s->preemptions > 0 ? s->admitted : now;
  c.queue_seconds = seconds_between(s->submitted, admitted);
  if (!c.tokens.empty()) c.first_token_seconds = seconds_between(s->submitted, s->first_token);
  c.total_seconds = seconds_between(s->submitted, now);
  {
    std::lock_guard lock(mu_);
    live_.erase(s->id);
    if (s->slot >= 0) {
      free_slots_.push_back(s->slot);
      reserved_bytes_ -= s->kv_bytes;
    }
    ++stats_.finished[static_cast<int>(reason)];
    stats_.prompt_tokens += static_cast<uint64_t>(std::min(s->prefilled, c.prompt_tokens));
    stats_.generated_tokens += static_cast<uint64_t>(c.completion_tokens);
    record_cache_locked();
  }
  s->slot = -1;
  if (s->req.on_finish) s->req.on_finish(c);
}

}  // namespace hubzoo

namespace hubzoo {

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:" && kib > 0) return kib * 1024;
  }
  return 0;
}

std::vector<Completion> run_requests(Scheduler& scheduler,
                                     std::vector<GenerationRequest> requests) {
  std::vector<Completion> done(requests.size());
  std::vector<GenerationRequest> to_run;
  std::vector<size_t> index;  // of each request in to_run, in `requests`
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationRequest& r = requests[i];
    done[i].prompt_tokens = static_cast<int64_t>(r.prompt.size());
    if (r.max_tokens == 0) {
      done[i].reason = FinishReason::kLength;
      continue;
    }
    index.push_back(i);
    to_run.push_back(std::move(r));
  }
  if (to_run.empty()) return done;

  // Shared with the callbacks, which the engine thread may still be running
  // when a failed submit_all() returns here.
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Completion> done;
    size_t finished = 0;
  };
  auto wait = std::make_shared<Wait>();
  wait->done.resize(to_run.size());
  for (size_t k = 0; k < to_run.size(); ++k) {
    to_run[k].on_finish = [wait, k, user = std::move(to_run[k].on_finish)](const Completion& c) {
      if (user) user(c);
      std::lock_guard lock(wait->mu);
      wait->done[k] = c;
      ++wait->finished;
      wait->cv.notify_all();
    };
  }
  scheduler.submit_all(std::move(to_run));  // all or none: throws before any runs
  {
    std::unique_lock lock(wait->mu);
    wait->cv.wait(lock, [&] { return wait->finished == index.size(); });
    for (size_t k = 0; k < index.size(); ++k) done[index[k]] = std::move(wait->done[k]);
  }
  for (const Completion& c : done) {
    if (c.reason != FinishReason::kError) continue;
    if (c.exception) std::rethrow_exception(c.exception);
    throw Error(c.error);
  }
  return done;
}

std::vector<Completion> run_to_completion(CausalLM& model, const Tokenizer* tokenizer,
                                          std::vector<GenerationRequest> requests,
                                          int64_t kv_cache_bytes) {
  int64_t prompt_tokens = 0, to_run = 0;
  for (const GenerationRequest& r : requests) {
    if (r.max_tokens == 0) continue;
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
    ++to_run;
  }
  SchedulerOptions options;
  options.max_slots = std::max<int64_t>(to_run, 1);  // run_requests submits no 0-token request
  options.max_queue = 0;
  options.max_batch_tokens = std::max<int64_t>(prompt_tokens, 1);  // one prefill step
  options.kv_cache_bytes = kv_cache_bytes;
  Scheduler scheduler(model, tokenizer, options);
  return run_requests(scheduler, std::move(requests));
}

Completion run_one_to_completion(CausalLM& model, const Tokenizer* tokenizer,
                                 GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  return run_to_completion(model, tokenizer, std::move(one))[0];
}

}  // namespace hubzoo
