// PCRE2 (UTF + UCP, JIT) standing in for the Oniguruma regexes HF tokenizers
// compiles from tokenizer.json, with Oniguruma's find_iter semantics.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hubzoo::tok {

using Offsets = std::pair<size_t, size_t>;

class Regex {
 public:
  // Throws FormatError naming the pattern when it does not compile.
  explicit Regex(const std::string& pattern);
  // A regex matching `literal` exactly.
  static Regex literal(std::string_view literal);

  // Non-overlapping matches left to right; an empty match right where the
  // previous match ended is skipped (Oniguruma's FindMatches).
  std::vector<Offsets> find_all(std::string_view text) const;
  bool search(std::string_view text, Offsets* match) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::shared_ptr<void> code_;  // pcre2_code_8
};

// A split of `text` into pieces, each flagged whether it matched (HF Pattern).
using Matches = std::vector<std::pair<Offsets, bool>>;
Matches find_matches(const Regex& re, std::string_view text);
Matches find_matches(const std::function<bool(char32_t)>& pred, std::string_view text);
Matches invert(Matches m);

}  // namespace hubzoo::tok
