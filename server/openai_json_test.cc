#include "server/openai_json.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>

#include "base/error.h"
#include "base/test_util.h"

namespace hubzoo::server {
namespace {

GenerationParams parse(const std::string& body) {
  return parse_generation_params(Json::parse(body), 100, 42);
}

// The ApiError a body raises: status and param.
std::pair<int, std::string> error_of(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    return {e.status, e.param};
  }
  return {0, ""};
}

TEST(OpenAIJson, DefaultsAreOpenAIs) {
  const GenerationParams g = parse("{}");
  EXPECT_FALSE(g.stream);
  EXPECT_FALSE(g.max_tokens.has_value());
  EXPECT_EQ(g.request.sampling.temperature, 1.0f);
  EXPECT_EQ(g.request.sampling.top_p, 1.0f);
  EXPECT_EQ(g.request.sampling.seed, 42u);  // the server's random seed when none is given
  EXPECT_TRUE(g.request.skip_special_tokens);
}

TEST(OpenAIJson, GenerationConfigGivesTheDefaultsARequestOmits) {
  test_util::TempDir dir;
  const auto path = dir / "generation_config.json";
  EXPECT_EQ(sampling_defaults_from(path).temperature, 1.0f);  // no file: OpenAI's
  std::ofstream(path) << R"({"do_sample": true, "temperature": 0.6, "top_p": 0.95,
      "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "eos_token_id": 2})";
  const SamplingDefaults d = sampling_defaults_from(path);
  const GenerationParams g = parse_generation_params(Json::parse("{}"), 100, 42, d);
  EXPECT_FLOAT_EQ(g.request.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(g.request.sampling.top_p, 0.95f);
  EXPECT_EQ(g.request.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(g.request.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(g.request.sampling.repetition_penalty, 1.1f);
  // A request's own values win, including "off" values.
  const GenerationParams r =
      parse_generation_params(Json::parse(R"({"temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0,
                      "repetition_penalty": 1})"),
                              100, 42, d);
  EXPECT_EQ(r.request.sampling.temperature, 0.0f);
  EXPECT_EQ(r.request.sampling.top_p, 1.0f);
  EXPECT_EQ(r.request.sampling.top_k, 0);
  EXPECT_EQ(r.request.sampling.min_p, 0.0f);
  EXPECT_EQ(r.request.sampling.repetition_penalty, 1.0f);

  std::ofstream(path) << R"({"temperature": 7})";
  test_util::expect_error<ConfigError>([&] { sampling_defaults_from(path); },
                                       {"generation_config.json", "'temperature'"});
  std::ofstream(path) << R"({"top_k": -3})";
  test_util::expect_error<ConfigError>([&] { sampling_defaults_from(path); }, {"'top_k'"});
  std::ofstream(path) << R"({"top_p": "high"})";
  test_util::expect_error<ConfigError>([&] { sampling_defaults_from(path); }, {"'top_p'"});
}

TEST(OpenAIJson, ReadsEveryField) {
  const GenerationParams g = parse(R"({"model": "m", "stream": true,
      "stream_options": {"include_usage": true}, "max_completion_tokens": 7, "temperature": 0,
      "top_p": 0.5, "top_k": -1, "min_p": 0.1, "presence_penalty": 1, "frequency_penalty": -1,
      "repetition_penalty": 1.2, "seed": 5, "logit_bias": {"3": -100, "7": 2.5},
      "stop": ["a", "bc"], "stop_token_ids": [9], "ignore_eos": true, "return_token_ids": true,
      "user": "ignored", "n": 1})");
  EXPECT_EQ(g.model, "m");
  EXPECT_TRUE(g.stream && g.include_usage && g.return_token_ids);
  EXPECT_EQ(*g.max_tokens, 7);
  const SamplingParams& s = g.request.sampling;
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, 0.5f);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_EQ(s.presence_penalty, 1.0f);
  EXPECT_EQ(s.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.2f);
  EXPECT_EQ(s.seed, 5u);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0], (std::pair<int64_t, float>{3, -100.0f}));
  EXPECT_EQ(g.request.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(g.request.stop_token_ids, (std::vector<int64_t>{9}));
  EXPECT_TRUE(g.request.ignore_eos);
  EXPECT_EQ(parse(R"({"stop": "x"})").request.stop, (std::vector<std::string>{"x"}));
}

