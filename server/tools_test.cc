#include "server/tools.h"

#include <gtest/gtest.h>

namespace hubzoo::server {
namespace {

const char* kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "time-now", "description": "d"}}])";

Json body_with(const std::string& extra) {
  return Json::parse(std::string(R"({"tools": )") + kTools + (extra.empty() ? "" : ", ") + extra +
                     "}");
}

// The param of the 400 that parsing `body` raises ("" when none).
std::string error_param(const Json& body) {
  try {
    parse_tool_request(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "";
}

TEST(Tools, ChoiceDefaultsAndModes) {
  EXPECT_EQ(parse_tool_request(Json::object()).choice.mode, ToolChoice::Mode::kNone);
  EXPECT_EQ(parse_tool_request(body_with("")).choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_FALSE(parse_tool_request(body_with(R"("tool_choice": "none")")).parse_calls());
  EXPECT_EQ(parse_tool_request(body_with(R"("tool_choice": "required")")).choice.mode,
            ToolChoice::Mode::kRequired);
  const ToolRequest named = parse_tool_request(
      body_with(R"("tool_choice": {"type": "function", "function": {"name": "time-now"}},
                   "parallel_tool_calls": false)"));
  EXPECT_EQ(named.choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(named.choice.function, "time-now");
  EXPECT_FALSE(named.parallel_tool_calls);
  const ToolCallRequirement r = tool_call_requirement(named, ToolFormat::kHermes);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["function"]["name"], "time-now");
  EXPECT_EQ(r.syntax.begin, "<tool_call>");
  EXPECT_FALSE(r.parallel);
}

TEST(Tools, BadShapesNameTheField) {
  EXPECT_EQ(error_param(Json::parse(R"({"tools": {}})")), "tools");
  EXPECT_EQ(error_param(Json::parse(R"({"tools": [1]})")), "tools[0]");
  EXPECT_EQ(error_param(Json::parse(R"({"tools": [{"type": "retrieval"}]})")), "tools[0].type");
  EXPECT_EQ(error_param(Json::parse(R"({"tools": [{"type": "function"}]})")), "tools[0].function");
  EXPECT_EQ(
      error_param(Json::parse(R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})")),
      "tools[0].function.name");
  EXPECT_EQ(
      error_param(Json::parse(
          R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})")),
      "tools[0].function.parameters");
  EXPECT_EQ(error_param(Json::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}},
                                                  {"type": "function", "function": {"name": "f"}}]})")),
            "tools[1].function.name");
  EXPECT_EQ(error_param(body_with(R"("tool_choice": "always")")), "tool_choice");
  EXPECT_EQ(error_param(
                body_with(R"("tool_choice": {"type": "function", "function": {"name": "nope"}})")),
            "tool_choice");
  EXPECT_EQ(error_param(Json::parse(R"({"tool_choice": "required"})")), "tool_choice");
  EXPECT_EQ(error_param(body_with(R"("parallel_tool_calls": "yes")")), "parallel_tool_calls");
  Json many = Json::parse(R"({"tools": []})");
  for (size_t i = 0; i <= kMaxTools; ++i) {
    many["tools"].push_back(
        {{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  }
  EXPECT_EQ(error_param(many), "tools");
}

// The param of the 400 prepare_tool_message raises.
std::string message_error(const char* message) {
  try {
    prepare_tool_message(Json::parse(message), 3);
  } catch (const ApiError& e) {
    return e.param;
  }
  return "";
}

TEST(Tools, AssistantCallsGetObjectArguments) {
  const Json m = prepare_tool_message(Json::parse(R"({"role": "assistant", "content": null,
      "tool_calls": [{"id": "call_1", "type": "function",
                      "function": {"name": "f", "arguments": "{\"city\": \"Paris\"}"}},
                     {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": ""}}]})"),
                                      0);
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], Json::object());
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_1");
  // An empty list is dropped; other roles pass untouched.
  EXPECT_FALSE(prepare_tool_message(
                   Json::parse(R"({"role": "assistant", "content": "x", "tool_calls": []})"), 0)
                   .contains("tool_calls"));
  const Json user = Json::parse(R"({"role": "user", "content": "hi"})");
  EXPECT_EQ(prepare_tool_message(user, 0), user);
}

TEST(Tools, BadMessagesNameTheField) {
  EXPECT_EQ(message_error(R"({"role": "tool", "content": "18C"})"), "messages[3].tool_call_id");
  EXPECT_EQ(message_error(R"({"role": "assistant", "tool_calls": {}})"), "messages[3].tool_calls");
  EXPECT_EQ(message_error(R"({"role": "assistant", "tool_calls": [{"type": "function"}]})"),
            "messages[3].tool_calls[0].function");
  EXPECT_EQ(message_error(R"({"role": "assistant", "tool_calls": [{"function": {"name": 1}}]})"),
            "messages[3].tool_calls[0].function.name");
  EXPECT_EQ(
      message_error(
          R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]})"),
      "messages[3].tool_calls[0].function.arguments");
  EXPECT_EQ(
      message_error(
          R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]})"),
      "messages[3].tool_calls[0].function.arguments");
  EXPECT_EQ(
      message_error(
          R"({"role": "assistant", "tool_calls": [{"type": "code", "function": {"name": "f"}}]})"),
      "messages[3].tool_calls[0].type");
}

TEST(Tools, ResponseShapes) {
  int n = 0;
  const Json calls = tool_calls_json({{"f", "{\"a\":1}"}, {"g", "{}"}},
                                     [&] { return "call_" + std::to_string(n++); });
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], Json::parse(R"({"id": "call_0", "type": "function",
                                      "function": {"name": "f", "arguments": "{\"a\":1}"}})"));
  const std::vector<Json> deltas = tool_call_deltas({"f", "{\"a\":1}"}, 2, "call_x");
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[0],
            Json::parse(R"({"tool_calls": [{"index": 2, "id": "call_x", "type": "function",
                                       "function": {"name": "f", "arguments": ""}}]})"));
  EXPECT_EQ(
      deltas[1],
      Json::parse(R"({"tool_calls": [{"index": 2, "function": {"arguments": "{\"a\":1}"}}]})"));
  const std::string hex = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(tool_call_id(ToolFormat::kHermes, hex), "call_0123456789abcdef01234567");
  EXPECT_EQ(tool_call_id(ToolFormat::kMistral, hex), "012345678");  // 9 alphanumerics
}

}  // namespace
}  // namespace hubzoo::server
