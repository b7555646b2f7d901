#include "tokenizer/components.h"

#include <limits>

#include "base/error.h"

namespace hubzoo::tok {

const Json& field(const Json& j, const char* key, const Source& src) {
  if (!j.is_object() || !j.contains(key)) {
    throw FormatError(src.file + ": missing field '" + key + "' in " + brief(j));
  }
  return j[key];
}

uint64_t to_uint(const Json& v, const std::string& what, const Source& src, uint64_t max) {
  // Parsed JSON holds a non-negative integer as unsigned; one set from C++ (e.g.
  // apply_tokenizer_config's truncation) may be a signed one.
  const bool non_negative =
      v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  if (non_negative && v.get<uint64_t>() <= max) return v.get<uint64_t>();
  throw FormatError(src.file + ": " + what + " must be an integer in [0, " + std::to_string(max) +
                    "], got " + brief(v));
}

int64_t to_int(const Json& v, const std::string& what, const Source& src) {
  if (v.is_number_integer() &&
      (!v.is_number_unsigned() ||
       v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    return v.get<int64_t>();
  }
  throw FormatError(src.file + ": " + what + " must be a 64-bit integer, got " + brief(v));
}

uint64_t uint_or(const Json& j, const char* key, uint64_t fallback, uint64_t max,
                 const Source& src) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  return to_uint(j[key], std::string("'") + key + "'", src, max);
}

int64_t int_or(const Json& j, const char* key, int64_t fallback, const Source& src) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  return to_int(j[key], std::string("'") + key + "'", src);
}

std::string brief(const Json& j) {
  const auto one = [](const Json& x) -> std::string {
    if (x.is_array()) return "[...]";
    if (x.is_object()) return "{...}";
    const std::string s = x.dump();
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  };
  if (!j.is_structured()) return one(j);
  const bool obj = j.is_object();
  std::string out = obj ? "{" : "[";
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    if (i == 6) {
      out += ", ... (" + std::to_string(j.size()) + " entries)";
      break;
    }
    out += (i ? ", " : "") + (obj ? "\"" + it.key() + "\": " : std::string()) + one(*it);
  }
  return out + (obj ? "}" : "]");
}

std::string type_of(const Json& j, const char* what, const Source& src) {
  const Json& t = field(j, "type", src);
  if (!t.is_string()) throw FormatError(src.file + ": " + what + " 'type' must be a string");
  return t.get<std::string>();
}

void unknown_type(const char* what, const std::string& type, const Source& src) {
  throw FormatError(src.file + ": unknown " + what + " type '" + type + "'");
}

SplitBehavior parse_behavior(const Json& j, const Source& src) {
  const std::string b = j.is_string() ? j.get<std::string>() : std::string();
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  throw FormatError(src.file + ": unknown split behavior " + brief(j));
}

}  // namespace hubzoo::tok
