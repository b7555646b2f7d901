#include "server/openai_json.h"

#include <cmath>

#include "base/error.h"
#include "io/json.h"

namespace hubzoo::server {

ApiError bad_request(const std::string& message, const std::string& param,
                     const std::string& code) {
  return ApiError(400, "invalid_request_error", message, param, code);
}

Json error_body(const ApiError& e) {
  Json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return Json{{"error", err}};
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }

Json parse_body(const std::string& body) {
  Json j;
  try {
    j = parse_ordered_json(body, "request body", kRequestJsonLimits);
  } catch (const FormatError& e) {
    throw bad_request(std::string("We could not parse the JSON body of your request: ") + e.what());
  }
  if (!j.is_object()) throw bad_request("The request body must be a JSON object.");
  return j;
}

namespace {
const Json* field(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}
ApiError wrong_type(const char* key, const char* what) {
  return bad_request(std::string("'") + key + "' must be " + what + ".", key);
}
}  // namespace

std::optional<bool> get_bool(const Json& body, const char* key) {
  const Json* f = field(body, key);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) throw wrong_type(key, "a boolean");
  return f->get<bool>();
}

std::optional<int64_t> get_int(const Json& body, const char* key) {
  const Json* f = field(body, key);
  if (!f) return std::nullopt;
  if (!f->is_number_integer()) throw wrong_type(key, "an integer");
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    throw wrong_type(key, "an integer that fits in 64 bits");
  }
  return f->get<int64_t>();
}

std::optional<double> get_number(const Json& body, const char* key) {
  const Json* f = field(body, key);
  if (!f) return std::nullopt;
  if (!f->is_number()) throw wrong_type(key, "a number");
  return f->get<double>();
}

std::optional<std::string> get_string(const Json& body, const char* key) {
  const Json* f = field(body, key);
  if (!f) return std::nullopt;
  if (!f->is_string()) throw wrong_type(key, "a string");
  return f->get<std::string>();
}

namespace {
// "[lo, hi]" or "(lo, hi]".
std::string range_text(double lo, double hi, bool lo_open) {
  return std::string(lo_open ? "(" : "[") + nlohmann::json(lo).dump() + ", " +
         nlohmann::json(hi).dump() + "]";
}

float in_range(const Json& body, const char* key, double lo, double hi, bool lo_open,
               float fallback) {
  const auto v = get_number(body, key);
  if (!v) return fallback;
  if (!std::isfinite(*v) || *v > hi || *v < lo || (lo_open && *v == lo)) {
    throw bad_request(std::string("'") + key + "' must be in " + range_text(lo, hi, lo_open) +
                          ", got " + nlohmann::json(*v).dump() + ".",
                      key);
  }
  return static_cast<float>(*v + 0.0);  // -0 as 0
}

// Array `key` of at most `max` elements (nullptr when absent or null).
const Json* bounded_array(const Json& body, const char* key, size_t max, const char* what) {
  const Json* f = field(body, key);
  if (!f) return nullptr;
  if (!f->is_array()) throw wrong_type(key, what);
  if (f->size() > max) {
    throw bad_request(std::string("'") + key + "' may hold at most " + std::to_string(max) +
                          " elements, got " + std::to_string(f->size()) + ".",
                      key);
  }
  return f;
}

std::vector<std::string> parse_stop(const Json& body) {
  const Json* f = field(body, "stop");
  if (!f) return {};
  const char* what = "a string or an array of strings";
  std::vector<std::string> out;
  if (f->is_string()) {
    out.push_back(f->get<std::string>());
  } else {
    for (const auto& s : *bounded_array(body, "stop", kMaxStopStrings, what)) {
      if (!s.is_string()) throw wrong_type("stop", what);
      out.push_back(s.get<std::string>());
    }
  }
  for (const auto& s : out) {
    if (s.size() > kMaxStopBytes) {
      throw bad_request("Each 'stop' string may be at most " + std::to_string(kMaxStopBytes) +
                            " bytes, got " + std::to_string(s.size()) + ".",
                        "stop");
    }
  }
  return out;
}

// A JSON integer in [0, vocab_size), or nullopt.
std::optional<int64_t> token_id(const Json& v, int64_t vocab_size) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return std::nullopt;
  }
  const int64_t id = v.get<int64_t>();
  if (id < 0 || (vocab_size > 0 && id >= vocab_size)) return std::nullopt;
  return id;
}

std::vector<int64_t> parse_stop_token_ids(const Json& body, int64_t vocab_size) {
  std::vector<int64_t> out;
  const char* what = "an array of token ids";
  const Json* ids = bounded_array(body, "stop_token_ids", kMaxStopTokenIds, what);
  if (!ids) return out;
  for (const auto& id : *ids) {
    const auto t = token_id(id, vocab_size);
    if (!t) {
      throw bad_request("'stop_token_ids' must hold token ids in [0, " +
                            std::to_string(vocab_size) + "), got " + json_excerpt(id, 40) + ".",
                        "stop_token_ids");
    }
    out.push_back(*t);
  }
  return out;
}

