// Tool calls in a model's output text, for the formats of the families hubzoo
// serves: Hermes/Qwen2.5/Qwen3/SmolLM3 `<tool_call>{json}</tool_call>`, Llama
// 3.x JSON (`{"name": .., "parameters": ..}`, optionally after
// `<|python_tag|>`), Mistral `[TOOL_CALLS][{..}, ..]` (and the v11 form
// `[TOOL_CALLS]name[ARGS]{..}`), and FunctionGemma
// `<start_function_call>call:name{key:<escape>text<escape>,n:1}<end_function_call>`.
//
// Small Qwen models (Qwen2.5-Coder 0.5B to 3B) leave the `<tool_call>` tags
// out: in the Hermes format an answer that starts with a bare JSON call object,
// or with one in a ```json fence, is a call too, as llama.cpp reads it, when
// the object has "name" and "arguments" and names one of the request's tools.
//
// The parser is fed the output as it streams. It releases content as soon as
// it cannot be the start of a call, and a call only when the call is whole and
// valid (name a non-empty string, arguments a JSON object); text that does not
// parse as a call is released as content, never dropped. The one exception:
// whitespace next to a call (before or after it) is dropped, as the templates
// put it there. Model output is untrusted: every buffer is bounded
// (kMaxToolCallBytes, kMaxToolCalls) and nothing recurses on its structure
// beyond kMaxToolJsonDepth.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hubzoo::server {

enum class ToolFormat { kNone, kHermes, kLlama3, kMistral, kGemma };

// "none", "hermes", "llama3", "mistral", "gemma".
const char* tool_format_name(ToolFormat f);
// The format a --tool-parser name selects ("qwen" and "smollm3" are Hermes);
// nullopt for an unknown name. "auto" is not a format (the caller detects).
std::optional<ToolFormat> tool_format_from_name(std::string_view name);
// The names --tool-parser accepts, for help and error text.
const char* tool_format_names();

// The format a chat template's source implies by the markers it writes (the
// calls of past assistant turns and the instructions to the model); kNone
// when it writes none of them.
ToolFormat detect_tool_format(std::string_view template_source);

// What a call looks like in a format: what a constrained decoder (the grammar
// engine) has to make the model write, and what the parser reads.
struct ToolCallSyntax {
  std::string begin;           // opens a call (or the list of calls)
  std::string end;             // closes it; empty: the JSON value's end closes it
  bool json_list = false;      // Mistral: one JSON array of call objects
  std::string name_key;        // JSON call objects: {"<name_key>": name, "<args_key>": {..}}
  std::string args_key;        // empty for Gemma (not JSON)
  bool only_at_start = false;  // Llama 3: a call is the whole answer, no content before it
};
ToolCallSyntax tool_call_syntax(ToolFormat f);

inline constexpr size_t kMaxToolCallBytes = size_t{256} << 10;  // one call's text
inline constexpr size_t kMaxToolCalls = 128;                    // calls in one answer
inline constexpr size_t kMaxToolJsonDepth = 64;                 // nesting of arguments

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text (compact)
};

// What one feed() or finish() released. Clients gather content and calls
// apart, so the order of content and calls inside one delta is not kept.
struct ToolParseDelta {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

class ToolCallParser {
 public:
  // `tool_names`: the request's tools, which an untagged Hermes call must name.
  explicit ToolCallParser(ToolFormat format, std::vector<std::string> tool_names = {});
  // Text the model produced since the last call.
  ToolParseDelta feed(std::string_view text);
  // The output ended: what is held back is released (an unterminated call that
  // is whole JSON is a call; anything else is content).
  ToolParseDelta finish();
  // Calls released so far.
  size_t call_count() const { return calls_; }

 private:
  enum class State { kText, kCall, kPassThrough };
  void step(ToolParseDelta& out, bool at_end);
  bool step_text(ToolParseDelta& out, bool at_end);
  bool step_call(ToolParseDelta& out, bool at_end);
  // Where the call region that starts at pending_[0] ends (one past it), or
  // npos while incomplete.
  size_t region_end(bool at_end);
  size_t untagged_end(bool at_end);  // region_end of an untagged Hermes call
  void emit_content(ToolParseDelta& out, std::string_view text);
  void fail_region(ToolParseDelta& out, size_t length);

  // The end of a JSON value, scanned incrementally (no recursion): nesting
  // depth, string state and how far the text was read.
  struct JsonScan {
    size_t start = std::string::npos;  // where the value may begin (npos: not known yet)
    size_t pos = 0, depth = 0;
    size_t found = std::string::npos;  // the end, once seen
    bool begun = false, in_string = false, escape = false;
    // One past the value's end, or npos while it is incomplete; `bad` when
    // the text at `start` cannot begin an object or array.
    size_t advance(std::string_view s, bool& bad);
  };

  ToolFormat format_;
  ToolCallSyntax syntax_;
  std::vector<std::string> tool_names_;
  JsonScan json_;
  bool bare_ = false;  // kCall: an untagged Hermes call (a JSON object, perhaps fenced)
  State state_ = State::kText;
  std::string pending_;  // text not yet released
  std::string held_ws_;  // released content's trailing whitespace, not yet sent
  size_t scan_ = 0;      // kCall: how far pending_ was searched for the end marker
  size_t calls_ = 0;
  bool after_call_ = false;  // a call was released and no content since
  bool seen_text_ = false;   // non-whitespace content was released (no untagged call after it)
};

// Parses one call region's text (begin marker included) into calls; nullopt
// when it is not a valid call in `format`. A Hermes region without its tag is
// an untagged call: `tool_names` (when not empty) must hold its name.
std::optional<std::vector<ParsedToolCall>> parse_tool_call_region(
    ToolFormat format, std::string_view region, const std::vector<std::string>& tool_names = {});

}  // namespace hubzoo::server
