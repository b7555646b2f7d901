// The `hubzoo` command: thin over the library; errors become one line on
// stderr and a non-zero exit.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "cli/commands.h"
#include "engine/scheduler.h"
#include "hub/snapshot.h"
#include "hubzoo_commit.h"  // generated at build time: HUBZOO_GIT_COMMIT
#include "io/json.h"
#include "models/causal_lm.h"
#include "ops/matmul.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo {
namespace {

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw InvalidArgument("--ids: '" + item + "' is not an integer");
    }
  }
  if (ids.empty()) throw InvalidArgument("--ids: no token ids given");
  return ids;
}

struct GenerateArgs {
  std::string model, ids, prompt, dtype = "float32", mode = "fused", format = "text";
  std::string gguf_file, quantize;
  int64_t max_new_tokens = 32;
  float temperature = 0.0f, top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool ignore_eos = false;
  std::string json_schema_file, regex;  // structured generation (at most one)
};

// Prefill time and decode rate of one completion, on stderr.
void print_speed(const Completion& c) {
  const int64_t decode_steps = std::max<int64_t>(c.completion_tokens - 1, 0);
  const double decode_seconds = c.total_seconds - c.first_token_seconds;
  std::fprintf(stderr, "prefill %lld tokens in %.3f s; decode %lld steps at %.2f tok/s\n",
               static_cast<long long>(c.prompt_tokens), c.first_token_seconds,
               static_cast<long long>(decode_steps), decode_steps / std::max(decode_seconds, 1e-9));
}

int run_generate(const GenerateArgs& a) {
  if (cli::is_seq2seq_model(a.model, a.gguf_file)) {
    if (!a.quantize.empty()) throw InvalidArgument("--quantize: not for encoder-decoder models");
    cli::Seq2SeqGenerateArgs s{a.model,          a.prompt,      a.dtype,           a.mode,  {},
                               a.max_new_tokens, a.temperature, a.top_p,           a.top_k, a.seed,
                               a.threads,        a.ignore_eos,  a.format == "json"};
    if (a.prompt.empty()) s.ids = parse_ids(a.ids);
    return cli::run_seq2seq_generate(s);
  }
  auto model = load_causal_lm(
      a.model, cli::load_options(a.threads, a.dtype, a.mode, a.quantize, a.gguf_file));
  // With --ids a checkpoint without tokenizer.json still runs (text is then null).
  std::optional<Tokenizer> tokenizer;
  const ModelInfo& info = model->info();
  cli::note_ignored_modules(info);
  if (!a.prompt.empty() || !info.gguf_file.empty() ||
      std::filesystem::exists(info.snapshot / "tokenizer.json")) {
    tokenizer = Tokenizer::from_pretrained(info.tokenizer_source());
  }
  GenerationRequest request;
  // A text prompt is encoded as transformers' tokenizer(text) does (special tokens added).
  request.prompt = a.prompt.empty() ? parse_ids(a.ids) : tokenizer->encode(a.prompt).ids;
  if (request.prompt.empty()) throw InvalidArgument("--prompt encodes to no tokens");
  request.max_tokens = a.max_new_tokens;
  request.sampling = {a.temperature, a.top_k, a.top_p, a.seed};
  request.ignore_eos = a.ignore_eos;
  if (!a.json_schema_file.empty() || !a.regex.empty()) {
    if (!tokenizer) throw InvalidArgument("--json-schema/--regex need the model's tokenizer");
    request.grammar = a.regex.empty() ? grammar::Grammar::from_json_schema_text(
                                            read_text_file(a.json_schema_file, uint64_t{16} << 20))
                                      : grammar::Grammar::from_regex(a.regex);
  }
  const bool json = a.format == "json";
  if (!json) {
    // Text as it decodes (without special tokens); token ids without a tokenizer.
    request.on_token = [&](const TokenEvent& e) {
      if (tokenizer) {
        std::fputs(e.text.c_str(), stdout);
      } else {
        std::printf("%lld ", static_cast<long long>(e.token));
      }
      std::fflush(stdout);
    };
  }
  const Completion c =
      run_one_to_completion(*model, tokenizer ? &*tokenizer : nullptr, std::move(request));
  if (json) {
    // New tokens only; text decoded without special tokens, as transformers'
    // decode(ids, skip_special_tokens=True) (the streamed text holds back a
    // character cut off by --max-new-tokens).
    nlohmann::json text = nullptr;
    if (tokenizer) text = tokenizer->decode(c.tokens, true);
    nlohmann::json out = {{"ids", c.tokens}, {"text", text}};
    std::cout << out.dump() << "\n";
  } else {
    std::printf("\n");
    print_speed(c);
  }
  return 0;
}