TEST(OpenAIJson, WrongTypesAndBadValuesNameTheParameter) {
  using E = std::pair<int, std::string>;
  EXPECT_EQ(error_of(R"({"temperature": "1"})"), E(400, "temperature"));
  EXPECT_EQ(error_of(R"({"temperature": -0.1})"), E(400, "temperature"));
  EXPECT_EQ(error_of(R"({"temperature": 2.5})"), E(400, "temperature"));
  EXPECT_EQ(error_of(R"({"top_p": 0})"), E(400, "top_p"));
  EXPECT_EQ(error_of(R"({"max_tokens": 1.5})"), E(400, "max_tokens"));
  EXPECT_EQ(error_of(R"({"max_tokens": -3})"), E(400, "max_tokens"));
  EXPECT_EQ(error_of(R"({"stream": 1})"), E(400, "stream"));
  EXPECT_EQ(error_of(R"({"stream_options": true})"), E(400, "stream_options"));
  EXPECT_EQ(error_of(R"({"n": 3})"), E(400, "n"));
  EXPECT_EQ(error_of(R"({"top_k": -2})"), E(400, "top_k"));
  EXPECT_EQ(error_of(R"({"seed": "7"})"), E(400, "seed"));
  EXPECT_EQ(error_of(R"({"stop": [1]})"), E(400, "stop"));
  EXPECT_EQ(error_of(R"({"logit_bias": {"x": 1}})"), E(400, "logit_bias"));
  EXPECT_EQ(error_of(R"({"logit_bias": {"100": 1}})"), E(400, "logit_bias"));  // vocab 100
  EXPECT_EQ(error_of(R"({"logit_bias": {"1": 101}})"), E(400, "logit_bias"));
  EXPECT_EQ(error_of(R"({"presence_penalty": 2.1})"), E(400, "presence_penalty"));
  EXPECT_EQ(error_of(R"({"repetition_penalty": 0})"), E(400, "repetition_penalty"));
  EXPECT_EQ(error_of(R"({"model": 3})"), E(400, "model"));
}

TEST(OpenAIJson, MalformedBodiesAre400) {
  EXPECT_THROW(parse_body("{"), ApiError);
  EXPECT_THROW(parse_body("[1]"), ApiError);
  EXPECT_THROW(parse_body(""), ApiError);
  EXPECT_NO_THROW(parse_body(R"({"a": 1})"));
}

// The ApiError a body raises through `fn`: status, param and message.
struct Raised {
  int status = 0;
  std::string param, message;
};
template <typename Fn>
Raised raised(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return {e.status, e.param, e.what()};
  }
  return {};
}

