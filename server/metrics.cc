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
  // One sample of a metric labelled with the model, after its HELP and TYPE lines.
  const auto sample = [&](const char* name, const char* type, const char* help, auto value) {
    metric(o, name, type, help);
    o << name << m << " " << value << "\n";
  };
  sample("hubzoo_requests_running", "gauge", "Requests holding a KV-cache slot.", s.running);
  sample("hubzoo_requests_waiting", "gauge", "Requests queued for a KV-cache slot.", s.waiting);
  sample("hubzoo_kv_slots", "gauge", "KV-cache slots (max concurrency).", s.max_slots);
  sample("hubzoo_kv_slots_used", "gauge", "KV-cache slots in use.", s.running);
  sample("hubzoo_queue_limit", "gauge", "Requests that may wait for a slot.", s.max_queue);
  sample("hubzoo_max_context_tokens", "gauge", "Positions per KV-cache slot.", s.max_context);
  sample("hubzoo_kv_cache_bytes", "gauge", "Bytes allocated for keys and values.",
         s.kv_cache_bytes);
  sample("hubzoo_kv_cache_budget_bytes", "gauge", "KV-cache byte budget (--kv-cache-bytes).",
         s.kv_budget_bytes);
  sample("hubzoo_kv_cache_reserved_bytes", "gauge",
         "KV-cache bytes the running requests were admitted for (context and one token).",
         s.kv_reserved_bytes);
  sample("hubzoo_requests_preempted_total", "counter",
         "Running requests sent back to the queue for want of KV pages (resumed by recompute).",
         s.preempted);
  sample("hubzoo_kv_cache_pages", "gauge", "KV-cache pages held (16 positions of one layer).",
         s.kv_pages);
  sample("hubzoo_kv_cache_total_bytes", "gauge",
         "KV-cache bytes held, with the pages only the prefix cache holds.", s.kv_total_bytes);
  sample("hubzoo_prefix_cache_enabled", "gauge", "1 when prompts reuse cached KV pages.",
         s.prefix_cache ? 1 : 0);
  sample("hubzoo_prefix_cache_lookup_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache.", s.prefix_lookup_tokens);
  sample("hubzoo_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose keys and values came from the prefix cache.", s.prefix_hit_tokens);
  sample("hubzoo_prefix_cache_hit_rate", "gauge", "Hit tokens / looked-up tokens so far.",
         s.prefix_lookup_tokens ? static_cast<double>(s.prefix_hit_tokens) /
                                      static_cast<double>(s.prefix_lookup_tokens)
                                : 0.0);
  sample("hubzoo_prefix_cache_pages", "gauge", "KV pages the prefix cache indexes.",
         s.prefix_cached_pages);
  sample("hubzoo_prefix_cache_evicted_pages_total", "counter",
         "Pages evicted from the prefix cache (least recently used) to make room.",
         s.prefix_evicted_pages);
  sample("hubzoo_requests_submitted_total", "counter", "Generation requests accepted.",
         s.submitted);
  sample("hubzoo_requests_rejected_total", "counter", "Requests refused: queue full.", s.rejected);
  metric(o, "hubzoo_requests_finished_total", "counter", "Finished generations by reason.");
  for (int r = 0; r < 4; ++r) {
    o << "hubzoo_requests_finished_total{model=\"" << model << "\",reason=\""
      << finish_reason_name(static_cast<FinishReason>(r)) << "\"} " << s.finished[r] << "\n";
  }
  sample("hubzoo_prompt_tokens_total", "counter", "Prompt tokens prefilled.", s.prompt_tokens);
  sample("hubzoo_generation_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
  sample("hubzoo_engine_steps_total", "counter", "Forward passes of the scheduler.", s.steps);
  sample("hubzoo_engine_batch_rows_total", "counter", "Token rows over all forward passes.",
         s.batch_rows);
  sample("hubzoo_engine_busy_seconds_total", "counter", "Time spent in forward passes.",
         s.busy_seconds);
  metric(o, "hubzoo_client_disconnects_total", "counter",
         "Streams cancelled because the client went away.");
  o << "hubzoo_client_disconnects_total " << disconnects_.load() << "\n";
  {
    std::lock_guard lock(mu_);
    const auto summary = [&](const char* name, const char* help, double sum, uint64_t count) {
      metric(o, name, "summary", help);
      o << name << "_sum" << m << " " << sum << "\n"
        << name << "_count" << m << " " << count << "\n";
    };
    summary("hubzoo_time_to_first_token_seconds", "Submit to first token.", ttft_sum_, ttft_count_);
    summary("hubzoo_request_queue_seconds", "Submit to slot admission.", queue_sum_, completions_);
    summary("hubzoo_request_latency_seconds", "Submit to finish.", latency_sum_, completions_);
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
