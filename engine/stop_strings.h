// Stop strings over streamed text: a stop string may span token boundaries,
// so text that could still become the start of one is held back until it
// cannot. The released text never contains a stop string (OpenAI's rule: the
// output ends before it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hubzoo {

class StopStrings {
 public:
  // Empty strings are ignored.
  explicit StopStrings(std::vector<std::string> stops = {});

  struct Result {
    std::string text;      // releasable now
    bool stopped = false;  // a stop string completed: nothing after it is released
    std::string matched;
  };
  // Appends newly decoded text.
  Result push(std::string_view piece);
  // The held-back text: what a sequence that ended otherwise still owes.
  std::string flush();
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace hubzoo
