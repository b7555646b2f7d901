#include "tokenizer/components.h"

#include <limits>

#include "base/error.h"
#include "io/json.h"

namespace hubzoo::tok {

const Json& field(const Json& j, const char* key, const Source& src) {
  if (!j.is_object() || !j.contains(key)) {
    throw FormatError(src.file + ": missing field '" + key + "' in " + json_excerpt(j));
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
                    "], got " + json_excerpt(v));
}

int64_t to_int(const Json& v, const std::string& what, const Source& src) {
  if (v.is_number_integer() &&
      (!v.is_number_unsigned() ||
       v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    return v.get<int64_t>();
  }
  throw FormatError(src.file + ": " + what + " must be a 64-bit integer, got " + json_excerpt(v));
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

std::string type_of(const Json& j, const char* what, const Source& src) {
  const Json& t = field(j, "type", src);
  if (!t.is_string()) throw FormatError(src.file + ": " + what + " 'type' must be a string");
  return t.get<std::string>();
}

Source nested(const Source& src, const char* what) {
  if (src.depth >= kMaxSequenceDepth) {
    throw FormatError(src.file + ": " + what + " Sequences nested deeper than the limit of " +
                      std::to_string(kMaxSequenceDepth));
  }
  return Source{src.file, src.depth + 1};
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
  throw FormatError(src.file + ": unknown split behavior " + json_excerpt(j));
}

}  // namespace hubzoo::tok
