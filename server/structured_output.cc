#include "server/structured_output.h"

namespace hubzoo::server {

namespace {

using grammar::ConstraintSpec;

// A schema given as an object or as JSON text (vLLM accepts both).
std::string schema_text(const Json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() || v.is_boolean()) return dump(v);
  throw bad_request("'" + param + "' must be a JSON schema (an object).", param);
}

std::vector<std::string> choices(const Json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) {
    throw bad_request("'" + param + "' must be a non-empty array of strings.", param);
  }
  std::vector<std::string> out;
  for (const Json& c : v) {
    if (!c.is_string()) throw bad_request("'" + param + "' must hold strings.", param);
    out.push_back(c.get<std::string>());
  }
  return out;
}

ConstraintSpec response_format(const Json& f) {
  ConstraintSpec spec;
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
    throw bad_request("'response_format' must be an object with a string 'type'.",
                      "response_format");
  }
  const std::string type = f["type"].get<std::string>();
  if (type == "text") return spec;
  if (type == "json_object") {
    spec.kind = ConstraintSpec::Kind::kJsonObject;
    return spec;
  }
  if (type != "json_schema") {
    throw bad_request("response_format type '" + type.substr(0, 64) +
                          "' is not supported (text, json_object, json_schema).",
                      "response_format.type");
  }
  auto js = f.find("json_schema");
  if (js == f.end() || !js->is_object()) {
    throw bad_request("'response_format.json_schema' must be an object.",
                      "response_format.json_schema");
  }
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    throw bad_request("'response_format.json_schema.schema' is required.",
                      "response_format.json_schema.schema");
  }
  if (auto strict = js->find("strict");
      strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
    throw bad_request("'response_format.json_schema.strict' must be a boolean.",
                      "response_format.json_schema.strict");
  }
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.text = schema_text(*schema, "response_format.json_schema.schema");
  return spec;
}

// vLLM's structured_outputs object.
ConstraintSpec vllm_structured_outputs(const Json& so, std::vector<std::string>& given) {
  if (!so.is_object()) {
    throw bad_request("'structured_outputs' must be an object.", "structured_outputs");
  }
  ConstraintSpec spec;
  for (auto it = so.begin(); it != so.end(); ++it) {
    const std::string& key = it.key();
    const std::string param = "structured_outputs." + key;
    if (it->is_null()) continue;
    if (key == "json") {
      spec.kind = ConstraintSpec::Kind::kJsonSchema;
      spec.text = schema_text(*it, param);
    } else if (key == "regex") {
      if (!it->is_string()) throw bad_request("'" + param + "' must be a string.", param);
      spec.kind = ConstraintSpec::Kind::kRegex;
      spec.text = it->get<std::string>();
    } else if (key == "choice") {
      spec.kind = ConstraintSpec::Kind::kChoice;
      spec.choices = choices(*it, param);
    } else if (key == "json_object") {
      if (!it->is_boolean()) throw bad_request("'" + param + "' must be a boolean.", param);
      if (!it->get<bool>()) continue;
      spec.kind = ConstraintSpec::Kind::kJsonObject;
    } else if (key == "disable_any_whitespace" || key == "disable_fallback" ||
               key == "disable_additional_properties") {
      continue;  // hubzoo's output is compact and its engine has no fallback
    } else {
      throw bad_request("'" + param + "' is not supported (json, regex, choice, json_object).",
                        param);
    }
    given.push_back(param);
  }
  return spec;
}

}  // namespace

ConstraintSpec structured_output_spec(const Json& body) {
  std::vector<std::string> given;  // the fields that set a constraint
  ConstraintSpec spec;
  auto take = [&](ConstraintSpec s, const std::string& param) {
    if (s.kind == ConstraintSpec::Kind::kNone) return;
    given.push_back(param);
    spec = std::move(s);
  };
  if (auto f = body.find("response_format"); f != body.end() && !f->is_null()) {
    take(response_format(*f), "response_format");
  }
  if (auto so = body.find("structured_outputs"); so != body.end() && !so->is_null()) {
    std::vector<std::string> inner;
    ConstraintSpec s = vllm_structured_outputs(*so, inner);
    if (inner.size() > 1) {
      throw bad_request("'structured_outputs' sets more than one constraint.", inner[1]);
    }
    take(std::move(s), "structured_outputs");
  }
  if (auto v = body.find("guided_json"); v != body.end() && !v->is_null()) {
    take({ConstraintSpec::Kind::kJsonSchema, schema_text(*v, "guided_json"), {}}, "guided_json");
  }
  if (auto v = body.find("guided_regex"); v != body.end() && !v->is_null()) {
    if (!v->is_string()) throw bad_request("'guided_regex' must be a string.", "guided_regex");
    take({ConstraintSpec::Kind::kRegex, v->get<std::string>(), {}}, "guided_regex");
  }
  if (auto v = body.find("guided_choice"); v != body.end() && !v->is_null()) {
    take({ConstraintSpec::Kind::kChoice, "", choices(*v, "guided_choice")}, "guided_choice");
  }
  for (const char* unsupported : {"guided_grammar", "guided_decoding_backend"}) {
    if (auto v = body.find(unsupported); v != body.end() && !v->is_null()) {
      throw bad_request(std::string("'") + unsupported + "' is not supported.", unsupported);
    }
  }
  if (given.size() > 1) {
    throw bad_request("Only one of response_format, structured_outputs and guided_* may be set.",
                      given[1]);
  }
  return spec;
}

std::shared_ptr<const grammar::Grammar> structured_output(const Json& body) {
  const ConstraintSpec spec = structured_output_spec(body);
  if (spec.kind == ConstraintSpec::Kind::kNone) return nullptr;
  std::string param = "response_format";
  if (body.contains("structured_outputs")) param = "structured_outputs";
  for (const char* p : {"guided_json", "guided_regex", "guided_choice"}) {
    if (body.contains(p) && !body[p].is_null()) param = p;
  }
  try {
    return grammar::Grammar::from_spec(spec);
  } catch (const grammar::GrammarError& e) {
    throw bad_request(e.what(), param);
  }
}

}  // namespace hubzoo::server
