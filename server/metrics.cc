#include "server/metrics.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace hubzoo::server {

void Metrics::count_response(const std::string& path, int status) {
  std::lock_guard lock(mu_);
  ++responses_[{path, status}];
}

void Metrics::observe_completion(const Completion& c) {
  std::lock_guard lock(mu_);
  ++completions_;
  latency_sum_ += c.total_seconds;
  queue_sum_ += c.queue_seconds;
  if (!c.tokens.empty()) {
    ++ttft_count_;
    ttft_sum_ += c.first_token_seconds;
  }
}

int64_t resident_memory_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

namespace {
void metric(std::ostringstream& o, const char* name, const char* type, const char* help) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}
}  // namespace

std::string Metrics::render(const SchedulerStats& s, const std::string& model) const {
  std::ostringstream o;
  const std::string m = "{model=\"" + model + "\"}";
  metric(o, "hubzoo_requests_running", "gauge", "Requests holding a KV-cache slot.");
  o << "hubzoo_requests_running" << m << " " << s.running << "\n";
  metric(o, "hubzoo_requests_waiting", "gauge", "Requests queued for a KV-cache slot.");
  o << "hubzoo_requests_waiting" << m << " " << s.waiting << "\n";
  metric(o, "hubzoo_kv_slots", "gauge", "KV-cache slots (max concurrency).");
  o << "hubzoo_kv_slots" << m << " " << s.max_slots << "\n";
  metric(o, "hubzoo_kv_slots_used", "gauge", "KV-cache slots in use.");
  o << "hubzoo_kv_slots_used" << m << " " << s.running << "\n";
  metric(o, "hubzoo_queue_limit", "gauge", "Requests that may wait for a slot.");
  o << "hubzoo_queue_limit" << m << " " << s.max_queue << "\n";
  metric(o, "hubzoo_max_context_tokens", "gauge", "Positions per KV-cache slot.");
  o << "hubzoo_max_context_tokens" << m << " " << s.max_context << "\n";
  metric(o, "hubzoo_kv_cache_bytes", "gauge", "Bytes allocated for keys and values.");
  o << "hubzoo_kv_cache_bytes" << m << " " << s.kv_cache_bytes << "\n";
  metric(o, "hubzoo_kv_cache_budget_bytes", "gauge", "KV-cache byte budget (--kv-cache-bytes).");
  o << "hubzoo_kv_cache_budget_bytes" << m << " " << s.kv_budget_bytes << "\n";
  metric(o, "hubzoo_kv_cache_reserved_bytes", "gauge",
         "KV-cache bytes the running requests may grow to.");
  o << "hubzoo_kv_cache_reserved_bytes" << m << " " << s.kv_reserved_bytes << "\n";
  metric(o, "hubzoo_kv_cache_pages", "gauge", "KV-cache pages held (16 positions of one layer).");
  o << "hubzoo_kv_cache_pages" << m << " " << s.kv_pages << "\n";
  metric(o, "hubzoo_kv_cache_total_bytes", "gauge",
         "KV-cache bytes held, with the pages only the prefix cache holds.");
  o << "hubzoo_kv_cache_total_bytes" << m << " " << s.kv_total_bytes << "\n";
  metric(o, "hubzoo_prefix_cache_enabled", "gauge", "1 when prompts reuse cached KV pages.");
  o << "hubzoo_prefix_cache_enabled" << m << " " << (s.prefix_cache ? 1 : 0) << "\n";
  metric(o, "hubzoo_prefix_cache_lookup_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache.");
  o << "hubzoo_prefix_cache_lookup_tokens_total" << m << " " << s.prefix_lookup_tokens << "\n";
  metric(o, "hubzoo_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose keys and values came from the prefix cache.");
  o << "hubzoo_prefix_cache_hit_tokens_total" << m << " " << s.prefix_hit_tokens << "\n";
  metric(o, "hubzoo_prefix_cache_hit_rate", "gauge", "Hit tokens / looked-up tokens so far.");
  o << "hubzoo_prefix_cache_hit_rate" << m << " "
    << (s.prefix_lookup_tokens
            ? static_cast<double>(s.prefix_hit_tokens) / static_cast<double>(s.prefix_lookup_tokens)
            : 0.0)
    << "\n";
  metric(o, "hubzoo_prefix_cache_pages", "gauge", "KV pages the prefix cache indexes.");
  o << "hubzoo_prefix_cache_pages" << m << " " << s.prefix_cached_pages << "\n";
  metric(o, "hubzoo_prefix_cache_evicted_pages_total", "counter",
         "Pages evicted from the prefix cache (least recently used) to make room.");
  o << "hubzoo_prefix_cache_evicted_pages_total" << m << " " << s.prefix_evicted_pages << "\n";
  metric(o, "hubzoo_requests_submitted_total", "counter", "Generation requests accepted.");
  o << "hubzoo_requests_submitted_total" << m << " " << s.submitted << "\n";
  metric(o, "hubzoo_requests_rejected_total", "counter", "Requests refused: queue full.");
  o << "hubzoo_requests_rejected_total" << m << " " << s.rejected << "\n";
  metric(o, "hubzoo_requests_finished_total", "counter", "Finished generations by reason.");
  for (int r = 0; r < 4; ++r) {
    o << "hubzoo_requests_finished_total{model=\"" << model << "\",reason=\""
      << finish_reason_name(static_cast<FinishReason>(r)) << "\"} " << s.finished[r] << "\n";
  }
  metric(o, "hubzoo_prompt_tokens_total", "counter", "Prompt tokens prefilled.");
  o << "hubzoo_prompt_tokens_total" << m << " " << s.prompt_tokens << "\n";
  metric(o, "hubzoo_generation_tokens_total", "counter", "Tokens generated.");
  o << "hubzoo_generation_tokens_total" << m << " " << s.generated_tokens << "\n";
  metric(o, "hubzoo_engine_steps_total", "counter", "Forward passes of the scheduler.");
  o << "hubzoo_engine_steps_total" << m << " " << s.steps << "\n";
  metric(o, "hubzoo_engine_batch_rows_total", "counter", "Token rows over all forward passes.");
  o << "hubzoo_engine_batch_rows_total" << m << " " << s.batch_rows << "\n";
  metric(o, "hubzoo_engine_busy_seconds_total", "counter", "Time spent in forward passes.");
  o << "hubzoo_engine_busy_seconds_total" << m << " " << s.busy_seconds << "\n";
  metric(o, "hubzoo_client_disconnects_total", "counter",
         "Streams cancelled because the client went away.");
  o << "hubzoo_client_disconnects_total " << disconnects_.load() << "\n";
  {
    std::lock_guard lock(mu_);
    metric(o, "hubzoo_time_to_first_token_seconds", "summary", "Submit to first token.");
    o << "hubzoo_time_to_first_token_seconds_sum" << m << " " << ttft_sum_ << "\n";
    o << "hubzoo_time_to_first_token_seconds_count" << m << " " << ttft_count_ << "\n";
    metric(o, "hubzoo_request_queue_seconds", "summary", "Submit to slot admission.");
    o << "hubzoo_request_queue_seconds_sum" << m << " " << queue_sum_ << "\n";
    o << "hubzoo_request_queue_seconds_count" << m << " " << completions_ << "\n";
    metric(o, "hubzoo_request_latency_seconds", "summary", "Submit to finish.");
    o << "hubzoo_request_latency_seconds_sum" << m << " " << latency_sum_ << "\n";
    o << "hubzoo_request_latency_seconds_count" << m << " " << completions_ << "\n";
    metric(o, "hubzoo_http_responses_total", "counter", "HTTP responses by path and status.");
    for (const auto& [key, n] : responses_) {
      o << "hubzoo_http_responses_total{path=\"" << key.first << "\",status=\"" << key.second
        << "\"} " << n << "\n";
    }
  }
  metric(o, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  o << "process_resident_memory_bytes " << resident_memory_bytes() << "\n";
  return o.str();
}

}  // namespace hubzoo::server