int run_tokenize(const std::string& model_ref, const std::string& gguf_file,
                 const std::string& text, const std::string& format) {
  const ModelSource src = resolve_model_source(model_ref, gguf_file);
  const Tokenizer tokenizer =
      Tokenizer::from_pretrained(src.gguf_file.empty() ? src.snapshot : src.gguf_file);
  const Encoding e = tokenizer.encode(text);
  if (format == "json") {
    nlohmann::json offsets = nlohmann::json::array();
    for (const auto& [begin, end] : e.offsets) offsets.push_back({begin, end});
    nlohmann::json out = {{"ids", e.ids}, {"tokens", e.tokens}, {"offsets", offsets}};
    std::cout << out.dump() << "\n";
  } else {
    for (size_t i = 0; i < e.ids.size(); ++i) {
      std::cout << e.ids[i] << "\t" << nlohmann::json(e.tokens[i]).dump() << "\n";
    }
  }
  return 0;
}

int run_inspect(const std::string& model_ref, const LoadOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto model = load_causal_lm(model_ref, options);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelInfo& i = model->info();
  nlohmann::json out = {
      {"architecture", i.architecture},
      {"snapshot", i.snapshot.string()},
      {"gguf_file",
       i.gguf_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(i.gguf_file.string())},
      {"quantized_matrices", i.quantized_matrices},
      {"quantize", !i.numerics.quantize_name().empty() ? nlohmann::json(i.numerics.quantize_name())
                                                       : nlohmann::json(nullptr)},
      {"num_layers", i.num_layers},
      {"hidden_size", i.hidden_size},
      {"vocab_size", i.vocab_size},
      {"max_position_embeddings", i.max_position_embeddings},
      {"num_parameters", i.num_parameters},
      {"eos_token_ids", i.eos_token_ids},
      {"bos_token_id", i.bos_token_id},
      {"pad_token_id", i.pad_token_id},
      {"ignored_tensors", i.ignored_tensors},
      {"ignored_modules", i.ignored_modules},
      {"dtype", i.numerics.dtype_name()},
      {"mode", i.numerics.mode_name()},
      {"matmul_target", matmul_target_name()},
      {"quant_target", quant_target_name()},
      {"bf16_dot_products", matmul_bf16_dot()},
      {"bf16_tiles", matmul_bf16_tiles()},
      {"load_seconds", load_s},
      {"hubzoo_version", HUBZOO_VERSION},
      {"git_commit", HUBZOO_GIT_COMMIT},
  };
  std::cout << out.dump(2) << "\n";
  return 0;
}

// `hubzoo generate`: its options into g.
CLI::App* add_generate_command(CLI::App& app, GenerateArgs& g) {
  auto* gen = app.add_subcommand("generate", "generate tokens from a prompt");
  gen->add_option("-m,--model", g.model, "snapshot directory or repo id in the HF cache")
      ->required();
  auto* ids_opt = gen->add_option("--ids", g.ids, "prompt token ids, comma-separated");
  auto* prompt_opt = gen->add_option("--prompt", g.prompt, "prompt text");
  ids_opt->excludes(prompt_opt);
  gen->add_option("--max-new-tokens", g.max_new_tokens)->check(cli::non_negative());
  gen->add_option("--dtype", g.dtype)->check(CLI::IsMember({"float32", "bfloat16"}));
  gen->add_option("--mode", g.mode)->check(CLI::IsMember({"eager", "fused", "bf16dot", "int8"}));
  gen->add_option("--temperature", g.temperature)->check(cli::non_negative());
  gen->add_option("--top-k", g.top_k)->check(cli::non_negative());
  gen->add_option("--top-p", g.top_p)->check(CLI::Range(0.0, 1.0));
  gen->add_option("--seed", g.seed);
  gen->add_option("--threads", g.threads, "worker threads (0: all cores)");
  gen->add_option("--format", g.format)->check(CLI::IsMember({"text", "json"}));
  gen->add_flag("--ignore-eos", g.ignore_eos, "generate all --max-new-tokens (benchmarks)");
  auto* schema_opt = gen->add_option("--json-schema", g.json_schema_file,
                                     "constrain the output to this JSON schema (a file)");
  auto* regex_opt = gen->add_option("--regex", g.regex, "constrain the output to this regex");
  schema_opt->excludes(regex_opt);
  cli::add_load_options(gen, g.gguf_file, g.quantize);

  return gen;
}

// `hubzoo chat`: its options into c.
CLI::App* add_chat_command(CLI::App& app, cli::ChatArgs& c) {
  auto* chat = app.add_subcommand("chat", "chat with the model through its chat template");
  chat->add_option("-m,--model", c.model, "snapshot directory or repo id in the HF cache")
      ->required();
  chat->add_option("--message", c.message, "one message, answered once (else interactive)");
  chat->add_option("--system", c.system, "a system message opening the conversation");
  chat->add_option("--max-new-tokens", c.max_new_tokens)->check(cli::non_negative());
  chat->add_option("--dtype", c.dtype)->check(CLI::IsMember({"float32", "bfloat16"}));
  chat->add_option("--mode", c.mode)->check(CLI::IsMember({"eager", "fused", "bf16dot", "int8"}));
  chat->add_option("--temperature", c.temperature)->check(cli::non_negative());
  chat->add_option("--top-k", c.top_k)->check(cli::non_negative());
  chat->add_option("--top-p", c.top_p)->check(CLI::Range(0.0, 1.0));
  chat->add_option("--seed", c.seed);
  chat->add_option("--threads", c.threads, "worker threads (0: all cores)");
  chat->add_flag("--stats", c.stats, "print prompt size and speed of each answer on stderr");
  cli::add_load_options(chat, c.gguf_file, c.quantize);

  return chat;
}

