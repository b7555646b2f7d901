#include "server/tool_parser.h"

#include <gtest/gtest.h>

#include <random>

namespace hubzoo::server {
namespace {

struct Result {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

const std::vector<std::string> kNames = {"get_weather", "get_time"};

// Feeds `text` in pieces of `chunk` bytes (0: at once) and gathers the output.
Result run(ToolFormat f, std::string_view text, size_t chunk = 0) {
  ToolCallParser p(f, kNames);
  Result r;
  auto take = [&](ToolParseDelta d) {
    r.content += d.content;
    for (auto& c : d.calls) r.calls.push_back(std::move(c));
  };
  if (chunk == 0) chunk = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += chunk) take(p.feed(text.substr(i, chunk)));
  take(p.finish());
  return r;
}

// The same result whatever the chunking (byte by byte, 3 bytes, whole).
Result run_all_chunkings(ToolFormat f, std::string_view text) {
  const Result whole = run(f, text);
  for (size_t chunk : {1, 2, 3, 7}) {
    const Result r = run(f, text, chunk);
    EXPECT_EQ(r.content, whole.content) << "chunk " << chunk;
    EXPECT_EQ(r.calls.size(), whole.calls.size()) << "chunk " << chunk;
    for (size_t i = 0; i < std::min(r.calls.size(), whole.calls.size()); ++i) {
      EXPECT_EQ(r.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(r.calls[i].arguments, whole.calls[i].arguments);
    }
  }
  return whole;
}

TEST(ToolParser, HermesCallsAndContent) {
  const Result r = run_all_chunkings(
      ToolFormat::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": "
      "{}}\n</tool_call>");
  EXPECT_EQ(r.content, "Let me look.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\",\"days\":[1,2]}");
  EXPECT_EQ(r.calls[1].name, "time");
  EXPECT_EQ(r.calls[1].arguments, "{}");
}

TEST(ToolParser, HermesUntaggedCalls) {
  // Qwen2.5-Coder-0.5B-Instruct's answers (greedy, python/tests/test_tools.py): the
  // call without its tags, bare or in a ```json fence.
  Result r = run_all_chunkings(ToolFormat::kHermes,
                               "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(r.content, "");
  r = run_all_chunkings(ToolFormat::kHermes,
                        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    "
                        "\"city\": \"Paris\"\n  }\n}\n```\n{\"name\": \"get_time\", "
                        "\"arguments\": {}}\nDone.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.content, "Done.");
  // Not calls: an unknown name, no "arguments", JSON after prose, another fence language.
  for (const char* text :
       {"{\"name\": \"Bob\", \"arguments\": {}}", "{\"name\": \"get_time\"}",
        "Here: {\"name\": \"get_time\", \"arguments\": {}}",
        "```python\n{\"name\": \"get_time\", \"arguments\": {}}\n```", "```json\n[1, 2]\n```",
        "`code` and {\"name\": \"get_time\", \"arguments\": {}}"}) {
    r = run_all_chunkings(ToolFormat::kHermes, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
  // A tagged call still follows an untagged attempt that failed.
  r = run_all_chunkings(ToolFormat::kHermes,
                        "{\"a\": 1} <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "{\"a\": 1}");
}

TEST(ToolParser, HermesStringArgumentsAndUnterminatedCall) {
  // Arguments as a JSON string holding an object; the output ends before </tool_call>.
  const Result r = run_all_chunkings(
      ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"x\":1}");
}

TEST(ToolParser, TextThatIsNoCallIsContent) {
  // Invalid JSON, a missing name, non-object arguments, an unterminated call
  // that is not whole JSON, a lone '<': all content, byte for byte.
  for (const char* text :
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call> ok",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"argu", "a < b and <tool_ c",
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>"}) {
    const Result r = run_all_chunkings(ToolFormat::kHermes, text);
    EXPECT_EQ(r.content, text);
    EXPECT_TRUE(r.calls.empty()) << text;
  }
}

TEST(ToolParser, BadCallBetweenGoodOnesStaysInPlace) {
  const Result r = run_all_chunkings(
      ToolFormat::kHermes,
      "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>oops</tool_call><tool_call>{\"name\": "
      "\"b\", \"arguments\": {\"k\": \"</tool_call>\"}}</tool_call>");
  // The string "</tool_call>" inside b's arguments ends the region early: b
  // is not a call, and its text is content.
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "a");
  EXPECT_EQ(r.content,
            "<tool_call>oops</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {\"k\": "
            "\"</tool_call>\"}}</tool_call>");
}

TEST(ToolParser, WhitespaceIsKeptWithoutCalls) {
  const std::string text = "\n  Hello,\n world  \n\n";
  EXPECT_EQ(run_all_chunkings(ToolFormat::kHermes, text).content, text);
  EXPECT_EQ(run_all_chunkings(ToolFormat::kLlama3, text).content, text);
}

TEST(ToolParser, ContentIsReleasedBeforeTheOutputEnds) {
  ToolCallParser p(ToolFormat::kHermes);
  EXPECT_EQ(p.feed("Hello wor").content, "Hello wor");
  EXPECT_EQ(p.feed("ld <tool").content,
            "ld");  // " " waits (it goes if a call follows), "<tool" may open one
  const ToolParseDelta d = p.feed("_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(p.finish().content, "");
}

TEST(ToolParser, Llama3Json) {
  Result r = run_all_chunkings(
      ToolFormat::kLlama3,
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(r.content, "");
  r = run_all_chunkings(ToolFormat::kLlama3,
                        " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": "
                        "{\"s\": \"}{\"}}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.calls[1].arguments, "{\"s\":\"}{\"}");
  // JSON that is no call, and JSON after prose, are content.
  for (const char* text : {"{\"answer\": 42}", "The call is {\"name\": \"a\", \"parameters\": {}}",
                           "<|python_tag|>brave_search.call(query=\"x\")", "{\"name\": \"a\""}) {
    r = run_all_chunkings(ToolFormat::kLlama3, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolParser, MistralBothForms) {
  Result r = run_all_chunkings(
      ToolFormat::kMistral,
      "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abc123def\"}, "
      "{\"name\": \"b\", \"arguments\": {}}]");
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, "{\"x\":1}");
  r = run_all_chunkings(ToolFormat::kMistral,
                        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]time[CALL_ID]"
                        "a1b2c3d4e[ARGS]{}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Rome\"}");
  EXPECT_EQ(r.calls[1].name, "time");
  for (const char* text : {"[TOOL_CALLS] [1, 2]", "[TOOL_CALLS] {\"name\": \"a\"}",
                           "[TOOL_CALLS]bad name[ARGS]{}", "[TOOL_CALLS] [{\"name\": \"a\""}) {
    r = run_all_chunkings(ToolFormat::kMistral, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolParser, FunctionGemma) {
  const Result r = run_all_chunkings(
      ToolFormat::kGemma,
      "<start_function_call>call:get_weather{city:<escape>Paris, \"FR\"<escape>,days:3,"
      "metric:true,tags:[<escape>a<escape>,2],opts:{deep:null}}<end_function_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments,
            "{\"city\":\"Paris, \\\"FR\\\"\",\"days\":3,\"metric\":true,\"tags\":[\"a\",2],"
            "\"opts\":{\"deep\":null}}");
  for (const char* text : {"<start_function_call>call:f{a:<escape>x}<end_function_call>",
                           "<start_function_call>f{}<end_function_call>",
                           "<start_function_call>call:f{a:1} extra<end_function_call>"}) {
    const Result bad = run_all_chunkings(ToolFormat::kGemma, text);
    EXPECT_TRUE(bad.calls.empty()) << text;
    EXPECT_EQ(bad.content, text);
  }
}

TEST(ToolParser, DeepNestingIsRefusedNotRecursed) {
  // Arguments nested far past kMaxToolJsonDepth: content, no crash.
  std::string deep_json = "<tool_call>{\"name\": \"f\", \"arguments\": ";
  std::string deep_gemma = "<start_function_call>call:f";
  for (int i = 0; i < 100000; ++i) deep_json += "[", deep_gemma += "{a:";
  const Result r = run(ToolFormat::kHermes, deep_json);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, deep_json);
  EXPECT_TRUE(run(ToolFormat::kGemma, deep_gemma).calls.empty());
}

TEST(ToolParser, OversizedCallIsContent) {
  std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"";
  text += std::string(kMaxToolCallBytes, 'x');
  text += "\"}}</tool_call>";
  const Result r = run(ToolFormat::kHermes, text, 4096);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
}

TEST(ToolParser, RandomBytesNeverCrashAndAreNeverLost) {
  // Output made of marker pieces and JSON punctuation: whatever is not a call
  // comes back; the total length is conserved up to dropped whitespace.
  const std::vector<std::string> pieces = {
      "<tool_call>",
      "</tool_call>",
      "{",
      "}",
      "[",
      "]",
      "\"",
      "\\",
      ":",
      ",",
      "name",
      "\"name\"",
      "arguments",
      " ",
      "\n",
      "[TOOL_CALLS]",
      "[ARGS]",
      "<|python_tag|>",
      "<escape>",
      "call:",
      "<start_function_call>",
      "<end_function_call>",
      "x",
      ";",
      "```",
      "json\n",
      "get_time",  // clang-format: one line per few pieces
  };
  std::mt19937 rng(7);
  for (ToolFormat f :
       {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral, ToolFormat::kGemma}) {
    for (int round = 0; round < 300; ++round) {
      std::string text;
      const int n = static_cast<int>(rng() % 40);
      for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
      const Result r = run(f, text, 1 + rng() % 5);
      if (r.calls.empty()) {
        EXPECT_EQ(r.content, text) << tool_format_name(f) << ": " << text;
      }
    }
  }
}

TEST(ToolParser, DetectionAndNames) {
  EXPECT_EQ(detect_tool_format("{{- '<tool_call>\\n' }}"), ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format("{{ '[TOOL_CALLS] [' }}"), ToolFormat::kMistral);
  EXPECT_EQ(detect_tool_format("<start_function_call>call:"), ToolFormat::kGemma);
  EXPECT_EQ(detect_tool_format("<|start_header_id|> {\"name\": function name, \"parameters\": "),
            ToolFormat::kLlama3);
  EXPECT_EQ(detect_tool_format("{{ '<|python_tag|>' }}"), ToolFormat::kLlama3);
  EXPECT_EQ(detect_tool_format("<|im_start|>{{ message.content }}"), ToolFormat::kNone);
  EXPECT_EQ(tool_format_from_name("qwen"), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_from_name("smollm3"), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_from_name("none"), ToolFormat::kNone);
  EXPECT_FALSE(tool_format_from_name("auto"));
  EXPECT_FALSE(tool_format_from_name("pythonic"));
  EXPECT_STREQ(tool_format_name(ToolFormat::kMistral), "mistral");
}

}  // namespace
}  // namespace hubzoo::server
