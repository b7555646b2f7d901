// Normalizers: text -> normalized text, keeping alignments (HF normalizers/*).
#include <utility>

#include "base/error.h"
#include "tokenizer/components.h"

namespace hubzoo::tok {

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormForm form) : form_(form) {}
  void normalize(NormalizedString& s) const override { s.normalize(form_); }

 private:
  NormForm form_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override { s.lowercase(); }
};

class StripAccents : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) { return !is_combining_mark(c); });
  }
};

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        chinese_(chinese),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void normalize(NormalizedString& s) const override {
    if (clean_text_) {
      s.filter([](char32_t c) {
        const bool control = c != '\t' && c != '\n' && c != '\r' && is_other(c);
        return !(c == 0 || c == 0xFFFD || control);
      });
      s.map([](char32_t c) {
        return (c == '\t' || c == '\n' || c == '\r' || is_whitespace(c)) ? U' ' : c;
      });
    }
    if (chinese_) {
      std::vector<CharChange> dest;
      for (char32_t c : code_points(s.get())) {
        if (is_chinese_char(c)) {
          dest.insert(dest.end(), {{U' ', 0}, {c, 1}, {U' ', 1}});
        } else {
          dest.push_back({c, 0});
        }
      }
      s.transform(dest, 0);
    }
    if (strip_accents_) {
      s.normalize(NormForm::NFD);
      s.filter([](char32_t c) { return !is_mark_nonspacing(c); });
    }
    if (lowercase_) s.lowercase();
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class Replace : public Normalizer {
 public:
  Replace(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(NormalizedString& s) const override { s.replace(pattern_, content_); }

 private:
  Regex pattern_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(NormalizedString& s) const override { s.prepend(prefix_); }

 private:
  std::string prefix_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedString& s) const override {
    if (left_ && right_) {
      s.strip(true, true);
    } else {
      if (left_) s.strip(true, false);
      if (right_) s.strip(false, true);
    }
  }

 private:
  bool left_, right_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    std::vector<CharChange> dest;
    dest.reserve(s.size());
    const std::string& text = s.get();
    for (size_t i = 0, n = 0; i < text.size(); i += n) {
      decode_utf8(text, i, &n);
      for (size_t k = 0; k < n; ++k) {
        dest.push_back({byte_to_char(static_cast<uint8_t>(text[i + k])), k > 0 ? 1 : 0});
      }
    }
    s.transform(dest, 0);
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(NormalizedString& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

// {"String": "..."} or {"Regex": "..."}, as Replace and Split store patterns.
Regex parse_pattern(const Json& j, const Source& src) {
  if (j.contains("String")) return Regex::literal(j["String"].get<std::string>());
  if (j.contains("Regex")) return Regex(j["Regex"].get<std::string>());
  throw FormatError(src.file + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> make_precompiled(const Json& j, const Source& src);

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const Source& src) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "normalizer", src);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "BertNormalizer") {
    const bool lowercase = j.value("lowercase", true);
    const Json& sa = j.contains("strip_accents") ? j["strip_accents"] : Json();
    return std::make_unique<BertNormalizer>(j.value("clean_text", true),
                                            j.value("handle_chinese_chars", true),
                                            sa.is_null() ? lowercase : sa.get<bool>(), lowercase);
  }
  if (type == "Replace") {
    return std::make_unique<Replace>(parse_pattern(field(j, "pattern", src), src),
                                     field(j, "content", src).get<std::string>());
  }
  if (type == "Prepend")
    return std::make_unique<Prepend>(field(j, "prepend", src).get<std::string>());
  if (type == "Strip") {
    return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  }
  if (type == "Precompiled") return make_precompiled(j, src);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    const Source inner = nested(src, "normalizer");
    for (const Json& p : field(j, "normalizers", src)) {
      if (auto n = make_normalizer(p, inner)) parts.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  unknown_type("normalizer", type, src);
}

}  // namespace hubzoo::tok