struct InspectArgs {
  std::string model, dtype = "float32", mode = "fused", gguf_file, quantize;
  int threads = 0;
};

// `hubzoo inspect`: its options into a.
CLI::App* add_inspect_command(CLI::App& app, InspectArgs& a) {
  auto* inspect = app.add_subcommand("inspect", "load a model and describe it");
  inspect->add_option("-m,--model", a.model)->required();
  inspect->add_option("--threads", a.threads);
  inspect->add_option("--dtype", a.dtype)->check(CLI::IsMember({"float32", "bfloat16"}));
  inspect->add_option("--mode", a.mode)
      ->check(CLI::IsMember({"eager", "fused", "bf16dot", "int8"}));
  cli::add_load_options(inspect, a.gguf_file, a.quantize);
  return inspect;
}

int main_impl(int argc, char** argv, std::chrono::steady_clock::time_point process_start) {
  CLI::App app{"hubzoo: Hugging Face Hub models in native C++, verified against transformers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(HUBZOO_VERSION) + " (" + HUBZOO_GIT_COMMIT + ")");

  GenerateArgs g;
  auto* gen = add_generate_command(app, g);

  std::string tok_model, tok_text, tok_format = "text", tok_gguf;
  auto* tokenize = app.add_subcommand("tokenize", "encode text with the model's tokenizer.json");
  tokenize->add_option("-m,--model", tok_model)->required();
  tokenize->add_option("--gguf-file", tok_gguf, "one .gguf file of the snapshot folder or repo");
  tokenize->add_option("--format", tok_format)->check(CLI::IsMember({"text", "json"}));
  tokenize->add_option("text", tok_text)->required();

  cli::ChatArgs c;
  auto* chat = add_chat_command(app, c);

  cli::EmbedArgs e;
  auto* embed = cli::add_embed_command(app, e);

  cli::RerankArgs rr;
  auto* rerank = cli::add_rerank_command(app, rr);

  cli::BenchArgs bench_args;
  auto* bench = cli::add_bench_command(app, bench_args);

  server::ServerOptions serve_options;
  auto* serve = cli::add_serve_command(app, serve_options);

  InspectArgs ia;
  auto* inspect = add_inspect_command(app, ia);

  cli::PullArgs pull_args;
  auto* pull = cli::add_pull_command(app, pull_args);
  cli::CacheArgs cache_args;
  auto* cache = cli::add_cache_command(app, cache_args);
  bool offline = false;
  for (CLI::App* cmd : {gen, tokenize, chat, embed, bench, serve, inspect}) {
    cli::add_offline_flag(cmd, offline);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (pull->parsed()) return cli::run_pull(pull_args);
  if (cache->parsed()) return cli::run_cache(cache_args);
  // Every -m command: download what the cache lacks first (unless --offline).
  if (serve->parsed()) {
    cli::ensure_model(serve_options.model, serve_options.gguf_file, offline, "hubzoo serve: ");
    cli::ensure_model(serve_options.embedding_model, "", offline, "hubzoo serve: ");
  }
  if (gen->parsed()) cli::ensure_model(g.model, g.gguf_file, offline);
  if (chat->parsed()) cli::ensure_model(c.model, c.gguf_file, offline);
  if (embed->parsed()) cli::ensure_model(e.model, "", offline);
  if (bench->parsed()) cli::ensure_model(bench_args.model, bench_args.gguf_file, offline);
  if (tokenize->parsed()) cli::ensure_model(tok_model, tok_gguf, offline);
  if (inspect->parsed()) cli::ensure_model(ia.model, ia.gguf_file, offline);
  if (gen->parsed()) {
    if (g.ids.empty() && g.prompt.empty()) throw InvalidArgument("give --ids or --prompt");
    return run_generate(g);
  }
  if (chat->parsed()) return cli::run_chat(c);
  if (embed->parsed()) return cli::run_embed(e);
  if (rerank->parsed()) return cli::run_rerank(rr);
  if (serve->parsed()) return cli::run_serve(serve_options);
  if (bench->parsed()) return cli::run_bench(bench_args, process_start);
  if (tokenize->parsed()) return run_tokenize(tok_model, tok_gguf, tok_text, tok_format);
  return run_inspect(ia.model,
                     cli::load_options(ia.threads, ia.dtype, ia.mode, ia.quantize, ia.gguf_file));
}

}  // namespace
}  // namespace hubzoo

int main(int argc, char** argv) {
  const auto process_start = std::chrono::steady_clock::now();
  try {
    return hubzoo::main_impl(argc, argv, process_start);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg) {
      if (c == '\n') c = ' ';
    }
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 1;
  }
}
