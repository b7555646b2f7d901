// OpenAI tool calling on /v1/chat/completions, the request and response side:
// `tools`, `tool_choice` and `parallel_tool_calls` checked (a 400 naming the
// field), conversations carrying tool calls made ready for the chat template,
// and parsed calls (server/tool_parser.h) written as OpenAI returns them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "server/openai_json.h"
#include "server/tool_parser.h"

namespace hubzoo::server {

// tool_choice. Absent: kAuto with tools, kNone without (OpenAI's defaults).
struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kFunction };
  Mode mode = Mode::kNone;
  std::string function;  // kFunction: its name
};

struct ToolRequest {
  Json tools;  // the request's tools (null: none)
  ToolChoice choice;
  bool parallel_tool_calls = true;
  // Whether the answer is parsed for calls. tool_choice none renders the
  // tools (as vLLM does by default) but never parses a call.
  bool parse_calls() const { return choice.mode != ToolChoice::Mode::kNone; }
};

// Reads and checks tools (each {"type": "function", "function": {"name",
// "description"?, "parameters"?, "strict"?}}, names as OpenAI allows them and
// distinct), tool_choice (a mode, or {"type": "function", "function":
// {"name"}} naming one of the tools) and parallel_tool_calls.
ToolRequest parse_tool_request(const Json& body);

// A chat message ready for the template, as vLLM prepares it: an assistant
// message's tool_calls checked (ids strings, type "function", names strings)
// and their `arguments` (a JSON string on the wire) parsed into objects, as
// transformers' templates expect; an empty tool_calls list dropped; a tool
// message's tool_call_id required. `index` names the message in errors.
Json prepare_tool_message(const Json& message, size_t index);

// What tool_choice 'required' or a named function asks of the answer: a
// call (to `function` when set) in `syntax`, its arguments valid against the
// tool's `parameters`. A ToolCallConstraint turns it into a sampling
// constraint; without one, the answer is whatever the model writes (parsed as
// under 'auto').
struct ToolCallRequirement {
  ToolFormat format = ToolFormat::kNone;
  ToolCallSyntax syntax;
  Json tools;            // the candidates: all tools, or the named one
  bool parallel = true;  // more than one call allowed
};

class ToolCallConstraint {
 public:
  virtual ~ToolCallConstraint() = default;
  // Restricts `request`'s sampling so that its text satisfies `r`. Throws
  // ApiError (400) naming the tool whose schema it cannot enforce.
  virtual void apply(const ToolCallRequirement& r, GenerationRequest& request) const = 0;
};

// The requirement of a request whose tool_choice is required or a function.
ToolCallRequirement tool_call_requirement(const ToolRequest& t, ToolFormat format);

// message.tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments"}}], ids from `new_id`.
Json tool_calls_json(const std::vector<ParsedToolCall>& calls,
                     const std::function<std::string()>& new_id);

// A streamed call as OpenAI streams it: the first delta with index, id, type,
// name and empty arguments, the next appending the arguments' text.
std::vector<Json> tool_call_deltas(const ParsedToolCall& call, size_t index, const std::string& id);

// A call id in `format`'s convention: Mistral's templates require 9
// alphanumeric characters; the others take OpenAI's "call_" + 24.
std::string tool_call_id(ToolFormat format, const std::string& random_hex);

}  // namespace hubzoo::server
