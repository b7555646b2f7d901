// Pre-tokenizers: split normalized text into words (HF pre_tokenizers/*).
#include <utility>

#include "base/error.h"
#include "tokenizer/components.h"

namespace hubzoo::tok {

Regex parse_pattern(const Json& j, const Source& src);

namespace {

// GPT-2's split, as HF's ByteLevel pre-tokenizer hard-codes it.
const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel : public PreTokenizer {
  // Each byte becomes its GPT-2 alphabet character; the first byte of a
  // character replaces it, the others are inserted after it. `dest` is scratch.
  static void to_bytes(NormalizedString& n, std::vector<CharChange>& dest) {
    dest.clear();
    const std::string& text = n.get();
    for (size_t i = 0, len = 0; i < text.size(); i += len) {
      const auto lead = static_cast<unsigned char>(text[i]);
      len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;  // valid UTF-8
      for (size_t k = 0; k < len; ++k) {
        dest.push_back({byte_to_char(static_cast<uint8_t>(text[i + k])), k > 0 ? 1 : 0});
      }
    }
    n.transform(dest, 0);
  }

 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), re_(kByteLevelPattern) {}

  // HF splits every piece, then maps the bytes of every piece; mapping each
  // piece right after the split is the same and touches it while in cache.
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split_normalized([&](NormalizedString&& n) {
      if (add_prefix_space_ && (n.get().empty() || n.get()[0] != ' ')) n.prepend(" ");
      std::vector<NormalizedString> pieces;
      if (use_regex_) {
        pieces = n.split(find_matches(re_, n.get()), SplitBehavior::Isolated);
      } else {
        pieces.push_back(std::move(n));
      }
      std::vector<CharChange> dest;
      for (NormalizedString& piece : pieces) to_bytes(piece, dest);
      return pieces;
    });
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex re_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(Regex re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split_normalized([&](NormalizedString&& n) {
      Matches m = find_matches(re_, n.get());
      return n.split(invert_ ? invert(std::move(m)) : m, behavior_);
    });
  }

 private:
  Regex re_;
  SplitBehavior behavior_;
  bool invert_;
};

// Splits on a character class with a fixed behaviour.
class CharSplit : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> pred, SplitBehavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split_normalized(
        [&](NormalizedString&& n) { return n.split(find_matches(pred_, n.get()), behavior_); });
  }

 private:
  std::function<bool(char32_t)> pred_;
  SplitBehavior behavior_;
};

bool is_bert_punc(char32_t c) {
  // is_ascii_punctuation || is_punctuation; every ASCII character in a P*
  // category is ASCII punctuation, so ASCII needs no Unicode lookup.
  return c < 0x80 ? is_ascii_punctuation(c) : is_punctuation(c);
}

class BertPre : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split_normalized([](NormalizedString&& n) {
      return n.split(find_matches(is_whitespace, n.get()), SplitBehavior::Removed);
    });
    p.split_normalized([](NormalizedString&& n) {
      return n.split(find_matches(is_bert_punc, n.get()), SplitBehavior::Isolated);
    });
  }
};

class Whitespace : public PreTokenizer {
 public:
  // Rust regex's Unicode \w (PCRE2 10.42's UCP \w lacks marks and Join_Control).
  Whitespace()
      : re_(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]+|)"
            R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}\s]+)") {}
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split_normalized([&](NormalizedString&& n) {
      return n.split(invert(find_matches(re_, n.get())), SplitBehavior::Removed);
    });
  }

 private:
  Regex re_;
};

enum class PrependScheme { Always, First, Never };

class Metaspace : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(str_rep_, replacement);
  }
  void pre_tokenize(PreTokenizedString& p) const override {
    p.split_normalized([&](NormalizedString&& n) {
      n.replace(find_matches([](char32_t c) { return c == U' '; }, n.get()), str_rep_);
      const bool starts = n.get().compare(0, str_rep_.size(), str_rep_) == 0;
      if (scheme_ == PrependScheme::Always && !starts) n.prepend(str_rep_);
      if (scheme_ == PrependScheme::First && !starts && n.offsets_original().first == 0) {
        n.prepend(str_rep_);
      }
      if (!split_) return std::vector<NormalizedString>{std::move(n)};
      const char32_t r = replacement_;
      return n.split(find_matches([r](char32_t c) { return c == r; }, n.get()),
                     SplitBehavior::MergedWithNext);
    });
  }

 private:
  char32_t replacement_;
  PrependScheme scheme_;
  bool split_;
  std::string str_rep_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(PreTokenizedString& p) const override {
    for (const auto& part : parts_) part->pre_tokenize(p);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

char32_t single_char(const Json& j, const char* key, const Source& src) {
  const std::vector<char32_t> cps = code_points(field(j, key, src).get<std::string>());
  if (cps.size() != 1) throw FormatError(src.file + ": '" + key + "' must be one character");
  return cps[0];
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const Source& src) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "pre_tokenizer", src);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(j.value("add_prefix_space", true),
                                       j.value("use_regex", true));
  }
  if (type == "Split") {
    return std::make_unique<SplitPre>(parse_pattern(field(j, "pattern", src), src),
                                      parse_behavior(field(j, "behavior", src), src),
                                      j.value("invert", false));
  }
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharSplit>(is_whitespace, SplitBehavior::Removed);
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (type == "Punctuation") {
    const SplitBehavior b =
        j.contains("behavior") ? parse_behavior(j["behavior"], src) : SplitBehavior::Isolated;
    return std::make_unique<CharSplit>(is_bert_punc, b);
  }
  if (type == "Digits") {
    return std::make_unique<CharSplit>(is_numeric, j.value("individual_digits", false)
                                                       ? SplitBehavior::Isolated
                                                       : SplitBehavior::Contiguous);
  }
  if (type == "CharDelimiterSplit") {
    const char32_t d = single_char(j, "delimiter", src);
    return std::make_unique<CharSplit>([d](char32_t c) { return c == d; }, SplitBehavior::Removed);
  }
  if (type == "Metaspace") {
    PrependScheme scheme = PrependScheme::Always;
    const std::string s = j.value("prepend_scheme", std::string("always"));
    if (s == "first")
      scheme = PrependScheme::First;
    else if (s == "never")
      scheme = PrependScheme::Never;
    else if (s != "always")
      throw FormatError(src.file + ": unknown Metaspace prepend_scheme '" + s + "'");
    if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean() &&
        !j["add_prefix_space"].get<bool>()) {
      scheme = PrependScheme::Never;
    }
    return std::make_unique<Metaspace>(single_char(j, "replacement", src), scheme,
                                       j.value("split", true));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    const Source inner = nested(src, "pre_tokenizer");
    for (const Json& p : field(j, "pretokenizers", src)) {
      if (auto t = make_pre_tokenizer(p, inner)) parts.push_back(std::move(t));
    }
    return std::make_unique<SequencePre>(std::move(parts));
  }
  unknown_type("pre_tokenizer", type, src);
}

}  // namespace hubzoo::tok
