#include "server/server.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "engine/model_with_text.h"
#include "engine/seq2seq_causal.h"
#include "hubzoo_commit.h"  // generated at build time: HUBZOO_GIT_COMMIT
#include "server/server_impl.h"
#include "server/tool_grammar.h"

namespace hubzoo::server {
namespace {

// A served model's id: the repo id, or a directory's name.
std::string model_id_of(const std::string& ref) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(ref)) return ref;
  fs::path p = fs::path(ref).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// Metrics label for a path: known routes only, so clients cannot grow the label set.
std::string path_label(const std::string& path) {
  static const char* known[] = {"/",
                                "/v1/models",
                                "/v1/chat/completions",
                                "/v1/completions",
                                "/v1/embeddings",
                                "/v1/rerank",
                                "/rerank",
                                "/tokenize",
                                "/detokenize",
                                "/health",
                                "/metrics"};
  for (const char* k : known) {
    if (path == k) return path;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (is_web_path(path)) return path;
  return "other";
}

constexpr std::string_view kModelsPrefix = "/v1/models/";

// %XX escapes of a path segment decoded (a model id may hold '/'); others kept.
std::string percent_decode(std::string_view s) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

void send_json(net::Response& res, const Json& body, int status) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(net::Response& res, const ApiError& e) { send_json(res, error_body(e), e.status); }

Server::Impl::Impl(const ServerOptions& options) : opt(options) {
  if (opt.max_concurrency <= 0) throw InvalidArgument("--max-concurrency must be > 0");
  if (opt.max_queue < 0) throw InvalidArgument("--max-queue must be >= 0");
  if (opt.max_body_bytes <= 0) throw InvalidArgument("--max-body-bytes must be > 0");
  model_id = opt.served_model_name.empty() ? model_id_of(opt.model) : opt.served_model_name;
  ModelWithText loaded = load_model_with_text(opt.model, opt.gguf_file, [&] {
    return load_generation_lm(opt.model, LoadOptions::parse(opt.threads, opt.dtype, opt.mode,
                                                            opt.quantize, opt.gguf_file));
  });
  model = std::move(loaded.model);
  PretrainedText& text = loaded.text;
  const ModelInfo& info = model->info();
  tokenizer = std::make_unique<Tokenizer>(std::move(text.tokenizer));
  if (opt.generation_config == "auto") {
    // A GGUF file carries no generation defaults; a generation_config.json beside it may
    // belong to another model.
    if (info.gguf_file.empty())
      sampling_defaults = sampling_defaults_from(info.snapshot / "generation_config.json");
  } else if (opt.generation_config != "none") {
    throw InvalidArgument("--generation-config must be 'auto' or 'none', got '" +
                          opt.generation_config + "'");
  }
  chat_template = std::move(text.chat_template);
  if (text.chat_template_error) {
    try {
      std::rethrow_exception(text.chat_template_error);
    } catch (const Error& e) {
      chat_template_missing = e.what();
    }
  }
  setup_tool_format();
  SchedulerOptions so;
  so.max_slots = opt.max_concurrency;
  so.max_queue = opt.max_queue;
  so.max_context = opt.max_context;
  so.max_batch_tokens = opt.max_batch_tokens;
  so.kv_cache_bytes = opt.kv_cache_bytes;
  so.prefix_cache = opt.prefix_cache;
  scheduler = std::make_unique<Scheduler>(*model, tokenizer.get(), so);
  if (!opt.embedding_model.empty()) {
    embedder = Embedder::load(
        opt.embedding_model,
        {opt.threads, Numerics::parse(opt.dtype, opt.mode == "int8" ? "fused" : opt.mode)});
    embedding_id = model_id_of(opt.embedding_model);
  }
  if (!opt.rerank_model.empty()) {
    RerankerOptions ro;
    ro.num_threads = opt.threads;
    ro.numerics = Numerics::parse(opt.dtype, opt.mode == "int8" ? "fused" : opt.mode);
    reranker = Reranker::load(opt.rerank_model, ro);
    rerank_id = model_id_of(opt.rerank_model);
  }
  created = std::chrono::duration_cast<std::chrono::seconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  fingerprint = std::string("hubzoo-") + HUBZOO_VERSION + "-" + HUBZOO_GIT_COMMIT;
  rng.seed(std::random_device{}());
  install_routes();
}

void Server::Impl::setup_tool_format() {
  if (opt.tool_parser == "auto") {
    std::string sources;
    if (chat_template) {
      for (const auto& [name, src] : chat_template->sources()) sources += src;
    }
    tool_format = detect_tool_format(sources);
  } else if (auto f = tool_format_from_name(opt.tool_parser)) {
    tool_format = *f;
  } else {
    throw InvalidArgument("--tool-parser must be one of " + std::string(tool_format_names()) +
                          ", got '" + opt.tool_parser + "'");
  }
  // A marker decoding would skip as a special token (Mistral's [TOOL_CALLS]).
  const std::string begin = tool_call_syntax(tool_format).begin;
  if (const auto id = begin.empty() ? std::nullopt : tokenizer->token_to_id(begin)) {
    tool_markers_special = tokenizer->decode({*id}, true).empty();
  }
  if (tool_format == ToolFormat::kNone) return;
  // tool_choice required / a function: calls written under a grammar, in which
  // special-token markers stand for their text.
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
  if (tool_markers_special) {
    const ToolCallSyntax syntax = tool_call_syntax(tool_format);
    vocabulary = grammar::TokenVocabulary::from_tokenizer(*tokenizer, {syntax.begin, syntax.end});
  }
  tool_constraint = std::make_shared<GrammarToolCallConstraint>(std::move(vocabulary));
}

uint64_t Server::Impl::random_seed() {
  std::lock_guard lock(rng_mu);
  return rng();
}

std::string Server::Impl::new_id(const char* prefix) {
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  const uint64_t a = random_seed(), b = random_seed();
  for (int i = 0; i < 16; ++i) id += hex[(a >> (4 * i)) & 15];
  for (int i = 0; i < 8; ++i) id += hex[(b >> (4 * i)) & 15];
  return id;
}

std::string Server::Impl::token_text(int64_t id) const { return tokenizer->decode({id}, false); }

void Server::Impl::check_model(const std::string& requested, bool embedding) const {
  if (requested.empty()) return;
  const std::string& served = embedding ? embedding_id : model_id;
  if (requested == served) return;
  throw ApiError(404, "invalid_request_error",
                 "The model '" + requested + "' does not exist; this server serves '" + served +
                     "'" + (embedding ? " for embeddings." : "."),
                 "model", "model_not_found");
}

void Server::Impl::check_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                 const char* param) const {
  const int64_t limit = scheduler->options().max_context;
  const std::string head =
      "This model's maximum context length is " + std::to_string(limit) + " tokens. ";
  if (prompt_tokens >= limit) {
    throw ApiError(400, "invalid_request_error",
                   head + "However, your prompt is " + std::to_string(prompt_tokens) +
                       " tokens, which leaves no room for the completion.",
                   param, "context_length_exceeded");
  }
  if (max_tokens && prompt_tokens + *max_tokens > limit) {
    throw ApiError(400, "invalid_request_error",
                   head + "However, you requested " + std::to_string(prompt_tokens + *max_tokens) +
                       " tokens (" + std::to_string(prompt_tokens) + " in the prompt, " +
                       std::to_string(*max_tokens) +
                       " for the completion). Please reduce the prompt or max_tokens.",
                   "max_tokens", "context_length_exceeded");
  }
}

std::optional<net::Response> Server::Impl::authorize(const net::Request& req) const {
  if (opt.api_key.empty()) return std::nullopt;
  const std::string header = req.header_value("Authorization");
  const std::string scheme = "Bearer ";
  const std::string key = header.rfind(scheme, 0) == 0 ? header.substr(scheme.size()) : "";
  if (constant_time_equal(key, opt.api_key)) return std::nullopt;
  net::Response res;
  res.set_header("WWW-Authenticate", "Bearer");
  send_error(res, ApiError(401, "invalid_request_error",
                           header.empty() ? "Missing API key: send 'Authorization: Bearer <key>'."
                                          : "Incorrect API key provided.",
                           "", "invalid_api_key"));
  return res;
}

void Server::Impl::guarded(net::Response& res, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const QueueFull& e) {
    res.set_header("Retry-After", "1");
    send_error(res, ApiError(429, "rate_limit_error",
                             std::string("The server is at capacity: ") + e.what() + ".", "",
                             "queue_full"));
  } catch (const ShuttingDown& e) {
    send_error(res, ApiError(503, "server_error", e.what(), "", "shutting_down"));
  } catch (const ContextOverflow& e) {
    send_error(res,
               ApiError(400, "invalid_request_error", e.what(), "", "context_length_exceeded"));
  } catch (const Error& e) {  // InvalidArgument, template errors, ...: the request's fault
    send_error(res, bad_request(e.what()));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, "server_error", std::string("Internal error: ") + e.what()));
  }
}

