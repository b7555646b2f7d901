// `hubzoo serve`: the OpenAI-compatible server. SIGINT/SIGTERM are taken by
// one thread (sigwait) that stops the server cleanly: new requests are
// refused, running generations cancelled, the listener closed, then exit 0.
#include <pthread.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "server/server.h"

namespace hubzoo::cli {

CLI::App* add_serve_command(CLI::App& app, server::ServerOptions& o) {
  auto* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", o.model, "snapshot directory or repo id in the HF cache")
      ->required();
  cmd->add_option("--embedding-model", o.embedding_model, "also serve /v1/embeddings");
  cmd->add_option("--rerank-model", o.rerank_model,
                  "also serve /v1/rerank and /rerank (a cross-encoder or decoder reranker)");
  cmd->add_option("--served-model-name", o.served_model_name,
                  "model id in the API (default: the repo id or directory name)");
  cmd->add_option("--host", o.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "port (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY'")
      ->envname("HUBZOO_API_KEY");
  cmd->add_option("--max-concurrency", o.max_concurrency, "sequences generating at once (KV slots)")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--max-queue", o.max_queue, "requests waiting for a slot; beyond: 429")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o.max_body_bytes, "largest request body")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--max-context", o.max_context,
                  "tokens per request, prompt + completion (0: the model's maximum)")
      ->check(non_negative());
  cmd->add_option("--max-batch-tokens", o.max_batch_tokens, "prefill tokens per forward pass")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--kv-cache-bytes", o.kv_cache_bytes,
                  "KV-cache budget in bytes (0: every slot at the maximum context, at most half "
                  "the memory available)")
      ->check(non_negative());
  cmd->add_flag("--no-prefix-cache{false}", o.prefix_cache,
                "do not reuse the KV pages of earlier prompts' common prefixes");
  cmd->add_option("--dtype", o.dtype)->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--mode", o.mode)->check(CLI::IsMember({"eager", "fused", "bf16dot", "int8"}));
  cmd->add_option("--generation-config", o.generation_config,
                  "defaults for omitted sampling fields: auto (the model's "
                  "generation_config.json) or none (OpenAI's)")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  cmd->add_option("--tool-parser", o.tool_parser,
                  "tool-call format answers are parsed in: auto (from the chat template), "
                  "hermes (qwen, smollm3), llama3, mistral, gemma, or none")
      ->check(CLI::IsMember(
          {"auto", "hermes", "qwen", "smollm3", "llama3", "mistral", "gemma", "none"}))
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "worker threads (0: all cores)");
  add_load_options(cmd, o.gguf_file, o.quantize);
  cmd->add_flag("--metrics-public", o.metrics_public,
                "serve /metrics without the API key (for a scraper on a private network)");
  cmd->add_option("--max-connections", o.max_connections,
                  "open connections at once; more are answered 503")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--max-connections-per-ip", o.max_connections_per_ip,
                  "open connections from one client address; more are answered 503")
      ->check(positive())
      ->capture_default_str();
  cmd->add_flag_callback(
      "--quiet", [&o] { o.log_requests = false; }, "no line per request on stderr");
  return cmd;
}

int run_serve(const server::ServerOptions& o) {
  // Blocked before any thread starts, so every thread inherits the mask and
  // only the waiter below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a death
  // Idle connections cost a descriptor each: take the hard limit (the default
  // soft limit, often 1024, would cap connections far below --max-connections).
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }

  server::Server srv(o);
  const int port = srv.bind();
  std::fprintf(stderr, "hubzoo serve: %s\n", srv.describe().c_str());
  std::fprintf(stderr, "hubzoo serve: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> finished{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (finished) return;
    std::fprintf(stderr, "hubzoo serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    // Repeated: a stop() that lands before the listener runs would be lost.
    while (!finished) {
      srv.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  srv.run();
  finished = true;
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if no signal came
  waiter.join();
  std::fprintf(stderr, "hubzoo serve: stopped\n");
  return 0;
}

}  // namespace hubzoo::cli
