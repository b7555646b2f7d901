#include "tokenizer/normalized_string.h"

#include <algorithm>

namespace hubzoo::tok {

namespace {

// Byte length of the UTF-8 character starting with `lead` (as decode_utf8 counts it).
inline size_t char_bytes(unsigned char lead) {
  return lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
}

// append_utf8 and utf8_len in one, inlined for the per-character loop of transform_range.
inline size_t append_char(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
    return 1;
  }
  append_utf8(out, c);
  return utf8_len(c);
}

}  // namespace

NormalizedString::NormalizedString(std::string_view original)
    : original_(original), normalized_(original) {
  alignments_.reserve(original.size());
  for (size_t i = 0, n = 0; i < original.size(); i += n) {
    decode_utf8(original, i, &n);
    for (size_t k = 0; k < n; ++k) alignments_.push_back({i, i + n});
  }
}

std::optional<Offsets> NormalizedString::normalized_to_original(Offsets r) const {
  if (r.first == r.second) return r;
  if (r.first > r.second || r.second > alignments_.size()) return std::nullopt;
  return Offsets{alignments_[r.first].first, alignments_[r.second - 1].second};
}

std::optional<Offsets> NormalizedString::original_to_normalized(Offsets r) const {
  if (r.first == r.second) return r;
  if (r.first > r.second) return std::nullopt;
  std::optional<size_t> start, end;
  for (size_t i = 0; i < alignments_.size() && r.second >= alignments_[i].second; ++i) {
    const Offsets& a = alignments_[i];
    if (!start && r.first <= a.first && a.first != a.second) start = i;
    end = i + 1;
  }
  if (start && end) return Offsets{*start, *end};
  if (start) return Offsets{*start, *start};
  if (end) return Offsets{*end, *end};
  return std::nullopt;
}

NormalizedString NormalizedString::slice_normalized(size_t start, size_t end) const {
  NormalizedString out;
  const Offsets orig = normalized_to_original({start, end}).value_or(Offsets{0, 0});
  if (orig.first <= orig.second && orig.second <= original_.size()) {
    out.original_ = original_.substr(orig.first, orig.second - orig.first);
  }
  out.normalized_ = normalized_.substr(start, end - start);
  out.alignments_.resize(end - start);
  for (size_t i = start; i < end; ++i) {
    out.alignments_[i - start] = {alignments_[i].first - orig.first,
                                  alignments_[i].second - orig.first};
  }
  out.original_shift_ = original_shift_ + orig.first;
  return out;
}

void NormalizedString::transform_range(size_t start, size_t end,
                                       const std::vector<CharChange>& dest, size_t initial_offset) {
  const std::string_view range = std::string_view(normalized_).substr(start, end - start);
  size_t cursor = 0;  // byte position in `range` of the next replaced character
  auto skip_chars = [&](size_t count) {
    size_t bytes = 0;
    for (; count > 0 && cursor < range.size(); --count) {
      const size_t n = char_bytes(static_cast<unsigned char>(range[cursor]));
      cursor += n;
      bytes += n;
    }
    return bytes;
  };
  size_t offset = start + skip_chars(initial_offset);
  std::string out;
  std::vector<Offsets> aligns;
  out.reserve(range.size());
  aligns.reserve(range.size());
  for (const CharChange& d : dest) {
    Offsets align{0, 0};
    if (d.change > 0) {
      if (offset >= 1) align = alignments_[offset - 1];
    } else if (offset < alignments_.size()) {
      align = alignments_[offset];
    } else if (!alignments_.empty()) {
      align = alignments_.back();
    }
    if (d.change <= 0) offset += skip_chars(1);
    if (d.change < 0) offset += skip_chars(static_cast<size_t>(-d.change));
    aligns.insert(aligns.end(), append_char(out, d.c), align);
  }
  if (start == 0 && end == normalized_.size()) {  // the whole string: no splicing
    alignments_ = std::move(aligns);
    normalized_ = std::move(out);
    return;
  }
  alignments_.erase(alignments_.begin() + start, alignments_.begin() + end);
  alignments_.insert(alignments_.begin() + start, aligns.begin(), aligns.end());
  normalized_.replace(start, end - start, out);
}

void NormalizedString::normalize(NormForm form) {
  bool ascii = true;
  for (char ch : normalized_) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return;  // every form leaves ASCII unchanged
  transform(normalize_changes(normalized_, form), 0);
}

void NormalizedString::filter(const std::function<bool(char32_t)>& keep) {
  int64_t removed = 0;
  size_t removed_start = 0;
  std::vector<CharChange> dest;
  dest.reserve(normalized_.size());
  std::optional<char32_t> last;
  for (size_t i = 0, n = 0; i < normalized_.size(); i += n) {
    const char32_t c = decode_utf8(normalized_, i, &n);
    if (keep(c)) {
      if (last) {
        dest.push_back({*last, -removed});
      } else {
        removed_start = static_cast<size_t>(removed);
      }
      last = c;
      removed = 0;
    } else {
      ++removed;
    }
  }
  if (last) dest.push_back({*last, -removed});
  transform(dest, removed_start);
}

void NormalizedString::map(const std::function<char32_t(char32_t)>& f) {
  std::vector<CharChange> dest;
  dest.reserve(normalized_.size());
  for (size_t i = 0, n = 0; i < normalized_.size(); i += n) {
    dest.push_back({f(decode_utf8(normalized_, i, &n)), 0});
  }
  transform(dest, 0);
}

