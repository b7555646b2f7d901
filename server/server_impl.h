// What the server's source files share: the loaded models, the scheduler,
// the HTTP server (net/) and the handlers (server.cc: routing, auth, errors
// and the small endpoints; generation.cc: chat and text completions;
// embeddings.cc; rerank.cc).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "engine/embedder.h"
#include "engine/reranker.h"
#include "engine/scheduler.h"
#include "models/causal_lm.h"
#include "net/http_server.h"
#include "server/metrics.h"
#include "server/openai_json.h"
#include "server/server.h"
#include "server/tool_parser.h"
#include "server/tools.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo::server {

struct Server::Impl {
  explicit Impl(const ServerOptions& options);

  ServerOptions opt;
  std::string model_id, embedding_id;
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::string chat_template_missing;  // why there is none
  SamplingDefaults sampling_defaults;
  // Tool calls: the format answers are parsed in (--tool-parser, or detected
  // from the chat template), whether its opening marker is a special token
  // that decoding would skip, and the sampling constraint for tool_choice
  // required / a named function (server/tool_grammar.h).
  ToolFormat tool_format = ToolFormat::kNone;
  bool tool_markers_special = false;
  std::shared_ptr<const ToolCallConstraint> tool_constraint;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Embedder> embedder;
  std::mutex embed_mu;  // one encode() at a time
  std::unique_ptr<Reranker> reranker;
  std::string rerank_id;
  std::mutex rerank_mu;  // one score() at a time
  Metrics metrics;
  std::unique_ptr<net::HttpServer> http;
  std::atomic<bool> stopping{false};
  int64_t created = 0;  // unix time the server started
  std::string fingerprint;
  std::mutex rng_mu;
  std::mt19937_64 rng;

  // The HTTP server with its routes; authentication is checked on the
  // request's head, before the body is read.
  void install_routes();
  std::vector<net::Route> routes();
  // 401 unless the request carries the API key (when one is set).
  std::optional<net::Response> authorize(const net::Request& req) const;
  // Runs a handler; every error becomes an OpenAI error object with its status.
  void guarded(net::Response& res, const std::function<void()>& fn);

  // 404 model_not_found unless `requested` is empty or a served model.
  void check_model(const std::string& requested, bool embedding = false) const;
  // 400 context_length_exceeded when the prompt (plus max_tokens) exceeds the context.
  void check_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                     const char* param) const;
  std::string token_text(int64_t id) const;
  uint64_t random_seed();
  // tool_format and tool_markers_special from --tool-parser and the chat template.
  void setup_tool_format();
  std::string new_id(const char* prefix);

  void handle_chat(const net::Request& req, net::Response& res);
  void handle_completions(const net::Request& req, net::Response& res);
  void handle_embeddings(const net::Request& req, net::Response& res);
  // rerank.cc: /v1/rerank (Cohere/Jina shape) and /rerank (TEI shape).
  void handle_rerank(const net::Request& req, net::Response& res);
  void handle_tei_rerank(const net::Request& req, net::Response& res);
  void handle_tokenize(const net::Request& req, net::Response& res);
  void handle_detokenize(const net::Request& req, net::Response& res);
  void handle_models(const net::Request& req, net::Response& res);

  // Renders a chat request's messages through the chat template.
  std::vector<int64_t> chat_prompt(const Json& body, bool add_generation_prompt);
};

void send_json(net::Response& res, const Json& body, int status = 200);
void send_error(net::Response& res, const ApiError& e);

// The web chat page and its libraries, one route per embedded file (web_page.cc).
void add_web_routes(std::vector<net::Route>& routes);
// Whether `path` is one of them (a bounded set: a metrics label of its own).
bool is_web_path(const std::string& path);

}  // namespace hubzoo::server