// {"<token id>": bias}: at most kMaxLogitBias entries (counted before any is
// read), keys decimal ids in the vocabulary, biases in [-100, 100].
std::vector<std::pair<int64_t, float>> parse_logit_bias(const Json& body, int64_t vocab_size) {
  std::vector<std::pair<int64_t, float>> out;
  const Json* bias = field(body, "logit_bias");
  if (!bias) return out;
  if (!bias->is_object()) throw wrong_type("logit_bias", "an object of token id -> bias");
  if (bias->size() > kMaxLogitBias) {
    throw bad_request("'logit_bias' may hold at most " + std::to_string(kMaxLogitBias) +
                          " entries, got " + std::to_string(bias->size()) + ".",
                      "logit_bias");
  }
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    const std::string& key = it.key();
    const bool digits = !key.empty() && key.size() <= 18 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    const int64_t id = digits ? std::stoll(key) : -1;
    if (!digits || (vocab_size > 0 && id >= vocab_size)) {
      throw bad_request("'logit_bias' keys must be token ids in [0, " + std::to_string(vocab_size) +
                            "), got '" + key.substr(0, 40) + "'.",
                        "logit_bias");
    }
    const Json& v = it.value();
    if (!v.is_number()) throw wrong_type("logit_bias", "an object of token id -> number");
    const double b = v.get<double>();  // checked as a double: 1e300 is no float
    if (!(b >= -100.0 && b <= 100.0)) {
      throw bad_request(
          "'logit_bias' values must be in [-100, 100], got " + nlohmann::json(b).dump() + ".",
          "logit_bias");
    }
    out.emplace_back(id, static_cast<float>(b + 0.0));
  }
  return out;
}

// max_completion_tokens (the current name) over max_tokens; both checked.
std::optional<int64_t> parse_max_tokens(const Json& body) {
  std::optional<int64_t> out;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const auto v = get_int(body, key);
    if (!v) continue;
    if (*v < 1 || *v > kMaxMaxTokens) {
      throw bad_request(std::string("'") + key + "' must be in [1, " +
                            std::to_string(kMaxMaxTokens) + "], got " + std::to_string(*v) + ".",
                        key);
    }
    out = v;
  }
  return out;
}

void parse_sampling(const Json& body, const SamplingDefaults& defaults, SamplingParams& sp) {
  sp.temperature = in_range(body, "temperature", 0.0, 2.0, false, defaults.temperature);
  sp.top_p = in_range(body, "top_p", 0.0, 1.0, true, defaults.top_p);
  sp.min_p = in_range(body, "min_p", 0.0, 1.0, false, defaults.min_p);
  sp.presence_penalty = in_range(body, "presence_penalty", -2.0, 2.0, false, 0.0f);
  sp.frequency_penalty = in_range(body, "frequency_penalty", -2.0, 2.0, false, 0.0f);
  sp.repetition_penalty =
      in_range(body, "repetition_penalty", 0.0, 100.0, true, defaults.repetition_penalty);
  sp.top_k = defaults.top_k;
  if (const auto k = get_int(body, "top_k")) {
    if (*k < -1) throw bad_request("'top_k' must be -1 (off), 0 (off) or positive.", "top_k");
    sp.top_k = *k < 0 ? 0 : *k;
  }
}
}  // namespace

SamplingDefaults sampling_defaults_from(const std::filesystem::path& generation_config) {
  SamplingDefaults d;
  if (!std::filesystem::exists(generation_config)) return d;
  const JsonObject g(read_json_file(generation_config), generation_config.string());
  auto number = [&](const char* key, double lo, double hi, bool lo_open, float fallback) {
    if (!g.has(key) || g.json()[key].is_null()) return fallback;
    const double v = g.get<double>(key);
    if (!std::isfinite(v) || v > hi || v < lo || (lo_open && v == lo)) {
      throw ConfigError(g.where() + ": field '" + key + "' is " + nlohmann::json(v).dump() +
                        ", outside " + (lo_open ? "(" : "[") + nlohmann::json(lo).dump() + ", " +
                        nlohmann::json(hi).dump() + "]");
    }
    return static_cast<float>(v);
  };
  // The ranges a request may use (parse_generation_params).
  d.temperature = number("temperature", 0.0, 2.0, false, d.temperature);
  d.top_p = number("top_p", 0.0, 1.0, true, d.top_p);
  d.min_p = number("min_p", 0.0, 1.0, false, d.min_p);
  d.repetition_penalty = number("repetition_penalty", 0.0, 100.0, true, d.repetition_penalty);
  if (g.has("top_k") && !g.json()["top_k"].is_null()) {
    const auto k = g.get<int64_t>("top_k");
    if (k < 0) throw ConfigError(g.where() + ": field 'top_k' must be >= 0");
    d.top_k = k;
  }
  return d;
}

