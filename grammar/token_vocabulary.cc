#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "grammar/automaton.h"

namespace hubzoo::grammar {

namespace {

// GPT-2's bytes_to_unicode, inverted: code point -> byte, -1 when none.
int byte_of(char32_t c) {
  static const std::vector<int> table = [] {
    std::vector<int> t(324, -1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      t[printable ? b : 256 + n++] = b;
    }
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

// UTF-8 code points of `s`; nullopt on invalid UTF-8.
std::optional<std::vector<char32_t>> code_points(const std::string& s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const int n = b0 < 0x80 ? 1 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return std::nullopt;
    char32_t v = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int k = 1; k < n; ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(v);
    i += n;
  }
  return out;
}

bool is_byte_fallback(const std::string& t) {
  return t.size() == 6 && t.starts_with("<0x") && t[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

}  // namespace

std::string token_string_bytes(const std::string& token, VocabKind kind) {
  if (kind == VocabKind::kByteLevel) {
    auto cps = code_points(token);
    if (!cps) return token;
    std::string out;
    for (char32_t c : *cps) {
      const int b = byte_of(c);
      if (b < 0) return token;  // not byte-level text (an added token): raw, as HF's decoder
      out += static_cast<char>(b);
    }
    return out;
  }
  if (kind == VocabKind::kMetaspace) {
    if (is_byte_fallback(token)) {
      return std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
    }
    std::string out;
    static const std::string kSpace = "\xE2\x96\x81";  // U+2581
    for (size_t i = 0; i < token.size();) {
      if (token.compare(i, 3, kSpace) == 0) {
        out += ' ';
        i += 3;
      } else {
        out += token[i++];
      }
    }
    return out;
  }
  return token;
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(
    const Tokenizer& tokenizer, const std::vector<std::string>& special_as_text) {
  const auto n = static_cast<int64_t>(tokenizer.vocab_size());
  std::vector<std::optional<std::string>> strings(static_cast<size_t>(n));
  std::vector<std::pair<int64_t, std::string>> specials;  // raw text, set after the conversion
  int64_t g_count = 0, all_byte_level = 0, metaspace = 0, present = 0;
  // Ids may go past vocab_size() when added tokens skip ids; bound the scan.
  for (int64_t id = 0; id < n; ++id) {
    if (tokenizer.is_special_id(id)) {
      auto t = tokenizer.id_to_token(id);
      if (t &&
          std::find(special_as_text.begin(), special_as_text.end(), *t) != special_as_text.end()) {
        specials.emplace_back(id, std::move(*t));
      }
      continue;
    }
    auto t = tokenizer.id_to_token(id);
    if (!t || t->empty()) continue;
    ++present;
    auto cps = code_points(*t);
    bool byte_level = cps.has_value();
    if (cps) {
      for (char32_t c : *cps) byte_level = byte_level && byte_of(c) >= 0;
    }
    all_byte_level += byte_level;
    g_count += t->find("\xC4\xA0") != std::string::npos;        // "Ġ"
    metaspace += t->find("\xE2\x96\x81") != std::string::npos;  // "▁"
    strings[static_cast<size_t>(id)] = std::move(*t);
  }
  VocabKind kind = VocabKind::kRaw;
  if (g_count > 0 && all_byte_level * 100 >= present * 99) {
    kind = VocabKind::kByteLevel;
  } else if (metaspace > 0) {
    kind = VocabKind::kMetaspace;
  }
  for (auto& s : strings) {
    if (s) s = token_string_bytes(*s, kind);
  }
  for (auto& [id, text] : specials) strings[static_cast<size_t>(id)] = std::move(text);
  return from_bytes(std::move(strings), kind);
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_bytes(
    std::vector<std::optional<std::string>> bytes, VocabKind kind) {
  auto v = std::make_shared<TokenVocabulary>();
  v->bytes_ = std::move(bytes);
  for (auto& b : v->bytes_) {
    if (b && b->empty()) b.reset();
  }
  v->kind_ = kind;
  v->build_trie();
  return v;
}

void TokenVocabulary::build_trie() {
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i]) order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return *bytes_[a] < *bytes_[b]; });
  Trie& t = trie_;
  auto add_node = [&](uint8_t b, int32_t depth) {
    t.byte.push_back(b);
    t.depth.push_back(depth);
    t.end.push_back(-1);
    t.first_token.push_back(static_cast<int32_t>(t.token_ids.size()));
  };
  add_node(0, 0);
  std::vector<int32_t> path = {0};  // node at each depth of the current token
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = *bytes_[id];
    size_t lcp = 0;
    if (prev) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    while (path.size() > lcp + 1) {
      t.end[path.back()] = static_cast<int32_t>(t.byte.size());
      path.pop_back();
    }
    for (size_t k = lcp; k < s.size(); ++k) {
      add_node(static_cast<uint8_t>(s[k]), static_cast<int32_t>(k + 1));
      path.push_back(static_cast<int32_t>(t.byte.size() - 1));
    }
    t.token_ids.push_back(id);
    prev = &s;
  }
  while (!path.empty()) {
    t.end[path.back()] = static_cast<int32_t>(t.byte.size());
    path.pop_back();
  }
  t.first_token.push_back(static_cast<int32_t>(t.token_ids.size()));
}

}  // namespace hubzoo::grammar
