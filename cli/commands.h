// Subcommands of the `hubzoo` CLI that live in their own files.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/causal_lm.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI
namespace hubzoo::server {
struct ServerOptions;
}

namespace hubzoo::cli {

// --gguf-file NAME and --quantize TYPE (cli/options.cc).
void add_load_options(CLI::App* cmd, std::string& gguf_file, std::string& quantize);
// LoadOptions from the shared flags; throws InvalidArgument naming a bad value.
LoadOptions load_options(int threads, const std::string& dtype, const std::string& mode,
                         const std::string& quantize, const std::string& gguf_file);

// Checks for number options whose errors say what the option wants
// ("--repeats: must be positive, got 0").
const CLI::Validator& positive();
const CLI::Validator& non_negative();

// One stderr line per part of the checkpoint the model does not run (a
// multimodal checkpoint's vision/audio towers), with the reason.
void note_ignored_modules(const ModelInfo& info);

struct ChatArgs {
  std::string model, message, system, dtype = "float32", mode = "fused", gguf_file, quantize;
  int64_t max_new_tokens = 512;
  float temperature = 0.0f, top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool stats = false;
};

// One shot with a message, else a read-reply loop on stdin until EOF or /exit.
int run_chat(const ChatArgs& args);

// `hubzoo generate` on an encoder-decoder (cli/seq2seq.cc).
struct Seq2SeqGenerateArgs {
  std::string model, prompt, dtype = "float32", mode = "fused";
  std::vector<int64_t> ids;  // used when prompt is empty
  int64_t max_new_tokens = 32;
  float temperature = 0.0f, top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool ignore_eos = false, json = false;
};
// Whether `model` (not a GGUF) is a snapshot whose config.json names an encoder-decoder.
bool is_seq2seq_model(const std::string& model, const std::string& gguf_file);
int run_seq2seq_generate(const Seq2SeqGenerateArgs& args);

struct EmbedArgs {
  std::string model, dtype = "float32", mode = "fused", format = "text";
  std::optional<std::string> prompt, prompt_name;
  std::optional<bool> normalize;
  std::vector<std::string> texts;
  int64_t batch_size = 32;
  int threads = 0;
};

// `hubzoo embed` (cli/embed.cc): registers its options on `app`.
CLI::App* add_embed_command(CLI::App& app, EmbedArgs& args);
int run_embed(const EmbedArgs& args);

struct RerankArgs {
  std::string model, query, dtype = "float32", mode = "fused", format = "text";
  std::optional<std::string> instruction;
  std::vector<std::string> documents;
  int64_t max_length = 0, top_n = 0;  // 0: the model's / every document
  bool raw = false;
  int threads = 0;
};

// `hubzoo rerank` (cli/rerank.cc): registers its options on `app`.
CLI::App* add_rerank_command(CLI::App& app, RerankArgs& args);
int run_rerank(const RerankArgs& args);

// `hubzoo serve` (cli/serve.cc): registers its options on `app`; runs until SIGINT/SIGTERM.
CLI::App* add_serve_command(CLI::App& app, server::ServerOptions& options);
int run_serve(const server::ServerOptions& options);

struct BenchArgs {
  std::string model, dtype = "bfloat16", mode = "fused", gguf_file, quantize;
  std::string prefill = "128,512,2048", decode_batch = "1,4,16";
  int64_t decode_tokens = 64, ttft_prompt = 39;
  int repeats = 3;
  int threads = 0;
};

// `hubzoo bench` (cli/bench.cc): registers its options on `app`; prints one JSON object.
CLI::App* add_bench_command(CLI::App& app, BenchArgs& args);
int run_bench(const BenchArgs& args, std::chrono::steady_clock::time_point process_start);

// --offline on every -m command (cli/hub.cc).
void add_offline_flag(CLI::App* cmd, bool& offline);
// Downloads `model` into the HF cache unless it is a directory, already there, or
// offline; progress on stderr, or one "<log_prefix>line" per line when given.
void ensure_model(const std::string& model, const std::string& gguf_file, bool offline,
                  const std::string& log_prefix = "");

struct PullArgs {
  std::string repo, gguf_file;
  std::vector<std::string> include, exclude;
  int workers = 8;
  bool quiet = false;
};
CLI::App* add_pull_command(CLI::App& app, PullArgs& args);
int run_pull(const PullArgs& args);

struct CacheArgs {
  std::string action, repo, format = "text";
};
// `hubzoo cache ls [--format json]`, `hubzoo cache rm ORG/NAME[@REV]`.
CLI::App* add_cache_command(CLI::App& app, CacheArgs& args);
int run_cache(const CacheArgs& args);

}  // namespace hubzoo::cli
