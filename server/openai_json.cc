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
    j = Json::parse(body);
  } catch (const Json::parse_error& e) {
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
float in_range(const Json& body, const char* key, double lo, double hi, bool lo_open,
               float fallback) {
  const auto v = get_number(body, key);
  if (!v) return fallback;
  if (!std::isfinite(*v) || *v > hi || *v < lo || (lo_open && *v == lo)) {
    throw bad_request(std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") +
                          nlohmann::json(lo).dump() + ", " + nlohmann::json(hi).dump() + "], got " +
                          nlohmann::json(*v).dump() + ".",
                      key);
  }
  return static_cast<float>(*v);
}

std::vector<std::string> parse_stop(const Json& body) {
  const Json* f = field(body, "stop");
  if (!f) return {};
  if (f->is_string()) return {f->get<std::string>()};
  if (!f->is_array()) throw wrong_type("stop", "a string or an array of strings");
  if (f->size() > 16) throw bad_request("'stop' may hold at most 16 strings.", "stop");
  std::vector<std::string> out;
  for (const auto& s : *f) {
    if (!s.is_string()) throw wrong_type("stop", "a string or an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
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
  g.max_tokens = get_int(body, "max_completion_tokens");
  if (!g.max_tokens) g.max_tokens = get_int(body, "max_tokens");
  if (g.max_tokens && *g.max_tokens < 1) {
    throw bad_request("'max_tokens' must be at least 1.", "max_tokens");
  }
  if (const auto n = get_int(body, "n"); n && *n != 1) {
    throw bad_request("'n' must be 1: hubzoo returns one choice per prompt.", "n");
  }
  GenerationRequest& r = g.request;
  SamplingParams& sp = r.sampling;
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
  const auto seed = get_int(body, "seed");
  sp.seed = seed ? static_cast<uint64_t>(*seed) : random_seed;
  if (const Json* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) throw wrong_type("logit_bias", "an object of token id -> bias");
    for (const auto& [key, value] : bias->items()) {
      int64_t id = -1;
      size_t used = 0;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size()) {
        throw bad_request("'logit_bias' keys must be token ids, got '" + key + "'.", "logit_bias");
      }
      if (!value.is_number()) throw wrong_type("logit_bias", "an object of token id -> number");
      sp.logit_bias.emplace_back(id, value.get<float>());
    }
  }
  r.stop = parse_stop(body);
  if (const Json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) throw wrong_type("stop_token_ids", "an array of integers");
    for (const auto& id : *ids) {
      if (!id.is_number_integer()) throw wrong_type("stop_token_ids", "an array of integers");
      r.stop_token_ids.push_back(id.get<int64_t>());
    }
  }
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
