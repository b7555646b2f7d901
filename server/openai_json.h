// OpenAI's wire format: error objects, typed request fields, the sampling
// parameters shared by /v1/chat/completions and /v1/completions, logprobs and
// server-sent events. Pure functions over JSON, no HTTP.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "io/json.h"

namespace hubzoo::server {

using Json = nlohmann::ordered_json;

// Answered as {"error": {"message", "type", "param", "code"}} with `status`.
struct ApiError : std::runtime_error {
  ApiError(int status_, std::string type_, const std::string& message, std::string param_ = "",
           std::string code_ = "")
      : std::runtime_error(message),
        status(status_),
        type(std::move(type_)),
        param(std::move(param_)),
        code(std::move(code_)) {}
  int status;
  std::string type, param, code;
};

// 400 invalid_request_error naming the parameter.
ApiError bad_request(const std::string& message, const std::string& param = "",
                     const std::string& code = "");
Json error_body(const ApiError& e);

// Never throws on invalid UTF-8 (replaced), unlike Json::dump().
std::string dump(const Json& j);
// "data: <json>\n\n"
std::string sse(const Json& j);

// Request bodies nest at most 64 levels: a tool's JSON schema needs ~10
// (body/tools/0/function/parameters/properties/x/items/...). The byte bound is
// a backstop; the server's --max-body-bytes (8 MiB) applies first.
inline constexpr JsonLimits kRequestJsonLimits{/*max_depth=*/64, /*max_bytes=*/uint64_t{64} << 20};

// Bounds on a request's arrays and maps, each checked before any work on the
// field (a 400 naming it). vLLM sets none of these; each is far above what a
// real client sends and keeps the per-request and per-token work small.
inline constexpr size_t kMaxLogitBias = 1024;        // entries; each costs work per sampled token
inline constexpr size_t kMaxStopStrings = 16;        // strings; matched at every token
inline constexpr size_t kMaxStopBytes = 1024;        // bytes per stop string
inline constexpr size_t kMaxStopTokenIds = 256;      // ids
inline constexpr size_t kMaxMessages = 2048;         // chat messages
inline constexpr size_t kMaxTools = 128;             // tools (OpenAI's own limit)
inline constexpr size_t kMaxPrompts = 64;            // prompts of one /v1/completions request
inline constexpr size_t kMaxEmbeddingInputs = 2048;  // inputs of one /v1/embeddings request
// max_tokens / max_completion_tokens: at most this, so prompt + max_tokens
// cannot overflow (the context length rejects most of the range anyway).
inline constexpr int64_t kMaxMaxTokens = int64_t{1} << 31;

// Parses a request body through io/json's bounded parser (depth, size; a
// number such as 1e999 that overflows a double is malformed); 400 for
// malformed JSON or a body that is not an object.
Json parse_body(const std::string& body);

// Typed optional fields: nullopt when absent or null; 400 naming the field
// when present with the wrong type.
std::optional<bool> get_bool(const Json& body, const char* key);
std::optional<int64_t> get_int(const Json& body, const char* key);
std::optional<double> get_number(const Json& body, const char* key);
std::optional<std::string> get_string(const Json& body, const char* key);

// What chat and completions requests share, read from the body.
struct GenerationParams {
  std::string model;  // empty: not given
  bool stream = false, include_usage = false;
  std::optional<int64_t> max_tokens;
  bool return_token_ids = false;  // hubzoo extension: token ids in each choice
  GenerationRequest request;      // prompt and callbacks left empty
};

// Values of the sampling fields a request leaves out: OpenAI's defaults, or
// the model's recommendations from generation_config.json (as vLLM does).
struct SamplingDefaults {
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f, repetition_penalty = 1.0f;
  int64_t top_k = 0;  // 0: off
};

// The sampling fields generation_config.json sets (temperature, top_p, top_k,
// min_p, repetition_penalty) over OpenAI's defaults; do_sample is not read,
// as a request's temperature decides. No file: OpenAI's defaults. Throws
// ConfigError naming the file and field for a value a request could not hold.
SamplingDefaults sampling_defaults_from(const std::filesystem::path& generation_config);

// Sampling fields, stop, seed, penalties, logit_bias, n, and the extensions
// top_k, min_p, repetition_penalty, ignore_eos, skip_special_tokens,
// stop_token_ids. Throws ApiError 400 naming the parameter.
// `random_seed` is used when the request has no seed; `defaults` for the
// sampling fields it leaves out.
GenerationParams parse_generation_params(const Json& body, int64_t vocab_size, uint64_t random_seed,
                                         const SamplingDefaults& defaults = {});

// /v1/chat/completions: 'messages' a non-empty array of at most kMaxMessages,
// 'tools' an array of at most kMaxTools; checked before the template runs.
void check_chat_request(const Json& body);
// /v1/completions: 'prompt' holds at most kMaxPrompts prompts and its token
// ids are integers in [0, vocab_size); checked before anything is encoded.
void check_completion_prompt(const Json& body, int64_t vocab_size);
// /v1/embeddings: 'input' as a string or 1..kMaxEmbeddingInputs strings.
std::vector<std::string> embedding_inputs(const Json& body);

// Logprobs in the two OpenAI formats. `token_text(id)` gives a token's text.
struct LogprobEntry {
  int64_t token = 0;
  Logprobs logprobs;
};
Json chat_logprobs(const std::vector<LogprobEntry>& entries,
                   const std::function<std::string(int64_t)>& token_text);
// `text_offset` of each entry: where its text starts in the completion.
Json completion_logprobs(const std::vector<LogprobEntry>& entries,
                         const std::vector<int64_t>& text_offsets,
                         const std::function<std::string(int64_t)>& token_text);

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
// Whether a-b are equal, in time independent of where they differ.
bool constant_time_equal(const std::string& given, const std::string& expected);

}  // namespace hubzoo::server
