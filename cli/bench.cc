// `hubzoo bench`: hubzoo's own speed and memory figures for one causal LM, as
// one JSON object (bench/run.py puts them beside its peers'). Timing lives
// here and in bench/, never in tests.
//
//   load time        load_causal_lm() wall time
//   first token      CLOCK_MONOTONIC time when the first token of a --ttft-prompt prefill
//                    is known (bench/run.py subtracts the time it spawned the process);
//                    also the time since main() began
//   prefill tok/s    one sequence of P tokens, one forward, logits of the last row
//   decode tok/s     B sequences (16-token prompts) through the Scheduler with ignore_eos,
//                    as `hubzoo generate` and the server run them: B * steps / decode
//                    seconds (from the first token, after the one prefill step, to the last)
//   peak RSS         getrusage at the end, beside weight and KV cache bytes
//   huge pages       the throughput figures wait for the weights' move to huge pages
//                    (ops/weight_arena.h), which a load starts in the background: the
//                    wait's seconds and the process's AnonHugePages bytes are reported
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "engine/scheduler.h"
#include "hubzoo_commit.h"  // generated at build time: HUBZOO_GIT_COMMIT
#include "models/causal_lm.h"
#include "ops/matmul.h"
#include "ops/weight_arena.h"

namespace hubzoo::cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// This process image's own peak: VmHWM. getrusage's ru_maxrss also keeps the
// peak of the image before exec, so a bench spawned by a large parent (pytest
// with torch loaded, ~600 MB) would report the parent's.
int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "... kB"
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Token ids that are ordinary text in any vocabulary of this size: a fixed
// pseudo-random walk over the lower half (no special tokens at the top).
std::vector<int64_t> synthetic_prompt(int64_t n, int64_t vocab, int64_t seed) {
  std::vector<int64_t> ids(n);
  uint64_t s = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(seed + 1);
  for (auto& id : ids) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = 100 + static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(vocab / 2));
  }
  return ids;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(std::stoll(item));
  }
  return out;
}

// Decode tok/s of `batch` sequences of 16-token prompts: B * steps / seconds
// from the first token of every sequence (the one prefill step) to the last.
double decode_rate(CausalLM& model, int64_t batch, int64_t new_tokens) {
  std::vector<GenerationRequest> requests(batch);
  for (int64_t s = 0; s < batch; ++s) {
    requests[s].prompt = synthetic_prompt(16, model.info().vocab_size, 1000 + s);
    requests[s].max_tokens = new_tokens;
    requests[s].ignore_eos = true;
  }
  double first = 0, last = 0;
  for (const Completion& c : run_to_completion(model, nullptr, std::move(requests))) {
    first = std::max(first, c.first_token_seconds);
    last = std::max(last, c.total_seconds);
  }
  return static_cast<double>(batch * (new_tokens - 1)) / std::max(last - first, 1e-9);
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchArgs& a) {
  auto* cmd = app.add_subcommand("bench", "speed and memory of a causal LM (JSON on stdout)");
  cmd->add_option("-m,--model", a.model, "snapshot directory or repo id in the HF cache")
      ->required();
  cmd->add_option("--dtype", a.dtype)->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--mode", a.mode)->check(CLI::IsMember({"eager", "fused", "bf16dot", "int8"}));
  cmd->add_option("--threads", a.threads, "worker threads (0: all cores)");
  add_load_options(cmd, a.gguf_file, a.quantize);
  cmd->add_option("--prefill", a.prefill, "prompt lengths, comma-separated (empty: none)");
  cmd->add_option("--decode-batch", a.decode_batch, "decode batch sizes, comma-separated");
  cmd->add_option("--decode-tokens", a.decode_tokens, "new tokens per decode run")
      ->check(positive());
  cmd->add_option("--repeats", a.repeats, "runs per figure (median)")->check(positive());
  cmd->add_option("--ttft-prompt", a.ttft_prompt, "prompt length of the first-token figure")
      ->check(positive());
  return cmd;
}

// One forward of P synthetic tokens per --prefill length (median of --repeats);
// max_cache_bytes grows to the largest cache seen.
nlohmann::json prefill_figures(CausalLM& model, const BenchArgs& a, int64_t vocab,
                               int64_t& max_cache_bytes) {
  nlohmann::json prefill = nlohmann::json::array();
  ForwardResult out;
  for (int64_t p : parse_list(a.prefill)) {
    const auto ids = synthetic_prompt(p, vocab, p);
    TokenBatch b;
    for (int64_t i = 0; i < p; ++i) b.add(static_cast<int32_t>(ids[i]), 0, static_cast<int32_t>(i));
    ForwardOptions fwd;
    fwd.logits_rows = {p - 1};
    std::vector<double> times;
    for (int r = 0; r < a.repeats; ++r) {
      KvCache cache = model.new_cache(1);
      const auto t0 = Clock::now();
      model.forward(b, cache, fwd, out);
      times.push_back(since(t0));
      max_cache_bytes = std::max(max_cache_bytes, cache.bytes());
    }
    const double t = median(times);
    prefill.push_back({{"tokens", p}, {"seconds", t}, {"tok_s", p / t}});
  }
  return prefill;
}