void Server::Impl::handle_models(const net::Request& req, net::Response& res) {
  auto entry = [&](const std::string& id, int64_t max_len) {
    Json m = {{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "hubzoo"}};
    if (max_len > 0) m["max_model_len"] = max_len;
    return m;
  };
  Json data = Json::array({entry(model_id, scheduler->options().max_context)});
  if (embedder) data.push_back(entry(embedding_id, embedder->info().max_seq_length));
  if (reranker) data.push_back(entry(rerank_id, reranker->info().max_length));
  if (req.path.size() > kModelsPrefix.size()) {  // GET /v1/models/{id}
    const std::string id = percent_decode(req.path.substr(kModelsPrefix.size()));
    for (const auto& m : data) {
      if (m["id"] == id) return send_json(res, m);
    }
    throw ApiError(404, "invalid_request_error", "The model '" + id + "' does not exist.", "model",
                   "model_not_found");
  }
  send_json(res, Json{{"object", "list"}, {"data", data}});
}

void Server::Impl::handle_tokenize(const net::Request& req, net::Response& res) {
  const Json body = parse_body(req.body);
  check_model(get_string(body, "model").value_or(""));
  std::vector<int64_t> ids;
  std::vector<std::string> strs;
  if (body.contains("messages")) {
    ids = chat_prompt(body, get_bool(body, "add_generation_prompt").value_or(true));
  } else {
    const auto prompt = get_string(body, "prompt");
    if (!prompt) throw bad_request("Give 'prompt' (a string) or 'messages'.", "prompt");
    const Encoding e =
        tokenizer->encode(*prompt, get_bool(body, "add_special_tokens").value_or(true));
    ids = e.ids;
    strs = e.tokens;
  }
  Json out = {
      {"count", ids.size()}, {"max_model_len", scheduler->options().max_context}, {"tokens", ids}};
  if (get_bool(body, "return_token_strs").value_or(false)) {
    if (strs.empty()) {
      for (int64_t id : ids) strs.push_back(tokenizer->id_to_token(id).value_or(""));
    }
    out["token_strs"] = strs;
  }
  send_json(res, out);
}

