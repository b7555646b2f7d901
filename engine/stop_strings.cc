#include "engine/stop_strings.h"

#include <algorithm>

namespace hubzoo {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStrings::Result StopStrings::push(std::string_view piece) {
  Result r;
  held_.append(piece);
  if (stops_.empty()) {
    r.text.swap(held_);
    return r;
  }
  // The earliest completed stop string wins.
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) {
      first = at;
      r.matched = s;
    }
  }
  if (first != std::string::npos) {
    r.text = held_.substr(0, first);
    r.stopped = true;
    held_.clear();
    return r;
  }
  // Hold the longest suffix that is a proper prefix of some stop string:
  // every match still possible starts inside it.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(held_.size(), s.size() - 1); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopStrings::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace hubzoo
