#include "server/tool_grammar.h"

#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace hubzoo::server {
namespace {

using OJson = nlohmann::ordered_json;

// Local references ("#/...") in `schema` made relative to `base`, the JSON
// pointer where the schema now sits. Walked with an explicit stack. Values
// (const, enum, default, examples) are data, not schemas, and stay as
// written; under properties and $defs every key names a schema, whatever it is.
void rebase_refs(OJson& schema, const std::string& base) {
  struct Item {
    OJson* node;
    bool names_schemas;  // an object whose every value is a schema
  };
  std::vector<Item> stack{{&schema, false}};
  while (!stack.empty()) {
    const Item item = stack.back();
    stack.pop_back();
    OJson* s = item.node;
    if (s->is_array()) {
      for (auto& v : *s) stack.push_back({&v, false});
      continue;
    }
    if (!s->is_object()) continue;
    for (auto it = s->begin(); it != s->end(); ++it) {
      const std::string& key = it.key();
      if (item.names_schemas) {
        stack.push_back({&*it, false});
        continue;
      }
      if (key == "const" || key == "enum" || key == "default" || key == "examples") continue;
      if (key == "$ref" && it->is_string()) {
        const std::string target = it->get<std::string>();
        if (!target.empty() && target[0] == '#') *it = "#" + base + target.substr(1);
        continue;
      }
      const bool map = key == "properties" || key == "$defs" || key == "definitions" ||
                       key == "patternProperties" || key == "dependentSchemas";
      stack.push_back({&*it, map});
    }
  }
}

// A JSON pointer token (RFC 6901): "~" as "~0", "/" as "~1".
std::string pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

OJson call_schema(const OJson& tool, const ToolCallRequirement& r, const std::string& base) {
  const OJson& fn = tool["function"];
  // No parameters: an empty object (additional properties are refused unless allowed).
  OJson params = {{"type", "object"}};
  if (auto p = fn.find("parameters"); p != fn.end() && !p->is_null()) params = *p;
  rebase_refs(params, base + "/properties/" + pointer_token(r.syntax.args_key));
  OJson props = OJson::object();
  props[r.syntax.name_key] = {{"const", fn["name"]}};
  props[r.syntax.args_key] = std::move(params);
  return {{"type", "object"},
          {"properties", std::move(props)},
          {"required", {r.syntax.name_key, r.syntax.args_key}}};
}

}  // namespace

OJson tool_call_schema(const ToolCallRequirement& r) {
  OJson any = OJson::array();
  for (const auto& tool : r.tools) {
    any.push_back(call_schema(tool, r, "/anyOf/" + std::to_string(any.size())));
  }
  return {{"anyOf", std::move(any)}};
}

grammar::JsonFraming tool_call_framing(const ToolCallRequirement& r) {
  grammar::JsonFraming f;
  switch (r.format) {
    case ToolFormat::kHermes:
      f.item_prefix = r.syntax.begin + "\n";
      f.item_suffix = "\n" + r.syntax.end;
      f.separator = "\n";
      f.repeat = r.parallel;
      break;
    case ToolFormat::kMistral:
      f.open = r.syntax.begin + "[";
      f.separator = ",";
      f.close = "]";
      f.repeat = r.parallel;
      break;
    case ToolFormat::kLlama3:  // one call is the whole answer
    case ToolFormat::kGemma:
    case ToolFormat::kNone:
      break;
  }
  return f;
}

void GrammarToolCallConstraint::apply(const ToolCallRequirement& r,
                                      GenerationRequest& request) const {
  if (r.format != ToolFormat::kHermes && r.format != ToolFormat::kLlama3 &&
      r.format != ToolFormat::kMistral) {
    throw bad_request(std::string("'tool_choice' required or a named function is not enforced for "
                                  "the '") +
                          tool_format_name(r.format) + "' tool-call format; use 'auto'.",
                      "tool_choice");
  }
  if (request.grammar) {
    throw bad_request(
        "'tool_choice' required or a named function cannot be combined with a structured output "
        "(response_format, structured_outputs, guided_*).",
        "tool_choice");
  }
  try {
    request.grammar =
        grammar::Grammar::from_framed_json_schema(tool_call_schema(r), tool_call_framing(r));
  } catch (const grammar::GrammarError& e) {
    // Which tool: the first whose call alone does not compile.
    for (const auto& tool : r.tools) {
      ToolCallRequirement one = r;
      one.tools = OJson::array({tool});
      try {
        grammar::Grammar::from_json_schema(tool_call_schema(one));
      } catch (const grammar::GrammarError& alone) {
        throw bad_request("tool '" + tool["function"]["name"].get<std::string>() +
                              "': its parameters cannot be enforced: " + alone.what(),
                          "tools");
      }
    }
    throw bad_request(std::string("the tools' parameters cannot be enforced: ") + e.what(),
                      "tools");
  }
  request.grammar_vocabulary = vocabulary_;
}

}  // namespace hubzoo::server
