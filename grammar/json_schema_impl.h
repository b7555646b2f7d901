// The JSON Schema compiler's class, shared by json_schema.cc (structure,
// references, combinators) and json_schema_types.cc (strings, numbers,
// objects, arrays). Private to grammar/.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_set>

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace hubzoo::grammar::detail {

using Json = nlohmann::ordered_json;
using Ranges = std::vector<std::pair<char32_t, char32_t>>;

inline const std::unordered_set<std::string> kAnnotations = {
    "title",    "description", "default",  "examples",  "$schema", "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
inline const std::unordered_set<std::string> kSupported = {"type",
                                                           "properties",
                                                           "required",
                                                           "additionalProperties",
                                                           "items",
                                                           "minItems",
                                                           "maxItems",
                                                           "enum",
                                                           "const",
                                                           "anyOf",
                                                           "oneOf",
                                                           "allOf",
                                                           "$ref",
                                                           "minLength",
                                                           "maxLength",
                                                           "pattern",
                                                           "format",
                                                           "minimum",
                                                           "maximum",
                                                           "exclusiveMinimum",
                                                           "exclusiveMaximum",
                                                           "uniqueItems"};

inline constexpr double kIntClamp = 1e18;

class SchemaCompiler {
 public:
  SchemaCompiler(Automaton& a, const Json& root) : a_(a), root_(root) {}

  void compile() {
    const int32_t r = a_.new_rule("root");
    a_.set_body(r, schema(root_, "#", 0));
    a_.set_root(r);
  }

  // open + item (separator item)* + close, item = item_prefix + value +
  // item_suffix; one item only unless `framing.repeat`.
  void compile_framed(const JsonFraming& f) {
    const int32_t value = a_.new_rule("value");
    a_.set_body(value, schema(root_, "#", 0));
    const auto item = [&] {
      return a_.seq(a_.seq(a_.literal(f.item_prefix), a_.call(value)), a_.literal(f.item_suffix));
    };
    Frag body = a_.seq(a_.literal(f.open), item());
    if (f.repeat) body = a_.seq(body, a_.star(a_.seq(a_.literal(f.separator), item())));
    const int32_t r = a_.new_rule("root");
    a_.set_body(r, a_.seq(body, a_.literal(f.close)));
    a_.set_root(r);
  }

  void compile_any_object() {
    const int32_t r = a_.new_rule("root");
    a_.set_body(r, a_.call(object_any_rule()));
    a_.set_root(r);
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw GrammarError("json schema at " + path + ": " + what);
  }

  // Shared rules: a JSON string, number, integer, any value.
  int32_t string_rule() {
    if (string_rule_ < 0) {
      string_rule_ = a_.new_rule("string");
      a_.set_body(string_rule_,
                  a_.seq(a_.seq(a_.literal("\""), a_.star(json_char())), a_.literal("\"")));
    }
    return string_rule_;
  }
  // One decoded character of a JSON string: raw, or an escape (no lone surrogates).
  Frag json_char() {
    Frag raw = a_.code_point_set({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
    Frag hex3 = a_.empty();
    for (int k = 0; k < 3; ++k) hex3 = a_.seq(hex3, hex());
    Frag hex2 = a_.seq(hex(), hex());
    Frag u = a_.seq(
        a_.literal("\\u"),
        a_.alt({a_.seq(a_.code_point_set({{'0', '9'}, {'a', 'c'}, {'A', 'C'}}), hex3),
                a_.seq(a_.seq(a_.code_point_set({{'d', 'd'}, {'D', 'D'}}), a_.byte_range('0', '7')),
                       hex2),
                a_.seq(a_.code_point_set({{'e', 'f'}, {'E', 'F'}}),
                       a_.seq(hex(), a_.seq(hex(), hex())))}));
    Frag esc = a_.seq(a_.literal("\\"), a_.code_point_set({{'"', '"'},
                                                           {'\\', '\\'},
                                                           {'/', '/'},
                                                           {'b', 'b'},
                                                           {'f', 'f'},
                                                           {'n', 'n'},
                                                           {'r', 'r'},
                                                           {'t', 't'}}));
    return a_.alt({raw, esc, u});
  }
  Frag hex() { return a_.code_point_set({{'0', '9'}, {'A', 'F'}, {'a', 'f'}}); }
  Frag digits() { return a_.seq(a_.byte_range('0', '9'), a_.star(a_.byte_range('0', '9'))); }
  // -?(0|[1-9][0-9]*)
  Frag int_literal() {
    return a_.seq(a_.optional(a_.literal("-")),
                  a_.alt({a_.literal("0"),
                          a_.seq(a_.byte_range('1', '9'), a_.star(a_.byte_range('0', '9')))}));
  }
  int32_t number_rule() {
    if (number_rule_ < 0) {
      number_rule_ = a_.new_rule("number");
      Frag frac = a_.optional(a_.seq(a_.literal("."), digits()));
      Frag exp =
          a_.optional(a_.seq(a_.seq(a_.code_point_set({{'e', 'e'}, {'E', 'E'}}),
                                    a_.optional(a_.code_point_set({{'+', '+'}, {'-', '-'}}))),
                             digits()));
      a_.set_body(number_rule_, a_.seq(a_.seq(int_literal(), frac), exp));
    }
    return number_rule_;
  }
  int32_t integer_rule() {
    if (integer_rule_ < 0) {
      integer_rule_ = a_.new_rule("integer");
      a_.set_body(integer_rule_, int_literal());
    }
    return integer_rule_;
  }
  int32_t any_rule() {
    if (any_rule_ < 0) {
      any_rule_ = a_.new_rule("value");
      const int32_t obj = object_any_rule();
      const int32_t arr = a_.new_rule("array");
      Frag more = a_.star(a_.seq(a_.literal(","), a_.call(any_rule_)));
      a_.set_body(arr,
                  a_.seq(a_.seq(a_.literal("["), a_.optional(a_.seq(a_.call(any_rule_), more))),
                         a_.literal("]")));
      a_.set_body(any_rule_, a_.alt({a_.call(obj), a_.call(arr), a_.call(string_rule()),
                                     a_.call(number_rule()), a_.literal("true"),
                                     a_.literal("false"), a_.literal("null")}));
    }
    return any_rule_;
  }
  int32_t object_any_rule() {
    if (object_any_rule_ < 0) {
      object_any_rule_ = a_.new_rule("object");
      const int32_t value = any_rule();
      auto member = [&] {
        return a_.seq(a_.seq(a_.call(string_rule()), a_.literal(":")), a_.call(value));
      };
      Frag more = a_.star(a_.seq(a_.literal(","), member()));
      a_.set_body(
          object_any_rule_,
          a_.seq(a_.seq(a_.literal("{"), a_.optional(a_.seq(member(), more))), a_.literal("}")));
    }
    return object_any_rule_;
  }

  void check_keywords(const Json& s, const std::string& path) const {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kSupported.count(it.key()) || kAnnotations.count(it.key())) continue;
      fail(path, "unsupported keyword '" + it.key() + "'");
    }
    if (auto u = s.find("uniqueItems"); u != s.end() && !(u->is_boolean() && !u->get<bool>())) {
      fail(path, "unsupported keyword 'uniqueItems' (only false is accepted)");
    }
  }

  // A subschema as a rule of its own (so repetitions and several call sites share it).
  int32_t schema_rule(const Json& s, const std::string& path, int depth) {
    const int32_t r = a_.new_rule(path);
    a_.set_body(r, schema(s, path, depth));
    return r;
  }

  Frag schema(const Json& s, const std::string& path, int depth) {
    if (depth > a_.limits().max_schema_depth) {
      fail(path, "schemas nest deeper than " + std::to_string(a_.limits().max_schema_depth));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return a_.call(any_rule());
      fail(path, "the schema false allows no value");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    check_keywords(s, path);
    if (auto ref = s.find("$ref"); ref != s.end()) return reference(s, *ref, path, depth);
    if (auto all = s.find("allOf"); all != s.end()) {
      if (!all->is_array() || all->size() != 1) {
        fail(path + "/allOf", "only an allOf of exactly one schema is supported");
      }
      if (s.size() > 1 + annotation_count(s)) fail(path, "keywords beside allOf are not supported");
      return schema((*all)[0], path + "/allOf/0", depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto any = s.find(key); any != s.end()) return any_of(s, *any, path + "/" + key, depth);
    }
    if (s.contains("enum") || s.contains("const")) return enum_values(s, path);
    return typed(s, path, depth);
  }

  size_t annotation_count(const Json& s) const {
    size_t n = 0;
    for (auto it = s.begin(); it != s.end(); ++it) n += kAnnotations.count(it.key());
    return n;
  }

  Frag reference(const Json& s, const Json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) fail(path + "/$ref", "must be a string");
    if (s.size() > 1 + annotation_count(s)) fail(path, "keywords beside $ref are not supported");
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return a_.call(it->second);
    const Json& resolved = resolve(target, path);
    const int32_t r = a_.new_rule(target);
    refs_[target] = r;
    a_.set_body(r, schema(resolved, target, depth + 1));
    return a_.call(r);
  }

  const Json& resolve(const std::string& target, const std::string& path) const {
    if (target.empty() || target[0] != '#') {
      fail(path + "/$ref",
           "only local references ('#/...') are supported, got '" + target.substr(0, 200) + "'");
    }
    const Json* at = &root_;
    size_t pos = 1;
    while (pos < target.size()) {
      if (target[pos] != '/') fail(path + "/$ref", "bad JSON pointer '" + target + "'");
      const size_t next = std::min(target.find('/', pos + 1), target.size());
      std::string token = target.substr(pos + 1, next - pos - 1);
      for (size_t k; (k = token.find("~1")) != std::string::npos;) token.replace(k, 2, "/");
      for (size_t k; (k = token.find("~0")) != std::string::npos;) token.replace(k, 2, "~");
      if (at->is_object() && at->contains(token)) {
        at = &(*at)[token];
      } else if (at->is_array() && !token.empty() &&
                 token.find_first_not_of("0123456789") == std::string::npos && token.size() < 9 &&
                 std::stoul(token) < at->size()) {
        at = &(*at)[std::stoul(token)];
      } else {
        fail(path + "/$ref", "'" + target.substr(0, 200) + "' does not resolve");
      }
      pos = next;
    }
    return *at;
  }

  Frag any_of(const Json& s, const Json& list, const std::string& path, int depth) {
    if (!list.is_array() || list.empty()) fail(path, "must be a non-empty array");
    if (s.size() > 1 + annotation_count(s)) {
      fail(path, "keywords beside anyOf/oneOf are not supported");
    }
    std::vector<Frag> options;
    for (size_t i = 0; i < list.size(); ++i) {
      options.push_back(a_.call(schema_rule(list[i], path + "/" + std::to_string(i), depth + 1)));
    }
    return a_.alt(options);
  }

  static bool type_matches(const Json& v, const std::string& type) {
    if (type == "string") return v.is_string();
    if (type == "integer") {
      return v.is_number_integer() ||
             (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    }
    if (type == "number") return v.is_number();
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    return false;
  }

  std::vector<std::string> types_of(const Json& s, const std::string& path) const {
    std::vector<std::string> types;
    auto t = s.find("type");
    if (t == s.end()) return types;
    static const std::set<std::string> kTypes = {"string", "integer", "number", "boolean",
                                                 "null",   "object",  "array"};
    auto add = [&](const Json& v) {
      if (!v.is_string() || !kTypes.count(v.get<std::string>())) {
        fail(path + "/type", "unknown type " + v.dump().substr(0, 100));
      }
      types.push_back(v.get<std::string>());
    };
    if (t->is_array()) {
      if (t->empty()) fail(path + "/type", "must not be empty");
      for (const Json& v : *t) add(v);
    } else {
      add(*t);
    }
    return types;
  }

  Frag enum_values(const Json& s, const std::string& path) {
    std::vector<Json> values;
    if (auto c = s.find("const"); c != s.end()) values.push_back(*c);
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array()) fail(path + "/enum", "must be an array");
      if (static_cast<int64_t>(e->size()) > a_.limits().max_enum) {
        fail(path + "/enum", "has " + std::to_string(e->size()) + " values; the limit is " +
                                 std::to_string(a_.limits().max_enum));
      }
      if (s.contains("const")) {
        std::erase_if(
            values, [&](const Json& v) { return std::find(e->begin(), e->end(), v) == e->end(); });
      } else {
        values.assign(e->begin(), e->end());
      }
    }
    const std::vector<std::string> types = types_of(s, path);
    std::vector<Frag> options;
    for (const Json& v : values) {
      if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) {
            return type_matches(v, t);
          })) {
        continue;
      }
      options.push_back(a_.literal(v.dump(-1, ' ', false, Json::error_handler_t::replace)));
    }
    if (options.empty()) fail(path, "enum/const leaves no value of the schema's type");
    return a_.alt(options);
  }

  // Types named, or implied by the keywords present when "type" is absent.
  std::vector<std::string> implied_types(const Json& s, const std::string& path) const {
    std::vector<std::string> types = types_of(s, path);
    if (!types.empty() || s.contains("type")) return types;
    auto has_any = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (has_any({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (has_any({"items", "minItems", "maxItems"})) types.push_back("array");
    if (has_any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (has_any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
      types.push_back("number");
    }
    return types;
  }

  Frag typed(const Json& s, const std::string& path, int depth) {
    const std::vector<std::string> types = implied_types(s, path);
    if (types.empty()) return a_.call(any_rule());
    std::vector<Frag> options;
    for (const std::string& t : types) {
      if (t == "string") options.push_back(string_schema(s, path));
      if (t == "integer") options.push_back(number_schema(s, path, true));
      if (t == "number") options.push_back(number_schema(s, path, false));
      if (t == "boolean") options.push_back(a_.alt({a_.literal("true"), a_.literal("false")}));
      if (t == "null") options.push_back(a_.literal("null"));
      if (t == "object") options.push_back(object_schema(s, path, depth));
      if (t == "array") options.push_back(array_schema(s, path, depth));
    }
    return options.size() == 1 ? options[0] : a_.alt(options);
  }

  int64_t count(const Json& s, const char* key, int64_t fallback, const std::string& path) const {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
      fail(path + "/" + key, "must be a non-negative integer");
    }
    const auto v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(a_.limits().max_repeat)) {
      fail(path + "/" + key,
           "is " + std::to_string(v) + "; the limit is " + std::to_string(a_.limits().max_repeat));
    }
    return static_cast<int64_t>(v);
  }

  Frag string_schema(const Json& s, const std::string& path);
  Frag format_string(const std::string& format, const std::string& path);
  Frag number_schema(const Json& s, const std::string& path, bool integer);
  Frag object_schema(const Json& s, const std::string& path, int depth);
  Frag array_schema(const Json& s, const std::string& path, int depth);
  Frag extra_key(const std::vector<std::string>& names);
  Frag uint_range(uint64_t lo, uint64_t hi);  // hi == UINT64_MAX: unbounded
  Frag same_length(const std::string& lo, const std::string& hi);
  Frag int_range(double lo, double hi);  // inclusive integer bounds (already rounded)

  Automaton& a_;
  const Json& root_;
  std::map<std::string, int32_t> refs_;
  int32_t string_rule_ = -1, number_rule_ = -1, integer_rule_ = -1, any_rule_ = -1,
          object_any_rule_ = -1;
};

}  // namespace hubzoo::grammar::detail