// Decode tok/s through the Scheduler per --decode-batch size (median of --repeats).
nlohmann::json decode_figures(CausalLM& model, const BenchArgs& a, int64_t& max_cache_bytes) {
  nlohmann::json decode = nlohmann::json::array();
  for (int64_t batch : parse_list(a.decode_batch)) {
    std::vector<double> rates;
    for (int r = 0; r < a.repeats; ++r) rates.push_back(decode_rate(model, batch, a.decode_tokens));
    const double rate = median(rates);
    // The cache's own accounting (per-layer rows, sliding windows, shared layers).
    max_cache_bytes =
        std::max(max_cache_bytes, batch * model.new_cache(1).slot_bytes_at(16 + a.decode_tokens));
    decode.push_back({{"batch", batch}, {"tok_s", rate}, {"step_ms", 1e3 * batch / rate}});
  }
  return decode;
}

int run_bench(const BenchArgs& a, std::chrono::steady_clock::time_point process_start) {
  const auto t_load = Clock::now();
  auto model =
      load_causal_lm(a.model, load_options(a.threads, a.dtype, a.mode, a.quantize, a.gguf_file));
  const double load_s = since(t_load);
  const ModelInfo& info = model->info();
  const int64_t vocab = info.vocab_size;

  // Time to first token of a cold process: the first forward after load.
  ForwardResult out;
  {
    KvCache cache = model->new_cache(1);
    const auto ids = synthetic_prompt(a.ttft_prompt, vocab, 0);
    TokenBatch b;
    for (int64_t i = 0; i < a.ttft_prompt; ++i)
      b.add(static_cast<int32_t>(ids[i]), 0, static_cast<int32_t>(i));
    ForwardOptions fwd;
    fwd.logits_rows = {a.ttft_prompt - 1};
    model->forward(b, cache, fwd, out);
  }
  const auto first_token = Clock::now();
  const double ttft_s = std::chrono::duration<double>(first_token - process_start).count();
  const int64_t rss_after_load = peak_rss_bytes();
  // The weights move to huge pages in the background after the load
  // (ops/weight_arena.h), which a server finishes within a second of
  // starting: the throughput figures are taken once that is done.
  const auto t_pages = Clock::now();
  WeightArena::wait_for_collapses();
  const double huge_pages_wait_s = since(t_pages);

  int64_t max_cache_bytes = 0;
  const nlohmann::json prefill = prefill_figures(*model, a, vocab, max_cache_bytes);
  const nlohmann::json decode = decode_figures(*model, a, max_cache_bytes);

  const int64_t bytes_per_param = info.numerics.dtype_name() == std::string("bfloat16") ? 2 : 4;
  nlohmann::json j = {
      {"engine", "hubzoo"},
      {"model", info.snapshot.filename().string()},
      {"architecture", info.architecture},
      {"dtype", info.numerics.dtype_name()},
      {"mode", info.numerics.mode_name()},
      {"threads", a.threads},
      {"matmul_target", matmul_target_name()},
      {"bf16_dot_products", matmul_bf16_dot()},
      {"bf16_tiles", matmul_bf16_tiles()},
      {"num_parameters", info.num_parameters},
      {"weight_bytes",
       info.weight_bytes > 0 ? info.weight_bytes : info.num_parameters * bytes_per_param},
      {"quantized_matrices", info.quantized_matrices},
      {"panel_matrices", info.panel_matrices},
      {"quant_cache_hits", info.quant_cache_hits},
      {"quant_cache_stores", info.quant_cache_stores},
      {"max_kv_cache_bytes", max_cache_bytes},
      {"load_seconds", load_s},
      {"ttft_prompt_tokens", a.ttft_prompt},
      {"ttft_from_main_seconds", ttft_s},
      {"first_token_monotonic_s",
       std::chrono::duration<double>(first_token.time_since_epoch()).count()},
      {"rss_after_first_token_bytes", rss_after_load},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"huge_pages_wait_seconds", huge_pages_wait_s},
      {"anon_huge_page_bytes", anon_huge_page_bytes()},
      {"prefill", prefill},
      {"decode", decode},
      {"decode_prompt_tokens", 16},
      {"decode_new_tokens", a.decode_tokens},
      {"repeats", a.repeats},
      {"hubzoo_version", HUBZOO_VERSION},
      {"git_commit", HUBZOO_GIT_COMMIT},
  };
  std::cout << j.dump(2) << std::endl;
  return 0;
}

}  // namespace hubzoo::cli