std::string deep(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// 100k nested arrays in a field were parsed whole and crashed the server when
// copied or rendered (stack overflow). The parser refuses them with a 400.
TEST(OpenAIJson, DeepBodiesAre400NamingTheDepth) {
  for (const std::string& body :
       {R"({"messages": [{"role": "user", "content": )" + deep(100000) + "}]}",
        R"({"tools": [{"type": "function", "function": {"parameters": )" + deep(100000) + "}}]}",
        R"({"stop": )" + deep(100000) + "}"}) {
    const Raised r = raised([&] { parse_body(body); });
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(r.message.find("nested deeper than the limit of 64 levels"), std::string::npos)
        << r.message;
  }
  // A deep tool schema that real clients send still fits.
  EXPECT_NO_THROW(parse_body(R"({"tools": [{"function": {"parameters": )" + deep(50) + "}}]}"));
}

// 1e999 overflows a double: nlohmann raised out_of_range, which parse_body
// did not catch (a 500). Now a 400 that quotes the number and names the field.
TEST(OpenAIJson, OverflowingNumbersAre400) {
  const Raised r = raised([] { parse_body(R"({"temperature": 1e999})"); });
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.message.find("1e999"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("(at /temperature)"), std::string::npos) << r.message;
  EXPECT_EQ(raised([] { parse_body(R"({"temperature": -1e999})"); }).status, 400);
}

// Every numeric field is range-checked with a 400 naming it.
TEST(OpenAIJson, NumericFieldsAreRangeChecked) {
  using E = std::pair<int, std::string>;
  for (const char* key : {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                          "repetition_penalty"}) {
    for (const char* v : {"1e308", "-1e308", "1e30", "\"0.5\"", "true", "[1]"}) {
      const std::string body = std::string("{\"") + key + "\": " + v + "}";
      EXPECT_EQ(error_of(body.c_str()), E(400, key)) << body;
    }
  }
  for (const char* key : {"max_tokens", "max_completion_tokens", "n", "seed", "top_k"}) {
    // Integers given as floats, past int64, and strings.
    for (const char* v : {"2.0", "1e3", "18446744073709551615", "99999999999999999999", "\"3\""}) {
      const std::string body = std::string("{\"") + key + "\": " + v + "}";
      EXPECT_EQ(error_of(body.c_str()), E(400, key)) << body;
    }
  }
  EXPECT_EQ(error_of(R"({"max_tokens": 9223372036854775807})"), E(400, "max_tokens"));
  EXPECT_EQ(error_of(R"({"max_completion_tokens": 0})"), E(400, "max_completion_tokens"));
  EXPECT_EQ(error_of(R"({"max_completion_tokens": 5, "max_tokens": -1})"), E(400, "max_tokens"));
  EXPECT_EQ(parse(R"({"max_completion_tokens": 5, "max_tokens": 7})").max_tokens, 5);
  EXPECT_EQ(error_of(R"({"seed": 9223372036854775808})"), E(400, "seed"));
  EXPECT_EQ(parse(R"({"seed": -1})").request.sampling.seed, ~uint64_t{0});
  // -0 is 0; the boundaries are inclusive where OpenAI's are.
  const GenerationParams g = parse(R"({"temperature": -0.0, "top_p": 1, "min_p": 0})");
  EXPECT_FALSE(std::signbit(g.request.sampling.temperature));
  EXPECT_EQ(g.request.sampling.top_p, 1.0f);
}

// logit_bias: 100k entries took 17 s of CPU before the 400 (the ordered
// parser's O(n^2) key lookups, then a stoll per key). The count is checked
// first, the parse is linear, and keys and values are strict.
TEST(OpenAIJson, LogitBiasIsBoundedAndStrict) {
  std::string body = R"({"logit_bias": {)";
  for (int i = 0; i < 100000; ++i) body += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  body += "}}";
  const auto start = std::chrono::steady_clock::now();
  const Raised r = raised([&] { parse_generation_params(parse_body(body), 200000, 1); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.param, "logit_bias");
  EXPECT_NE(r.message.find("at most 1024 entries, got 100000"), std::string::npos) << r.message;
  using E = std::pair<int, std::string>;
  for (const char* b : {R"({"logit_bias": {" 5": 1}})", R"({"logit_bias": {"+5": 1}})",
                        R"({"logit_bias": {"-1": 1}})", R"({"logit_bias": {"5x": 1}})",
                        R"({"logit_bias": {"99999999999999999999": 1}})",
                        R"({"logit_bias": {"5": 1e300}})", R"({"logit_bias": {"5": -100.5}})",
                        R"({"logit_bias": {"5": "1"}})", R"({"logit_bias": [1]})"}) {
    EXPECT_EQ(error_of(b), E(400, "logit_bias")) << b;
  }
  const auto bias = parse(R"({"logit_bias": {"5": -100, "7": 2.5}})").request.sampling.logit_bias;
  ASSERT_EQ(bias.size(), 2u);
  EXPECT_EQ(bias[0], std::make_pair(int64_t{5}, -100.0f));
  EXPECT_EQ(bias[1], std::make_pair(int64_t{7}, 2.5f));
}

TEST(OpenAIJson, StopAndStopTokenIdsAreBounded) {
  using E = std::pair<int, std::string>;
  std::string many = R"({"stop": [)";
  for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + "\"s\"";
  many += "]}";
  EXPECT_EQ(error_of(many.c_str()), E(400, "stop"));
  const std::string long_stop = R"({"stop": ")" + std::string(kMaxStopBytes + 1, 'x') + "\"}";
  EXPECT_EQ(error_of(long_stop.c_str()), E(400, "stop"));
  const std::string long_in_list = R"({"stop": ["a", ")" + std::string(5000, 'x') + "\"]}";
  EXPECT_EQ(error_of(long_in_list.c_str()), E(400, "stop"));
  EXPECT_EQ(error_of(R"({"stop": {"a": 1}})"), E(400, "stop"));
  std::string ids = R"({"stop_token_ids": [)";
  for (size_t i = 0; i <= kMaxStopTokenIds; ++i) ids += std::string(i ? "," : "") + "1";
  ids += "]}";
  EXPECT_EQ(error_of(ids.c_str()), E(400, "stop_token_ids"));
  for (const char* b : {R"({"stop_token_ids": [100]})", R"({"stop_token_ids": [-1]})",
                        R"({"stop_token_ids": [18446744073709551615]})",
                        R"({"stop_token_ids": [1.0]})", R"({"stop_token_ids": 1})"}) {
    EXPECT_EQ(error_of(b), E(400, "stop_token_ids")) << b;
  }
  EXPECT_EQ(parse(R"({"stop_token_ids": [0, 99]})").request.stop_token_ids,
            (std::vector<int64_t>{0, 99}));
}

std::string array_of(size_t n, const std::string& item) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) out += (i ? "," : "") + item;
  return out + "]";
}

