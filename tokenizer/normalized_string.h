// NormalizedString and PreTokenizedString, as in HF tokenizers: the text being
// normalized keeps, for every byte, the byte range of the original text it
// came from, so token offsets can be reported against the input.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace hubzoo::tok {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class NormalizedString {
 public:
  NormalizedString() = default;
  explicit NormalizedString(std::string_view original);

  const std::string& get() const { return normalized_; }
  const std::string& original() const { return original_; }
  bool empty() const { return normalized_.empty(); }
  size_t size() const { return normalized_.size(); }
  // Byte range of this piece in the whole original input.
  Offsets offsets_original() const { return {original_shift_, original_shift_ + original_.size()}; }

  // A normalized byte range -> original byte range (relative to this piece).
  std::optional<Offsets> normalized_to_original(Offsets range) const;
  // An original byte range -> normalized byte range.
  std::optional<Offsets> original_to_normalized(Offsets range) const;
  // The piece covering normalized bytes [start, end).
  NormalizedString slice_normalized(size_t start, size_t end) const;

  // Replaces normalized bytes [start, end) by `dest` (see CharChange);
  // `initial_offset` characters at the start of the range are removed first.
  void transform_range(size_t start, size_t end, const std::vector<CharChange>& dest,
                       size_t initial_offset);
  void transform(const std::vector<CharChange>& dest, size_t initial_offset) {
    transform_range(0, normalized_.size(), dest, initial_offset);
  }

  void normalize(NormForm form);
  void filter(const std::function<bool(char32_t)>& keep);
  void map(const std::function<char32_t(char32_t)>& f);
  void lowercase();
  void prepend(std::string_view s);
  void strip(bool left, bool right);
  void replace(const Regex& pattern, std::string_view content);
  void replace(const Matches& matches, std::string_view content);

  std::vector<NormalizedString> split(const Matches& matches, SplitBehavior behavior) const;

 private:
  std::string original_;
  std::string normalized_;
  std::vector<Offsets> alignments_;  // per normalized byte: original byte range
  size_t original_shift_ = 0;
};

struct Token {
  uint32_t id;
  std::string value;
  Offsets offsets;  // bytes, in the normalized split the token came from
};

struct Split {
  NormalizedString normalized;
  std::optional<std::vector<Token>> tokens;
};

class PreTokenizedString {
 public:
  explicit PreTokenizedString(std::string_view original)
      : original_(original), splits_{{NormalizedString(original), std::nullopt}} {}

  // Replaces every split not yet tokenized by the pieces `fn` returns; empty pieces are dropped.
  void split(const std::function<std::vector<Split>(NormalizedString&&)>& fn);
  void split_normalized(const std::function<std::vector<NormalizedString>(NormalizedString&&)>& fn);
  void normalize(const std::function<void(NormalizedString&)>& fn);
  void tokenize(const std::function<std::vector<Token>(const NormalizedString&)>& fn);

  const std::string& original() const { return original_; }
  std::vector<Split>& splits() { return splits_; }
  const std::vector<Split>& splits() const { return splits_; }

 private:
  std::string original_;
  std::vector<Split> splits_;
};

}  // namespace hubzoo::tok
