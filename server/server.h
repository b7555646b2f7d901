// `hubzoo serve`: an OpenAI-compatible HTTP API over the continuous-batching
// scheduler, with a web chat page. Thin: requests become GenerationRequests,
// scheduler events become JSON or server-sent events.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace hubzoo::server {

struct ServerOptions {
  std::string model;              // snapshot directory or repo id
  std::string embedding_model;    // optional: enables /v1/embeddings
  std::string rerank_model;       // optional: enables /v1/rerank and /rerank
  std::string served_model_name;  // empty: the repo id, or the directory's name
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port
  std::string api_key;          // empty: no authentication
  int64_t max_concurrency = 8;  // KV-cache slots
  int64_t max_queue = 64;       // requests waiting for a slot; more get 429
  int64_t max_body_bytes = 8 << 20;
  int64_t max_context = 0;         // tokens per request (prompt + new); 0: the model's
  int64_t max_batch_tokens = 256;  // prefill tokens per forward pass
  int64_t kv_cache_bytes = 0;      // KV-cache budget; 0: from the memory available
  bool prefix_cache = true;        // reuse earlier prompts' KV pages (--no-prefix-cache: off)
  std::string dtype = "float32", mode = "fused";
  std::string gguf_file;  // one .gguf of the model's folder (--gguf-file)
  std::string quantize;   // quantize on load: "q8_0", "q4_0", "q4_k", ... (empty: no)
  // Defaults for the sampling fields a request omits: "auto" reads the model's
  // generation_config.json, "none" uses OpenAI's.
  std::string generation_config = "auto";
  // Tool-call format answers are parsed in: "auto" (detected from the chat
  // template), hermes (qwen, smollm3), llama3, mistral, gemma, or none.
  std::string tool_parser = "auto";
  int threads = 0;              // model threads; 0: all cores
  bool log_requests = true;     // one line per request on stderr
  bool metrics_public = false;  // /metrics without the API key (a scraper on a private network)
  int max_connections = 4096;   // open at once; more are answered 503
  int max_connections_per_ip = 1024;
};

class Server {
 public:
  // Loads the model(s); throws hubzoo::Error naming what failed.
  explicit Server(const ServerOptions& options);
  ~Server();
  // Binds host:port; returns the port (the one chosen when port was 0).
  // Throws hubzoo::Error when the address cannot be bound.
  int bind();
  // One line on what is served: model, dtype, slots, context, KV budget.
  std::string describe() const;
  // Serves until stop(); returns after in-flight requests ended.
  void run();
  // Thread-safe: refuses new work, cancels running generations, stops listening.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hubzoo::server