TEST(OpenAIJson, ChatCompletionAndEmbeddingArraysAreBounded) {
  const std::string msg = R"({"role": "user", "content": "x"})";
  auto chat = [&](const std::string& body) {
    return raised([&] { check_chat_request(parse_body(body)); });
  };
  EXPECT_EQ(chat(R"({"messages": )" + array_of(kMaxMessages + 1, msg) + "}").param, "messages");
  EXPECT_EQ(chat(R"({"messages": []})").param, "messages");
  EXPECT_EQ(chat(R"({"messages": {}})").param, "messages");
  EXPECT_EQ(chat(R"({"messages": [)" + msg + R"(], "tools": )" +
                 array_of(kMaxTools + 1, R"({"type": "function"})") + "}")
                .param,
            "tools");
  EXPECT_EQ(chat(R"({"messages": [)" + msg + R"(], "tools": {}})").param, "tools");
  EXPECT_EQ(chat(R"({"messages": )" + array_of(kMaxMessages, msg) + "}").status, 0);

  auto completion = [&](const std::string& body) {
    return raised([&] { check_completion_prompt(parse_body(body), 100); });
  };
  EXPECT_EQ(completion(R"({"prompt": )" + array_of(kMaxPrompts + 1, "\"a\"") + "}").param,
            "prompt");
  EXPECT_EQ(completion(R"({"prompt": [1, 2, 100]})").param, "prompt");
  EXPECT_EQ(completion(R"({"prompt": [[1], [-1]]})").param, "prompt");
  EXPECT_EQ(completion(R"({"prompt": [[1], "a", [99]]})").status, 0);
  EXPECT_EQ(completion(R"({"prompt": )" + array_of(1000, "7") + "}").status, 0);

  auto inputs = [&](const std::string& body) {
    return raised([&] { embedding_inputs(parse_body(body)); });
  };
  EXPECT_EQ(inputs(R"({"input": )" + array_of(kMaxEmbeddingInputs + 1, "\"a\"") + "}").param,
            "input");
  EXPECT_EQ(inputs(R"({"input": []})").param, "input");
  EXPECT_EQ(inputs(R"({"input": [1]})").param, "input");
  EXPECT_EQ(inputs(R"({})").param, "input");
  EXPECT_EQ(embedding_inputs(parse_body(R"({"input": ["a", "b"]})")),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(embedding_inputs(parse_body(R"({"input": "a"})")), (std::vector<std::string>{"a"}));
}

TEST(OpenAIJson, ErrorObjectShape) {
  const Json e = error_body(
      ApiError(404, "invalid_request_error", "no such model", "model", "model_not_found"));
  EXPECT_EQ(e.dump(), R"({"error":{"message":"no such model","type":"invalid_request_error",)"
                      R"("param":"model","code":"model_not_found"}})");
  EXPECT_EQ(error_body(bad_request("x")).dump(),
            R"({"error":{"message":"x","type":"invalid_request_error","param":null,"code":null}})");
}

TEST(OpenAIJson, DumpReplacesInvalidUtf8AndSseFraming) {
  EXPECT_EQ(dump(Json{{"t", std::string("a\xC3")}}), "{\"t\":\"a\xEF\xBF\xBD\"}");
  EXPECT_EQ(sse(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

TEST(OpenAIJson, LogprobFormats) {
  std::vector<LogprobEntry> entries(2);
  entries[0] = {5, {{5, -0.5f}, {{5, -0.5f}, {6, -1.5f}}}};
  entries[1] = {7, {{7, -2.0f}, {}}};
  auto text = [](int64_t id) { return std::string("t").append(std::to_string(id)); };
  const Json chat = chat_logprobs(entries, text);
  EXPECT_EQ(chat["content"][0]["token"], "t5");
  EXPECT_EQ(chat["content"][0]["bytes"], Json::array({116, 53}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "t6");
  EXPECT_EQ(chat["content"][1]["logprob"], -2.0f);
  const Json text_lp = completion_logprobs(entries, {0, 2}, text);
  EXPECT_EQ(text_lp["tokens"], Json::array({"t5", "t7"}));
  EXPECT_EQ(text_lp["top_logprobs"][0]["t6"], -1.5f);
  EXPECT_EQ(text_lp["text_offset"], Json::array({0, 2}));
}

TEST(OpenAIJson, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secreT", "secret"));
  EXPECT_FALSE(constant_time_equal("secret1", "secret"));
  EXPECT_FALSE(constant_time_equal("secre", "secret"));
  EXPECT_FALSE(constant_time_equal("", "secret"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

}  // namespace
}  // namespace hubzoo::server
