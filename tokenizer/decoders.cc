// Decoders: token strings -> text (HF decoders/*). decode_chain maps the list
// of token strings to a new list; the tokenizer joins the final list.
#include <cctype>
#include <cstdlib>
#include <limits>
#include <utility>

#include "base/error.h"
#include "tokenizer/components.h"

namespace hubzoo::tok {

Regex parse_pattern(const Json& j, const Source& src);

namespace {

using Strings = std::vector<std::string>;

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  return out;
}

class ByteLevelDecoder : public Decoder {
 public:
  Strings decode_chain(Strings tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool ok = true;
      for (char32_t c : code_points(t)) {
        const int b = char_to_byte(c);
        if (b < 0) {
          ok = false;
          break;
        }
        mapped += static_cast<char>(b);
      }
      bytes += ok ? mapped : t;
    }
    return {utf8_lossy(bytes)};
  }
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  Strings decode_chain(Strings tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0)
        t = t.compare(0, prefix_.size(), prefix_) == 0 ? t.substr(prefix_.size()) : " " + t;
      if (cleanup_) t = cleanup(std::move(t));
    }
    return tokens;
  }
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) s = replace_all(std::move(s), from, to);
    return s;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepend)
      : replacement_(replacement), prepend_(prepend) {}
  Strings decode_chain(Strings tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      for (char32_t c : code_points(tokens[i])) {
        if (c == replacement_) {
          if (i == 0 && prepend_) continue;
          out += ' ';
        } else {
          append_utf8(out, c);
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t replacement_;
  bool prepend_;
};

class BPEDecoder : public Decoder {
 public:
  explicit BPEDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Strings decode_chain(Strings tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = replace_all(std::move(tokens[i]), suffix_, i + 1 == tokens.size() ? "" : " ");
    }
    return tokens;
  }

 private:
  std::string suffix_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  Strings decode_chain(Strings tokens) const override {
    Strings out;
    std::string pending;
    auto flush = [&]() {
      if (pending.empty()) return;
      if (utf8_lossy(pending) == pending) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        char* end = nullptr;
        const std::string hex = t.substr(3, 2);
        const long v = std::strtol(hex.c_str(), &end, 16);
        if (end == hex.c_str() + 2 && std::isxdigit(static_cast<unsigned char>(hex[0])))
          byte = static_cast<int>(v);
      }
      if (byte >= 0) {
        pending += static_cast<char>(byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder : public Decoder {
 public:
  Strings decode_chain(Strings tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Strings decode_chain(Strings tokens) const override {
    for (std::string& t : tokens) {
      const std::vector<char32_t> cps = code_points(t);
      size_t start_cut = 0, stop_cut = cps.size();
      for (size_t i = 0; i < start_ && i < cps.size() && cps[i] == content_; ++i) start_cut = i + 1;
      for (size_t i = 0; i < stop_ && i < cps.size(); ++i) {
        const size_t index = cps.size() - i - 1;
        if (cps[index] != content_) break;
        stop_cut = index;
      }
      std::string out;
      for (size_t i = start_cut; i < stop_cut; ++i) append_utf8(out, cps[i]);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Strings decode_chain(Strings tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      for (const auto& [o, is_match] : find_matches(pattern_, t)) {
        out += is_match ? content_ : t.substr(o.first, o.second - o.first);
      }
      t = std::move(out);
    }
    return tokens;
  }

 private:
  Regex pattern_;
  std::string content_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  Strings decode_chain(Strings tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

char32_t one_char(const std::string& s, const Source& src) {
  const std::vector<char32_t> cps = code_points(s);
  if (cps.size() != 1)
    throw FormatError(src.file + ": decoder expects one character, got '" + s + "'");
  return cps[0];
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& j, const Source& src) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "decoder", src);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "WordPiece") {
    return std::make_unique<WordPieceDecoder>(j.value("prefix", std::string("##")),
                                              j.value("cleanup", true));
  }
  if (type == "Metaspace") {
    std::string scheme = j.value("prepend_scheme", std::string("always"));
    if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean() &&
        !j["add_prefix_space"].get<bool>()) {
      scheme = "never";
    }
    return std::make_unique<MetaspaceDecoder>(
        one_char(field(j, "replacement", src).get<std::string>(), src), scheme != "never");
  }
  if (type == "BPEDecoder")
    return std::make_unique<BPEDecoder>(j.value("suffix", std::string("</w>")));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(
        one_char(field(j, "content", src).get<std::string>(), src),
        uint_or(j, "start", 0, std::numeric_limits<size_t>::max(), src),
        uint_or(j, "stop", 0, std::numeric_limits<size_t>::max(), src));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(parse_pattern(field(j, "pattern", src), src),
                                            field(j, "content", src).get<std::string>());
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    const Source inner = nested(src, "decoder");
    for (const Json& p : field(j, "decoders", src)) {
      if (auto d = make_decoder(p, inner)) parts.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  unknown_type("decoder", type, src);
}

}  // namespace hubzoo::tok
