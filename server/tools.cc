#include "server/tools.h"

#include <set>

#include "base/error.h"
#include "io/json.h"

namespace hubzoo::server {
namespace {

ApiError field_error(const std::string& param, const std::string& what) {
  return bad_request("'" + param + "' " + what + ".", param);
}

// OpenAI's rule for function names: a-z, A-Z, 0-9, '_' and '-', at most 64.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Checks one entry of `tools`; returns its function name.
std::string check_tool(const Json& tool, size_t i) {
  const std::string at = "tools[" + std::to_string(i) + "]";
  if (!tool.is_object()) throw field_error(at, "must be an object");
  auto type = tool.find("type");
  if (type == tool.end() || *type != "function") {
    throw field_error(at + ".type", "must be \"function\"");
  }
  auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object())
    throw field_error(at + ".function", "must be an object");
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || !valid_function_name(name->get<std::string>())) {
    throw field_error(at + ".function.name",
                      "must be a string of 1 to 64 characters a-z, A-Z, 0-9, '_' or '-'");
  }
  for (const char* key : {"description"}) {
    if (auto v = fn->find(key); v != fn->end() && !v->is_null() && !v->is_string()) {
      throw field_error(at + ".function." + key, "must be a string");
    }
  }
  if (auto v = fn->find("parameters"); v != fn->end() && !v->is_null() && !v->is_object()) {
    throw field_error(at + ".function.parameters", "must be a JSON schema object");
  }
  if (auto v = fn->find("strict"); v != fn->end() && !v->is_null() && !v->is_boolean()) {
    throw field_error(at + ".function.strict", "must be a boolean");
  }
  return name->get<std::string>();
}

ToolChoice parse_choice(const Json& body, const std::set<std::string>& names, bool has_tools) {
  ToolChoice c;
  c.mode = has_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return c;
  const char* shape =
      "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
      "{\"name\": ...}}";
  if (it->is_string()) {
    const std::string s = it->get<std::string>();
    if (s == "none") {
      c.mode = ToolChoice::Mode::kNone;
    } else if (s == "auto") {
      c.mode = has_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    } else if (s == "required") {
      c.mode = ToolChoice::Mode::kRequired;
    } else {
      throw field_error("tool_choice", shape);
    }
  } else if (it->is_object()) {
    auto fn = it->find("function");
    if (it->value("type", "") != "function" || fn == it->end() || !fn->is_object() ||
        !fn->contains("name") || !(*fn)["name"].is_string()) {
      throw field_error("tool_choice", shape);
    }
    c.mode = ToolChoice::Mode::kFunction;
    c.function = (*fn)["name"].get<std::string>();
    if (has_tools && !names.count(c.function)) {
      throw field_error("tool_choice", "names the function '" + c.function.substr(0, 64) +
                                           "', which is not in 'tools'");
    }
  } else {
    throw field_error("tool_choice", shape);
  }
  if (!has_tools && c.mode != ToolChoice::Mode::kNone) {
    throw field_error("tool_choice", "needs 'tools': only \"none\" and \"auto\" go without them");
  }
  return c;
}

}  // namespace

ToolRequest parse_tool_request(const Json& body) {
  ToolRequest t;
  std::set<std::string> names;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) throw field_error("tools", "must be an array of tools");
    if (tools->size() > kMaxTools) {
      throw field_error("tools", "may hold at most " + std::to_string(kMaxTools) + " tools, got " +
                                     std::to_string(tools->size()));
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string name = check_tool((*tools)[i], i);
      if (!names.insert(name).second) {
        throw field_error("tools[" + std::to_string(i) + "].function.name",
                          "repeats the name '" + name + "'");
      }
    }
    t.tools = *tools;
  }
  const bool has_tools = !names.empty();
  t.choice = parse_choice(body, names, has_tools);
  t.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  return t;
}