GenerationParams parse_generation_params(const Json& body, int64_t vocab_size, uint64_t random_seed,
                                         const SamplingDefaults& defaults) {
  GenerationParams g;
  g.model = get_string(body, "model").value_or("");
  g.stream = get_bool(body, "stream").value_or(false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw wrong_type("stream_options", "an object");
    g.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  g.max_tokens = parse_max_tokens(body);
  if (const auto n = get_int(body, "n"); n && *n != 1) {
    throw bad_request("'n' must be 1: hubzoo returns one choice per prompt.", "n");
  }
  GenerationRequest& r = g.request;
  SamplingParams& sp = r.sampling;
  parse_sampling(body, defaults, sp);
  const auto seed = get_int(body, "seed");
  sp.seed = seed ? static_cast<uint64_t>(*seed) : random_seed;
  sp.logit_bias = parse_logit_bias(body, vocab_size);
  r.stop = parse_stop(body);
  r.stop_token_ids = parse_stop_token_ids(body, vocab_size);
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  r.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(true);
  g.return_token_ids = get_bool(body, "return_token_ids").value_or(false);
  try {
    validate(sp, vocab_size);
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    throw bad_request(what + ".", what.rfind("logit_bias", 0) == 0 ? "logit_bias" : "");
  }
  return g;
}

void check_chat_request(const Json& body) {
  const Json* messages =
      bounded_array(body, "messages", kMaxMessages, "a non-empty array of messages");
  if (!messages || messages->empty()) {
    throw bad_request("'messages' must be a non-empty array of messages.", "messages");
  }
  bounded_array(body, "tools", kMaxTools, "an array of tools");
}

void check_completion_prompt(const Json& body, int64_t vocab_size) {
  const Json* prompt = field(body, "prompt");
  if (!prompt || !prompt->is_array()) return;  // a string, or the caller's 400
  const bool ids = !prompt->empty() && (*prompt)[0].is_number_integer();
  if (!ids) bounded_array(body, "prompt", kMaxPrompts, "a string, strings or token ids");
  auto check_ids = [&](const Json& arr) {
    for (const auto& t : arr) {
      if (t.is_number_integer() && !token_id(t, vocab_size)) {
        throw bad_request("'prompt' token ids must be in [0, " + std::to_string(vocab_size) +
                              "), got " + json_excerpt(t, 40) + ".",
                          "prompt");
      }
    }
  };
  if (ids) {
    check_ids(*prompt);
  } else {
    for (const auto& p : *prompt) {
      if (p.is_array()) check_ids(p);
    }
  }
}

std::vector<std::string> embedding_inputs(const Json& body) {
  const char* shape = "'input' must be a string or a non-empty array of strings.";
  const Json* input = field(body, "input");
  if (!input) throw bad_request("'input' is required.", "input");
  if (input->is_string()) return {input->get<std::string>()};
  if (!input->is_array() || input->empty()) throw bad_request(shape, "input");
  bounded_array(body, "input", kMaxEmbeddingInputs, "a string or an array of strings");
  std::vector<std::string> texts;
  texts.reserve(input->size());
  for (const auto& t : *input) {
    if (!t.is_string()) throw bad_request(shape, "input");
    texts.push_back(t.get<std::string>());
  }
  return texts;
}

namespace {
Json bytes_of(const std::string& s) {
  Json out = Json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}
}  // namespace

Json chat_logprobs(const std::vector<LogprobEntry>& entries,
                   const std::function<std::string(int64_t)>& token_text) {
  Json content = Json::array();
  for (const auto& e : entries) {
    const std::string text = token_text(e.token);
    Json top = Json::array();
    for (const auto& t : e.logprobs.top) {
      const std::string tt = token_text(t.id);
      top.push_back({{"token", tt}, {"logprob", t.logprob}, {"bytes", bytes_of(tt)}});
    }
    content.push_back({{"token", text},
                       {"logprob", e.logprobs.chosen.logprob},
                       {"bytes", bytes_of(text)},
                       {"top_logprobs", top}});
  }
  return Json{{"content", content}, {"refusal", nullptr}};
}

Json completion_logprobs(const std::vector<LogprobEntry>& entries,
                         const std::vector<int64_t>& text_offsets,
                         const std::function<std::string(int64_t)>& token_text) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array();
  for (const auto& e : entries) {
    tokens.push_back(token_text(e.token));
    lps.push_back(e.logprobs.chosen.logprob);
    Json top = Json::object();
    for (const auto& t : e.logprobs.top) top[token_text(t.id)] = t.logprob;
    tops.push_back(top);
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", lps},
              {"top_logprobs", tops},
              {"text_offset", text_offsets}};
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

bool constant_time_equal(const std::string& given, const std::string& expected) {
  // Every byte of the expected key is read whatever `given` holds; the loop
  // never exits early.
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

}  // namespace hubzoo::server
