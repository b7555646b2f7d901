#include "tokenizer/components.h"

#include "base/error.h"
#include "io/json.h"

namespace hubzoo::tok {

const Json& field(const Json& j, const char* key, const Source& src) {
  if (!j.is_object() || !j.contains(key)) {
    throw FormatError(src.file + ": missing field '" + key + "' in " + j.dump().substr(0, 200));
  }
  return j[key];
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