namespace {

// A call's arguments as the template wants them: an object. On the wire they
// are a JSON string; an object is taken as it is; absent, null or "" is {}.
Json arguments_object(const Json& args, const std::string& at) {
  if (args.is_null()) return Json::object();
  if (args.is_object()) return args;
  if (!args.is_string()) throw field_error(at, "must be a JSON string holding an object");
  const std::string text = args.get<std::string>();
  if (text.empty()) return Json::object();
  Json parsed;
  try {
    parsed = parse_ordered_json(text, at, kRequestJsonLimits);
  } catch (const FormatError& e) {
    throw field_error(at, std::string("is not valid JSON: ") + e.what());
  }
  if (!parsed.is_object()) throw field_error(at, "must hold a JSON object");
  return parsed;
}

}  // namespace

Json prepare_tool_message(const Json& message, size_t index) {
  const std::string at = "messages[" + std::to_string(index) + "]";
  const std::string role = message.value("role", "");
  if (role == "tool") {
    auto id = message.find("tool_call_id");
    if (id == message.end() || !id->is_string()) {
      throw field_error(at + ".tool_call_id", "must be a string: a tool message answers a call");
    }
    return message;
  }
  auto calls = message.find("tool_calls");
  if (role != "assistant" || calls == message.end() || calls->is_null()) return message;
  if (!calls->is_array()) throw field_error(at + ".tool_calls", "must be an array");
  if (calls->size() > kMaxTools) {
    throw field_error(at + ".tool_calls",
                      "may hold at most " + std::to_string(kMaxTools) + " calls");
  }
  Json out = message;
  if (calls->empty()) {  // as vLLM: the template takes the plain assistant path
    out.erase("tool_calls");
    return out;
  }
  for (size_t j = 0; j < calls->size(); ++j) {
    const std::string call_at = at + ".tool_calls[" + std::to_string(j) + "]";
    const Json& call = (*calls)[j];
    if (!call.is_object()) throw field_error(call_at, "must be an object");
    if (auto type = call.find("type"); type != call.end() && *type != "function") {
      throw field_error(call_at + ".type", "must be \"function\"");
    }
    if (auto id = call.find("id"); id != call.end() && !id->is_null() && !id->is_string()) {
      throw field_error(call_at + ".id", "must be a string");
    }
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object())
      throw field_error(call_at + ".function", "must be an object");
    if (!fn->contains("name") || !(*fn)["name"].is_string()) {
      throw field_error(call_at + ".function.name", "must be a string");
    }
    Json& target = out["tool_calls"][j]["function"];
    target["arguments"] =
        arguments_object(fn->value("arguments", Json()), call_at + ".function.arguments");
  }
  return out;
}

ToolCallRequirement tool_call_requirement(const ToolRequest& t, ToolFormat format) {
  ToolCallRequirement r;
  r.format = format;
  r.syntax = tool_call_syntax(format);
  r.parallel = t.parallel_tool_calls && t.choice.mode == ToolChoice::Mode::kRequired;
  r.tools = Json::array();
  for (const auto& tool : t.tools) {
    if (t.choice.mode != ToolChoice::Mode::kFunction ||
        tool["function"]["name"] == t.choice.function) {
      r.tools.push_back(tool);
    }
  }
  return r;
}

Json tool_calls_json(const std::vector<ParsedToolCall>& calls,
                     const std::function<std::string()>& new_id) {
  Json out = Json::array();
  for (const auto& c : calls) {
    out.push_back({{"id", new_id()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

std::vector<Json> tool_call_deltas(const ParsedToolCall& call, size_t index,
                                   const std::string& id) {
  Json first = {{"index", index},
                {"id", id},
                {"type", "function"},
                {"function", {{"name", call.name}, {"arguments", ""}}}};
  Json rest = {{"index", index}, {"function", {{"arguments", call.arguments}}}};
  return {Json{{"tool_calls", Json::array({first})}}, Json{{"tool_calls", Json::array({rest})}}};
}

std::string tool_call_id(ToolFormat format, const std::string& random_hex) {
  if (format == ToolFormat::kMistral) return random_hex.substr(0, 9);
  return "call_" + random_hex.substr(0, 24);
}

}  // namespace hubzoo::server
