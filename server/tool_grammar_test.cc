#include "server/tool_grammar.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "server/tool_parser.h"

namespace hubzoo::server {
namespace {

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
     "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}},
  {"type": "function", "function": {"name": "tree", "parameters": {"type": "object",
     "properties": {"root": {"$ref": "#/$defs/node"}, "default": {"$ref": "#/$defs/node"}},
     "required": ["root"],
     "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array",
       "items": {"$ref": "#/$defs/node"}}}, "required": ["kids"]}}}}}])";

ToolCallRequirement requirement(ToolFormat format, const std::string& choice, bool parallel) {
  Json body = {{"tools", Json::parse(kTools)}, {"parallel_tool_calls", parallel}};
  body["tool_choice"] = choice == "required"
                            ? Json("required")
                            : Json{{"type", "function"}, {"function", {{"name", choice}}}};
  return tool_call_requirement(parse_tool_request(body), format);
}

std::shared_ptr<const grammar::Grammar> compile(const ToolCallRequirement& r) {
  GenerationRequest request;
  GrammarToolCallConstraint(nullptr).apply(r, request);
  EXPECT_NE(request.grammar, nullptr);
  return request.grammar;
}

// What the parser reads back from a whole answer.
std::vector<ParsedToolCall> parse(ToolFormat format, const std::string& text) {
  ToolCallParser p(format, {"get_weather", "now", "tree"});
  ToolParseDelta d = p.feed(text), end = p.finish();
  EXPECT_EQ(d.content + end.content, "");
  d.calls.insert(d.calls.end(), end.calls.begin(), end.calls.end());
  return d.calls;
}

const std::string kWeather = R"({"name":"get_weather","arguments":{"city":"Paris","days":2}})";
const std::string kNow = R"({"name":"now","arguments":{}})";
const std::string kTree =
    R"({"name":"tree","arguments":{"root":{"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]}}})";

TEST(ToolGrammar, HermesCallsValidAgainstTheirTool) {
  const auto one = compile(requirement(ToolFormat::kHermes, "required", false));
  const auto many = compile(requirement(ToolFormat::kHermes, "required", true));
  const std::string call = "<tool_call>\n" + kWeather + "\n</tool_call>";
  const std::string two = call + "\n<tool_call>\n" + kNow + "\n</tool_call>";
  EXPECT_TRUE(one->matches(call));
  EXPECT_TRUE(one->matches("<tool_call>\n" + kTree + "\n</tool_call>"));  // $ref rebased
  // ... also inside a property named like a keyword
  EXPECT_TRUE(one->matches(
      R"(<tool_call>
{"name":"tree","arguments":{"root":{"kids":[]},"default":{"kids":[{"kids":[]}]}}}
</tool_call>)"));
  EXPECT_FALSE(one->matches(two));  // parallel_tool_calls false: one call
  EXPECT_TRUE(many->matches(two));
  ASSERT_EQ(parse(ToolFormat::kHermes, two).size(), 2u);
  EXPECT_EQ(parse(ToolFormat::kHermes, two)[1].name, "now");
  for (const std::string bad : {
           R"({"name":"get_weather","arguments":{"days":2}})",             // city required
           R"({"name":"get_weather","arguments":{"city":"P","days":0}})",  // minimum 1
           R"({"name":"get_weather","arguments":{"city":"P","x":1}})",     // no such argument
           R"({"name":"now","arguments":{"a":1}})",                        // no parameters
           R"({"name":"nope","arguments":{}})",                            // not a tool
           R"({"arguments":{},"name":"now"})",                             // name first
       }) {
    EXPECT_FALSE(many->matches("<tool_call>\n" + bad + "\n</tool_call>")) << bad;
  }
  EXPECT_FALSE(many->matches(kNow));  // the tags are required
  EXPECT_FALSE(many->matches(""));
}

TEST(ToolGrammar, NamedFunctionAllowsOnlyIt) {
  const auto g = compile(requirement(ToolFormat::kHermes, "now", true));
  EXPECT_TRUE(g->matches("<tool_call>\n" + kNow + "\n</tool_call>"));
  EXPECT_FALSE(g->matches("<tool_call>\n" + kWeather + "\n</tool_call>"));
  // A named function is called once, parallel_tool_calls or not.
  EXPECT_FALSE(g->matches("<tool_call>\n" + kNow + "\n</tool_call>\n<tool_call>\n" + kNow +
                          "\n</tool_call>"));
}

TEST(ToolGrammar, MistralListAndLlama3Object) {
  const auto mistral = compile(requirement(ToolFormat::kMistral, "required", true));
  const std::string list = "[TOOL_CALLS][" + kWeather + "," + kNow + "]";
  EXPECT_TRUE(mistral->matches(list));
  EXPECT_TRUE(mistral->matches("[TOOL_CALLS][" + kNow + "]"));
  EXPECT_FALSE(mistral->matches("[TOOL_CALLS][]"));
  ASSERT_EQ(parse(ToolFormat::kMistral, list).size(), 2u);

  const auto llama = compile(requirement(ToolFormat::kLlama3, "get_weather", true));
  const std::string call = R"({"name":"get_weather","parameters":{"city":"Oslo"}})";
  EXPECT_TRUE(llama->matches(call));
  EXPECT_FALSE(llama->matches(kWeather));  // Llama 3 says "parameters"
  ASSERT_EQ(parse(ToolFormat::kLlama3, call).size(), 1u);
  EXPECT_EQ(parse(ToolFormat::kLlama3, call)[0].arguments, R"({"city":"Oslo"})");
}

// The 400s: a format without JSON calls, a structured output beside the
// requirement, and parameters the grammar engine refuses (naming the tool).
TEST(ToolGrammar, RefusalsNameTheField) {
  const auto param_of = [](const ToolCallRequirement& r, bool with_grammar) {
    GenerationRequest request;
    if (with_grammar) request.grammar = grammar::Grammar::json_object();
    try {
      GrammarToolCallConstraint(nullptr).apply(r, request);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param + ": " + e.what();
    }
    return std::string();
  };
  EXPECT_EQ(
      param_of(requirement(ToolFormat::kGemma, "required", true), false).rfind("tool_choice: ", 0),
      0u);
  EXPECT_EQ(
      param_of(requirement(ToolFormat::kHermes, "required", true), true).rfind("tool_choice: ", 0),
      0u);
  Json body = {{"tools", Json::parse(kTools)}, {"tool_choice", "required"}};
  body["tools"][1]["function"]["parameters"] = {{"type", "object"},
                                                {"patternProperties", Json::object()}};
  const std::string e =
      param_of(tool_call_requirement(parse_tool_request(body), ToolFormat::kHermes), false);
  EXPECT_EQ(e.rfind("tools: ", 0), 0u) << e;
  EXPECT_NE(e.find("'now'"), std::string::npos) << e;
  EXPECT_NE(e.find("patternProperties"), std::string::npos) << e;
}

}  // namespace
}  // namespace hubzoo::server