void NormalizedString::lowercase() {
  std::vector<CharChange> dest;
  dest.reserve(normalized_.size());
  std::vector<char32_t> lower;
  for (size_t i = 0, n = 0; i < normalized_.size(); i += n) {
    lower.clear();
    to_lowercase(decode_utf8(normalized_, i, &n), lower);
    for (size_t k = 0; k < lower.size(); ++k) dest.push_back({lower[k], k > 0 ? 1 : 0});
  }
  transform(dest, 0);
}

void NormalizedString::prepend(std::string_view s) {
  if (normalized_.empty()) return;
  size_t n = 0;
  const char32_t next = decode_utf8(normalized_, 0, &n);
  std::vector<CharChange> dest;
  bool first = true;
  for (char32_t c : code_points(s)) {
    dest.push_back({c, first ? 0 : 1});
    first = false;
  }
  dest.push_back({next, 1});
  transform_range(0, n, dest, 0);
}

void NormalizedString::strip(bool left, bool right) {
  const std::vector<char32_t> cps = code_points(normalized_);
  size_t leading = 0, trailing = 0;
  if (left) {
    while (leading < cps.size() && is_whitespace(cps[leading])) ++leading;
  }
  if (right) {
    while (trailing < cps.size() && is_whitespace(cps[cps.size() - 1 - trailing])) ++trailing;
  }
  if (leading == 0 && trailing == 0) return;
  std::vector<CharChange> dest;
  const auto last_kept = static_cast<int64_t>(normalized_.size()) - static_cast<int64_t>(trailing) -
                         1;  // HF compares a char index to this
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i < leading || i >= cps.size() - trailing) continue;
    const bool is_last = static_cast<int64_t>(i) == last_kept;
    dest.push_back({cps[i], is_last ? -static_cast<int64_t>(trailing) : 0});
  }
  transform(dest, leading);
}

void NormalizedString::replace(const Regex& pattern, std::string_view content) {
  replace(find_matches(pattern, normalized_), content);
}

void NormalizedString::replace(const Matches& matches, std::string_view content) {
  std::string out;
  std::vector<Offsets> aligns;
  out.reserve(normalized_.size());
  aligns.reserve(alignments_.size());
  size_t last_end = 0;
  const std::vector<char32_t> content_cps = code_points(content);
  for (const auto& [range, is_match] : matches) {
    if (!is_match) continue;
    const auto [start, end] = range;
    out.append(normalized_, last_end, start - last_end);
    aligns.insert(aligns.end(), alignments_.begin() + last_end, alignments_.begin() + start);
    // Every replacement character is "inserted" after the removed match.
    const Offsets align = end >= 1 ? alignments_[end - 1] : Offsets{0, 0};
    for (char32_t c : content_cps) {
      append_utf8(out, c);
      aligns.insert(aligns.end(), utf8_len(c), align);
    }
    last_end = end;
  }
  out.append(normalized_, last_end, std::string::npos);
  aligns.insert(aligns.end(), alignments_.begin() + last_end, alignments_.end());
  normalized_ = std::move(out);
  alignments_ = std::move(aligns);
}

std::vector<NormalizedString> NormalizedString::split(const Matches& matches,
                                                      SplitBehavior behavior) const {
  Matches splits;  // (offsets, remove)
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const auto& [o, m] : matches) splits.push_back({o, false});
      break;
    case SplitBehavior::Removed:
      splits = matches;
      break;
    case SplitBehavior::Contiguous:
      for (const auto& [o, m] : matches) {
        if (m == previous_match && !splits.empty()) {
          splits.back().first.second = o.second;
        } else {
          splits.push_back({o, false});
        }
        previous_match = m;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& [o, m] : matches) {
        if (m && !previous_match && !splits.empty()) {
          splits.back().first.second = o.second;
        } else {
          splits.push_back({o, false});
        }
        previous_match = m;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        const auto& [o, m] = *it;
        if (m && !previous_match && !splits.empty()) {
          splits.back().first.first = o.first;
        } else {
          splits.push_back({o, false});
        }
        previous_match = m;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  std::vector<NormalizedString> out;
  out.reserve(splits.size());
  for (const auto& [o, remove] : splits) {
    if (!remove) out.push_back(slice_normalized(o.first, o.second));
  }
  return out;
}

void PreTokenizedString::split(const std::function<std::vector<Split>(NormalizedString&&)>& fn) {
  std::vector<Split> next;
  next.reserve(splits_.size());
  for (Split& s : splits_) {
    if (s.tokens) {
      next.push_back(std::move(s));
      continue;
    }
    std::vector<Split> pieces = fn(std::move(s.normalized));
    // One split often becomes thousands: grow once, not by repeated doubling.
    if (next.capacity() < next.size() + pieces.size()) {
      next.reserve(std::max(2 * next.capacity(), next.size() + pieces.size()));
    }
    for (Split& piece : pieces) {
      if (!piece.normalized.empty()) next.push_back(std::move(piece));
    }
  }
  splits_ = std::move(next);
}

void PreTokenizedString::split_normalized(
    const std::function<std::vector<NormalizedString>(NormalizedString&&)>& fn) {
  split([&](NormalizedString&& n) {
    std::vector<NormalizedString> pieces = fn(std::move(n));
    std::vector<Split> out;
    out.reserve(pieces.size());
    for (NormalizedString& piece : pieces) out.push_back({std::move(piece), std::nullopt});
    return out;
  });
}

void PreTokenizedString::normalize(const std::function<void(NormalizedString&)>& fn) {
  for (Split& s : splits_) {
    if (!s.tokens) fn(s.normalized);
  }
}

void PreTokenizedString::tokenize(
    const std::function<std::vector<Token>(const NormalizedString&)>& fn) {
  for (Split& s : splits_) {
    if (!s.tokens) s.tokens = fn(s.normalized);
  }
}

}  // namespace hubzoo::tok
