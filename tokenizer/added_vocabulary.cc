#include "tokenizer/added_vocabulary.h"

#include <algorithm>

namespace hubzoo::tok {

void AddedVocabulary::Matcher::insert(std::string_view pattern, uint32_t token_id) {
  uint32_t node = 0;
  for (unsigned char b : pattern) {
    auto it = next[node].find(b);
    if (it == next[node].end()) {
      next.emplace_back();
      id.push_back(-1);
      it = next[node].emplace(b, static_cast<uint32_t>(next.size() - 1)).first;
    }
    node = it->second;
  }
  id[node] = token_id;
}

void AddedVocabulary::add(const std::vector<AddedToken>& tokens, const Model& model,
                          const Normalizer* normalizer) {
  uint32_t next_id = static_cast<uint32_t>(model.vocab_size());
  for (const auto& [id, t] : by_id_) {
    if (id >= model.vocab_size() || model.vocab_size() == 0) next_id = std::max(next_id, id + 1);
  }
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    std::optional<uint32_t> id = token_to_id(t.content);
    if (!id) id = model.token_to_id(t.content);
    if (!id) id = next_id++;
    if (t.normalized && normalizer) {
      NormalizedString s(t.content);
      normalizer->normalize(s);
      if (s.get() != t.content) normalized_form_[*id] = s.get();
    }
    by_content_[t.content] = *id;
    if (t.special) special_.insert(t.content);
    by_id_[*id] = t;
  }
  raw_ = Matcher{};
  normalized_ = Matcher{};
  // HF iterates a hash map here; contents are distinct so order does not matter.
  for (const auto& [id, t] : by_id_) {
    if (t.normalized) {
      auto it = normalized_form_.find(id);
      normalized_.insert(it != normalized_form_.end() ? it->second : t.content, id);
    } else {
      raw_.insert(t.content, id);
    }
  }
}

std::optional<uint32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> AddedVocabulary::id_to_token(uint32_t id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  auto n = normalized_form_.find(id);
  return n != normalized_form_.end() ? n->second : it->second.content;
}

size_t AddedVocabulary::count_not_in(const Model& model) const {
  size_t n = 0;
  for (const auto& [content, id] : by_content_) n += !model.token_to_id(content).has_value();
  return n;
}

namespace {

char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t n = 0;
  return decode_utf8(s, i, &n);
}

}  // namespace

std::vector<Split> AddedVocabulary::split_with(NormalizedString&& s, const Matcher& m) const {
  const std::string& text = s.get();
  std::vector<std::pair<std::optional<uint32_t>, Offsets>> pieces;
  if (text.empty()) {
    pieces.push_back({std::nullopt, {0, 0}});
  } else if (m.empty()) {
    pieces.push_back({std::nullopt, {0, text.size()}});
  } else {
    size_t start_offset = 0, pos = 0;
    while (pos < text.size()) {
      // Leftmost-longest: the longest pattern starting at the first position that has one.
      int64_t best = -1;
      size_t best_end = 0;
      uint32_t node = 0;
      for (size_t i = pos; i < text.size(); ++i) {
        auto it = m.next[node].find(static_cast<unsigned char>(text[i]));
        if (it == m.next[node].end()) break;
        node = it->second;
        if (m.id[node] >= 0) best = m.id[node], best_end = i + 1;
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = best_end;
      pos = best_end;
      const AddedToken& t = by_id_.at(static_cast<uint32_t>(best));
      if (t.single_word) {
        size_t n = 0;
        const bool start_space =
            start == 0 || !is_word_char(last_char(std::string_view(text).substr(0, start)));
        const bool stop_space = stop == text.size() || !is_word_char(decode_utf8(text, stop, &n));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t new_start = start;
        while (new_start > 0) {
          size_t b = new_start - 1;
          while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
          size_t n = 0;
          if (!is_whitespace(decode_utf8(text, b, &n))) break;
          new_start = b;
        }
        start = std::max(new_start, start_offset);
      }
      if (t.rstrip) {
        size_t n = 0;
        while (stop < text.size() && is_whitespace(decode_utf8(text, stop, &n))) stop += n;
      }
      if (start_offset < start) pieces.push_back({std::nullopt, {start_offset, start}});
      pieces.push_back({static_cast<uint32_t>(best), {start, stop}});
      start_offset = stop;
    }
    if (start_offset != text.size()) pieces.push_back({std::nullopt, {start_offset, text.size()}});
  }
  std::vector<Split> out;
  out.reserve(pieces.size());
  for (const auto& [id, range] : pieces) {
    NormalizedString slice = s.slice_normalized(range.first, range.second);
    if (id) {
      std::string value = slice.get();
      const size_t len = value.size();
      out.push_back({std::move(slice), std::vector<Token>{{*id, std::move(value), {0, len}}}});
    } else {
      out.push_back({std::move(slice), std::nullopt});
    }
  }
  return out;
}

PreTokenizedString AddedVocabulary::extract_and_normalize(const Normalizer* normalizer,
                                                          std::string_view text) const {
  PreTokenizedString p(text);
  p.split([&](NormalizedString&& s) { return split_with(std::move(s), raw_); });
  p.split([&](NormalizedString&& s) {
    if (normalizer) normalizer->normalize(s);
    return split_with(std::move(s), normalized_);
  });
  return p;
}

}  // namespace hubzoo::tok