void Server::Impl::handle_detokenize(const net::Request& req, net::Response& res) {
  const Json body = parse_body(req.body);
  check_model(get_string(body, "model").value_or(""));
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) {
    throw bad_request("'tokens' must be an array of token ids.", "tokens");
  }
  std::vector<int64_t> ids;
  const int64_t vocab = static_cast<int64_t>(tokenizer->vocab_size());
  for (const auto& t : *it) {
    if (!t.is_number_integer())
      throw bad_request("'tokens' must be an array of token ids.", "tokens");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab) {
      throw bad_request("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ").",
                        "tokens");
    }
    ids.push_back(id);
  }
  send_json(res, Json{{"prompt", tokenizer->decode(ids, false)}});
}

std::vector<net::Route> Server::Impl::routes() {
  using net::Request;
  using net::Response;
  auto route = [this](const char* method, std::string path,
                      void (Impl::*fn)(const Request&, Response&)) {
    net::Route r;
    r.method = method;
    r.path = std::move(path);
    r.handler = [this, fn](const Request& req, Response& res) {
      guarded(res, [&] { (this->*fn)(req, res); });
    };
    return r;
  };
  std::vector<net::Route> routes = {
      route("POST", "/v1/chat/completions", &Impl::handle_chat),
      route("POST", "/v1/completions", &Impl::handle_completions),
      route("POST", "/v1/embeddings", &Impl::handle_embeddings),
      route("POST", "/v1/rerank", &Impl::handle_rerank),
      route("POST", "/rerank", &Impl::handle_tei_rerank),
      route("POST", "/tokenize", &Impl::handle_tokenize),
      route("POST", "/detokenize", &Impl::handle_detokenize),
      route("GET", "/v1/models", &Impl::handle_models),
  };
  routes.push_back(route("GET", std::string(kModelsPrefix), &Impl::handle_models));
  routes.back().prefix = true;
  // Cheap routes, answered by the reactor itself: they answer under floods
  // and while every worker generates.
  auto cheap = [](const char* path, bool auth, net::Handler handler) {
    net::Route r;
    r.method = "GET";
    r.path = path;
    r.auth = auth;
    r.inline_ = true;
    r.handler = std::move(handler);
    return r;
  };
  routes.push_back(cheap("/health", false, [this](const Request&, Response& res) {
    const bool down = stopping.load();
    send_json(res, Json{{"status", down ? "shutting down" : "ok"}}, down ? 503 : 200);
  }));
  // Usage statistics: behind the key unless --metrics-public.
  routes.push_back(cheap("/metrics", !opt.metrics_public, [this](const Request&, Response& res) {
    res.set_content(metrics.render(scheduler->stats(), model_id),
                    "text/plain; version=0.0.4; charset=utf-8");
  }));
  add_web_routes(routes);
  return routes;
}

