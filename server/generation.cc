// POST /v1/chat/completions and /v1/completions: the request becomes one
// scheduler request per prompt; the answer is one JSON object, or (stream)
// server-sent events as tokens arrive, ending in `data: [DONE]`.
#include <chrono>

#include "server/channel.h"
#include "server/server_impl.h"
#include "server/structured_output.h"
#include "server/tool_parser.h"
#include "server/tools.h"

namespace hubzoo::server {
namespace {

enum class Kind { kChat, kText };

// One prompt's generation as the HTTP thread follows it.
struct Job {
  std::shared_ptr<Channel> channel = std::make_shared<Channel>();
  uint64_t id = 0;
  std::vector<TokenEvent> events;
  bool finished = false;
};

// Everything a response needs besides the events.
struct ResponseContext {
  Kind kind = Kind::kChat;
  std::string id = {}, model = {}, fingerprint = {};
  int64_t created = 0;
  bool logprobs = false, return_token_ids = false, include_usage = false;
  ToolFormat tools = ToolFormat::kNone;      // kNone: the answer is not parsed for tool calls
  bool parallel_tool_calls = true;           // false: the first call only
  std::vector<std::string> tool_names = {};  // the request's tools
};

// "tool_calls" when the answer ended by itself with calls in it.
const char* chat_finish_reason(const Completion& c, bool has_calls) {
  return has_calls && c.reason == FinishReason::kStop ? "tool_calls" : finish_reason_name(c.reason);
}

// A whole answer split into content and calls.
ToolParseDelta parse_answer(const ResponseContext& rc, const std::string& text) {
  ToolCallParser parser(rc.tools, rc.tool_names);
  ToolParseDelta out = parser.feed(text);
  ToolParseDelta rest = parser.finish();
  out.content += rest.content;
  for (auto& c : rest.calls) out.calls.push_back(std::move(c));
  if (!rc.parallel_tool_calls && out.calls.size() > 1) out.calls.resize(1);
  return out;
}

Json envelope(const ResponseContext& rc, bool chunk) {
  const char* object = rc.kind == Kind::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return Json{{"id", rc.id},
              {"object", object},
              {"created", rc.created},
              {"model", rc.model},
              {"system_fingerprint", rc.fingerprint}};
}

// The error a completion that did not finish normally is answered with.
std::optional<ApiError> completion_error(const Completion& c) {
  if (c.reason == FinishReason::kCancelled) {
    return ApiError(503, "server_error", "The request was cancelled: the server is shutting down.",
                    "", "shutting_down");
  }
  if (c.reason == FinishReason::kError) {
    return ApiError(500, "server_error", "Generation failed: " + c.error);
  }
  return std::nullopt;
}

std::vector<LogprobEntry> logprob_entries(const std::vector<TokenEvent>& events) {
  std::vector<LogprobEntry> out;
  for (const auto& e : events) {
    if (e.has_logprobs && !e.end_token) out.push_back({e.token, e.logprobs});
  }
  return out;
}

// OpenAI's usage, with prompt_tokens_details.cached_tokens: prompt tokens
// whose keys and values came from the prefix cache.
Json usage_with_cache(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  Json u = usage_json(prompt_tokens, completion_tokens);
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

// The logprobs object of a choice, in the kind's format; `offset0` is where
// the events' text starts in the completion.
Json logprobs_json(Server::Impl& s, Kind kind, const std::vector<TokenEvent>& events,
                   int64_t offset0) {
  auto text_of = [&](int64_t id) { return s.token_text(id); };
  if (kind == Kind::kChat) return chat_logprobs(logprob_entries(events), text_of);
  std::vector<int64_t> offsets;
  int64_t at = offset0;
  for (const auto& e : events) {
    if (e.has_logprobs && !e.end_token) offsets.push_back(at);
    at += static_cast<int64_t>(e.text.size());
  }
  return completion_logprobs(logprob_entries(events), offsets, text_of);
}

Json token_ids(const std::vector<TokenEvent>& events) {
  Json ids = Json::array();
  for (const auto& e : events) ids.push_back(e.token);
  return ids;
}

// Queues every prompt or none (Scheduler::submit_all), so a request's prompts
// are admitted together rather than as their submissions race the engine.
std::vector<std::shared_ptr<Job>> submit_all(Scheduler& scheduler, const GenerationParams& g,
                                             const std::vector<std::vector<int64_t>>& prompts) {
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<GenerationRequest> requests;
  for (const auto& p : prompts) {
    auto job = std::make_shared<Job>();
    GenerationRequest r = g.request;
    r.prompt = p;
    Channel::attach(job->channel, r);
    requests.push_back(std::move(r));
    jobs.push_back(std::move(job));
  }
  const std::vector<uint64_t> ids = scheduler.submit_all(std::move(requests));
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i]->id = ids[i];
  return jobs;
}

void respond_whole(Server::Impl& s, const ResponseContext& rc,
                   std::vector<std::shared_ptr<Job>>& jobs, net::Response& res) {
  Json choices = Json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = *jobs[i];
    const Completion c = job.channel->wait_done(job.events);
    s.metrics.observe_completion(c);
    if (auto err = completion_error(c)) throw *err;
    prompt_tokens += c.prompt_tokens;
    completion_tokens += c.completion_tokens;
    cached_tokens += c.cached_tokens;
    Json choice = {{"index", i}};
    const char* finish = finish_reason_name(c.reason);
    if (rc.kind == Kind::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (rc.tools != ToolFormat::kNone) {
        const ToolParseDelta answer = parse_answer(rc, c.text);
        if (!answer.calls.empty()) {
          Json& message = choice["message"];
          message["content"] = answer.content.empty() ? Json(nullptr) : Json(answer.content);
          message["tool_calls"] =
              tool_calls_json(answer.calls, [&] { return tool_call_id(rc.tools, s.new_id("")); });
          finish = chat_finish_reason(c, true);
        }
      }
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = rc.logprobs ? logprobs_json(s, rc.kind, job.events, 0) : Json(nullptr);
    choice["finish_reason"] = finish;
    if (!c.stop_string.empty()) choice["stop_reason"] = c.stop_string;
    if (rc.return_token_ids) choice["token_ids"] = c.tokens;
    choices.push_back(choice);
  }
  Json out = envelope(rc, false);
  out["choices"] = choices;
  out["usage"] = usage_with_cache(prompt_tokens, completion_tokens, cached_tokens);
  send_json(res, out);
}

// State of one server-sent-event stream, owned by the response's producer.
// Whatever ends it, a stream that did not finish was dropped by the client
// (or the server stopped), so its generation is cancelled and its slot returns.
struct Stream {
  using Clock = std::chrono::steady_clock;
  explicit Stream(Server::Impl& server) : s(server) {}
  ~Stream() {
    if (done) return;
    s.scheduler->cancel(job->id);
    if (!s.stopping) s.metrics.count_disconnect();
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Server::Impl& s;
  ResponseContext rc;
  std::shared_ptr<Job> job;
  bool started = false, done = false;
  int64_t text_offset = 0;
  std::optional<ToolCallParser> tool_parser;  // chat with tools parsed
  size_t calls_sent = 0;
  Clock::time_point last_write = Clock::now();
};

// The SSE text for what arrived since the last call.
std::string stream_events(Server::Impl& s, Stream& st, std::vector<TokenEvent>& events,
                          const std::optional<Completion>& done) {
  const ResponseContext& rc = st.rc;
  auto chunk = [&](Json choice) {
    Json j = envelope(rc, true);
    j["choices"] = Json::array({std::move(choice)});
    if (rc.include_usage) j["usage"] = nullptr;
    return sse(j);
  };
  // Each call as two chunks (OpenAI's shape); parallel_tool_calls false: the first only.
  auto call_chunks = [&](const std::vector<ParsedToolCall>& calls) {
    std::string text;
    for (const auto& call : calls) {
      if (!rc.parallel_tool_calls && st.calls_sent > 0) break;
      const std::string id = tool_call_id(rc.tools, s.new_id(""));
      for (Json& delta : tool_call_deltas(call, st.calls_sent, id)) {
        text += chunk(Json{{"index", 0},
                           {"delta", std::move(delta)},
                           {"logprobs", nullptr},
                           {"finish_reason", nullptr}});
      }
      ++st.calls_sent;
    }
    return text;
  };
  std::string out;
  if (!st.started && rc.kind == Kind::kChat) {
    out += chunk(Json{{"index", 0},
                      {"delta", {{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  }
  st.started = true;
  for (const auto& e : events) {
    const bool with_logprobs = rc.logprobs && e.has_logprobs && !e.end_token;
    ToolParseDelta parsed;
    if (st.tool_parser) {
      parsed = st.tool_parser->feed(e.text);
    } else {
      parsed.content = e.text;
    }
    const std::string calls = call_chunks(parsed.calls);
    if (parsed.content.empty() && !with_logprobs && !rc.return_token_ids) {
      out += calls;
      continue;
    }
    const std::vector<TokenEvent> one = {e};
    Json choice = {{"index", 0}};
    if (rc.kind == Kind::kChat) {
      choice["delta"] = {{"content", parsed.content}};
    } else {
      choice["text"] = e.text;
    }
    choice["logprobs"] = with_logprobs ? logprobs_json(s, rc.kind, one, st.text_offset) : Json();
    choice["finish_reason"] = nullptr;
    if (rc.return_token_ids) choice["token_ids"] = token_ids(one);
    st.text_offset += static_cast<int64_t>(e.text.size());
    out += chunk(choice);
    out += calls;
  }
  if (done && st.tool_parser) {  // what the parser held back
    ToolParseDelta rest = st.tool_parser->finish();
    if (!rest.content.empty()) {
      out += chunk(Json{{"index", 0},
                        {"delta", {{"content", rest.content}}},
                        {"logprobs", nullptr},
                        {"finish_reason", nullptr}});
    }
    out += call_chunks(rest.calls);
  }
  if (done) {
    s.metrics.observe_completion(*done);
    if (auto err = completion_error(*done)) {
      out += sse(error_body(*err));
    } else {
      Json choice = {{"index", 0}};
      if (rc.kind == Kind::kChat) {
        choice["delta"] = Json::object();
      } else {
        choice["text"] = "";
      }
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = chat_finish_reason(*done, st.calls_sent > 0);
      if (!done->stop_string.empty()) choice["stop_reason"] = done->stop_string;
      Json j = envelope(rc, true);
      j["choices"] = Json::array({choice});
      const Json usage =
          usage_with_cache(done->prompt_tokens, done->completion_tokens, done->cached_tokens);
      // Without stream_options.include_usage the last chunk carries it (as
      // llama.cpp's server does); with it, OpenAI's extra chunk.
      j["usage"] = rc.include_usage ? Json(nullptr) : usage;
      out += sse(j);
      if (rc.include_usage) {
        Json u = envelope(rc, true);
        u["choices"] = Json::array();
        u["usage"] = usage;
        out += sse(u);
      }
    }
    out += "data: [DONE]\n\n";
  }
  return out;
}

void respond_stream(Server::Impl& s, const ResponseContext& rc, std::shared_ptr<Job> job,
                    net::Response& res) {
  auto st = std::make_shared<Stream>(s);
  st->rc = rc;
  if (rc.tools != ToolFormat::kNone) st->tool_parser.emplace(rc.tools, rc.tool_names);
  st->job = std::move(job);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.content_type = "text/event-stream";
  // Runs on the request's worker; writes until the generation finished or a
  // write failed (the client left, or the server stopped).
  res.stream = [&s, st](net::StreamWriter& sink) {
    while (!st->done) {
      std::vector<TokenEvent> events;
      std::optional<Completion> done;
      // The first round answers at once (the role chunk).
      if (st->started) done = st->job->channel->wait(events, std::chrono::milliseconds(500));
      std::string out = stream_events(s, *st, events, done);
      const auto now = Stream::Clock::now();
      // A comment now and then while nothing comes (queued, long prefill):
      // writing is how a closed connection shows.
      if (out.empty() && now - st->last_write > std::chrono::seconds(1)) out = ": ping\n\n";
      if (!out.empty()) {
        if (!sink.write(out)) return;
        st->last_write = now;
      }
      if (done) st->done = true;
    }
  };
}

void respond(Server::Impl& s, ResponseContext rc, const GenerationParams& g,
             const std::vector<std::vector<int64_t>>& prompts, net::Response& res) {
  rc.id = s.new_id(rc.kind == Kind::kChat ? "chatcmpl-" : "cmpl-");
  rc.model = s.model_id;
  rc.fingerprint = s.fingerprint;
  rc.return_token_ids = g.return_token_ids;
  rc.include_usage = g.include_usage;
  rc.created = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  auto jobs = submit_all(*s.scheduler, g, prompts);
  if (g.stream) {
    respond_stream(s, rc, jobs[0], res);
    return;
  }
  try {
    respond_whole(s, rc, jobs, res);
  } catch (...) {
    for (const auto& j : jobs) s.scheduler->cancel(j->id);
    throw;
  }
}

}  // namespace

std::vector<int64_t> Server::Impl::chat_prompt(const Json& body, bool add_generation_prompt) {
  if (!chat_template) {
    throw bad_request("This model has no chat template (" + chat_template_missing +
                      "); use /v1/completions.");
  }
  check_chat_request(body);
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    throw bad_request("'messages' must be a non-empty array of messages.", "messages");
  }
  const ToolRequest tools = parse_tool_request(body);
  Json messages = Json::array();
  for (const auto& m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      throw bad_request("Each message must be an object with a string 'role'.", "messages");
    }
    Json msg = prepare_tool_message(m, messages.size());
    auto content = m.find("content");
    if (content != m.end() && content->is_array()) {
      // Text parts joined by newlines; other kinds of content are not supported.
      std::string text;
      for (const auto& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          throw bad_request("Only text content parts are supported.", "messages");
        }
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else if (content != m.end() && !content->is_string() && !content->is_null()) {
      throw bad_request("A message's 'content' must be a string or an array of parts.", "messages");
    }
    messages.push_back(msg);
  }
  ChatTemplateOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.tools = tools.tools;
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) {
      throw bad_request("'chat_template_kwargs' must be an object.", "chat_template_kwargs");
    }
    options.extra_kwargs = *kw;
  }
  const std::string prompt = chat_template->render(messages, options);
  if (options.tools.is_array() && !options.tools.empty()) {
    // A template that never reads `tools` would drop them silently.
    ChatTemplateOptions without = options;
    without.tools = Json();
    if (chat_template->render(messages, without) == prompt) {
      throw bad_request(
          "This model's chat template does not render 'tools', so the model would never see "
          "them; describe the tools in a message instead.",
          "tools");
    }
  }
  return tokenizer->encode(prompt, /*add_special_tokens=*/false).ids;
}

namespace {
// How the answer is read for tool calls, and what tool_choice asks of it.
void setup_tool_calls(const Server::Impl& s, const ToolRequest& tools, ResponseContext& rc,
                      GenerationRequest& request) {
  if (!tools.parse_calls()) return;
  const bool forced = tools.choice.mode == ToolChoice::Mode::kRequired ||
                      tools.choice.mode == ToolChoice::Mode::kFunction;
  if (s.tool_format == ToolFormat::kNone) {
    if (!forced) return;  // 'auto': the answer is content, as the model has no call format
    throw bad_request(
        "'tool_choice' asks for a tool call, but this model's chat template implies no tool-call "
        "format; serve it with --tool-parser (" +
            std::string(tool_format_names()) + ").",
        "tool_choice");
  }
  rc.tools = s.tool_format;
  rc.parallel_tool_calls = tools.parallel_tool_calls;
  for (const auto& t : tools.tools)
    rc.tool_names.push_back(t["function"]["name"].get<std::string>());
  // The format's markers must reach the parser even where they are special tokens.
  if (s.tool_markers_special) request.skip_special_tokens = false;
  if (forced && s.tool_constraint) {
    s.tool_constraint->apply(tool_call_requirement(tools, s.tool_format), request);
  }
}
}  // namespace

void Server::Impl::handle_chat(const net::Request& req, net::Response& res) {
  const Json body = parse_body(req.body);
  GenerationParams g =
      parse_generation_params(body, model->info().vocab_size, random_seed(), sampling_defaults);
  check_model(g.model);
  ResponseContext rc{Kind::kChat};
  rc.logprobs = get_bool(body, "logprobs").value_or(false);
  const auto top = get_int(body, "top_logprobs");
  if (top && (*top < 0 || *top > 20)) {
    throw bad_request("'top_logprobs' must be in [0, 20].", "top_logprobs");
  }
  if (top && !rc.logprobs) {
    throw bad_request("'top_logprobs' needs 'logprobs' set to true.", "top_logprobs");
  }
  g.request.top_logprobs = rc.logprobs ? top.value_or(0) : -1;
  g.request.grammar = structured_output(body);
  setup_tool_calls(*this, parse_tool_request(body), rc, g.request);
  const std::vector<int64_t> prompt = chat_prompt(body, true);
  const int64_t n = static_cast<int64_t>(prompt.size());
  check_context(n, g.max_tokens, "messages");
  g.request.max_tokens = g.max_tokens.value_or(scheduler->options().max_context - n);
  respond(*this, rc, g, {prompt}, res);
}

void Server::Impl::handle_completions(const net::Request& req, net::Response& res) {
  const Json body = parse_body(req.body);
  GenerationParams g =
      parse_generation_params(body, model->info().vocab_size, random_seed(), sampling_defaults);
  check_model(g.model);
  ResponseContext rc{Kind::kText};
  if (const auto lp = get_int(body, "logprobs")) {
    if (*lp < 0 || *lp > 20) throw bad_request("'logprobs' must be in [0, 20].", "logprobs");
    rc.logprobs = true;
    g.request.top_logprobs = *lp;
  }
  if (get_bool(body, "echo").value_or(false)) {
    throw bad_request("'echo' is not supported.", "echo");
  }
  if (get_string(body, "suffix")) throw bad_request("'suffix' is not supported.", "suffix");
  if (const auto best_of = get_int(body, "best_of"); best_of && *best_of != 1) {
    throw bad_request("'best_of' must be 1.", "best_of");
  }
  check_completion_prompt(body, model->info().vocab_size);
  g.request.grammar = structured_output(body);
  // prompt: a string, an array of strings, an array of ids, or an array of arrays of ids.
  std::vector<std::vector<int64_t>> prompts;
  auto it = body.find("prompt");
  const char* shape = "'prompt' must be a string, an array of strings, or token ids.";
  if (it == body.end() || it->is_null()) throw bad_request("'prompt' is required.", "prompt");
  auto encode = [&](const Json& text) { return tokenizer->encode(text.get<std::string>()).ids; };
  auto ids_of = [&](const Json& arr) {
    std::vector<int64_t> ids;
    for (const auto& t : arr) {
      if (!t.is_number_integer()) throw bad_request(shape, "prompt");
      ids.push_back(t.get<int64_t>());
    }
    return ids;
  };
  if (it->is_string()) {
    prompts.push_back(encode(*it));
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    prompts.push_back(ids_of(*it));
  } else if (it->is_array() && !it->empty()) {
    for (const auto& p : *it) {
      if (p.is_string()) {
        prompts.push_back(encode(p));
      } else if (p.is_array()) {
        prompts.push_back(ids_of(p));
      } else {
        throw bad_request(shape, "prompt");
      }
    }
  } else {
    throw bad_request(shape, "prompt");
  }
  if (prompts.size() > 64) throw bad_request("At most 64 prompts per request.", "prompt");
  if (g.stream && prompts.size() != 1) {
    throw bad_request("Streaming takes one prompt per request.", "prompt");
  }
  for (const auto& p : prompts) {
    if (p.empty()) throw bad_request("A prompt encodes to no tokens.", "prompt");
    check_context(static_cast<int64_t>(p.size()), g.max_tokens, "prompt");
  }
  // OpenAI's legacy default is 16 new tokens; the context caps it.
  g.request.max_tokens = g.max_tokens.value_or(16);
  respond(*this, rc, g, prompts, res);
}

}  // namespace hubzoo::server