void Server::Impl::install_routes() {
  using net::Request;
  using net::Response;
  net::Hooks hooks;
  hooks.authorize = [this](const Request& req) { return authorize(req); };
  // Errors the HTTP layer answers itself (no route, body too large, ...) get OpenAI's shape.
  hooks.error = [](int status, const std::string& message) {
    Response res;
    send_error(res,
               ApiError(status, status >= 500 ? "server_error" : "invalid_request_error", message));
    return res;
  };
  hooks.on_response = [this](const Request& req, int status) {
    metrics.count_response(path_label(req.path), status);
    if (opt.log_requests) {
      std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), status);
    }
  };
  net::HttpOptions h;
  h.host = opt.host;
  h.port = opt.port;
  // A generating request holds its worker (it waits for tokens): one per
  // slot and queue place, and some for the short endpoints.
  h.workers = static_cast<int>(opt.max_concurrency + opt.max_queue + 16);
  h.max_queued = static_cast<size_t>(opt.max_queue + 16);
  h.max_connections = opt.max_connections;
  h.max_connections_per_ip = opt.max_connections_per_ip;
  h.limits.max_body = static_cast<uint64_t>(opt.max_body_bytes);
  h.max_body_memory = std::max<uint64_t>(h.max_body_memory, 4 * h.limits.max_body);
  http = std::make_unique<net::HttpServer>(h, routes(), std::move(hooks));
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>(options)) {}

Server::~Server() { stop(); }

int Server::bind() { return impl_->http->bind(); }

std::string Server::describe() const {
  const Impl& s = *impl_;
  const SchedulerStats st = s.scheduler->stats();
  const ModelInfo& info = s.model->info();
  char line[512];
  std::snprintf(line, sizeof(line),
                "%s (%s %s), %lld slots x %lld tokens, KV cache up to %.1f MiB, queue %lld%s%s",
                s.model_id.c_str(), info.numerics.dtype_name(), info.numerics.mode_name(),
                static_cast<long long>(st.max_slots), static_cast<long long>(st.max_context),
                st.kv_budget_bytes / 1048576.0, static_cast<long long>(st.max_queue),
                s.embedder ? ", embeddings: " : "", s.embedding_id.c_str());
  const SamplingDefaults& d = s.sampling_defaults;
  char defaults[256];
  std::snprintf(defaults, sizeof(defaults),
                "; sampling defaults: temperature %g, top_p %g, top_k %lld, min_p %g, "
                "repetition_penalty %g",
                d.temperature, d.top_p, static_cast<long long>(d.top_k), d.min_p,
                d.repetition_penalty);
  std::string not_loaded;  // a multimodal checkpoint's towers: text only
  for (const auto& [prefix, reason] : info.ignored_modules)
    not_loaded += "; not loaded: " + prefix + "*";
  const std::string tools = std::string("; tool calls: ") + tool_format_name(s.tool_format);
  return std::string(line) + defaults + tools + not_loaded;
}

void Server::run() {
  if (impl_->stopping) return;
  impl_->http->run();
}

void Server::stop() {
  Impl& s = *impl_;
  s.stopping = true;
  s.scheduler->shutdown();  // streams end with their last event: generations are cancelled
  s.http->stop();           // lets in-flight responses finish, then closes
}

}  // namespace hubzoo::server
