// Post-processors: add special tokens around the encoded sequence and fix up
// offsets (HF processors/*). Only single sequences are encoded here.
#include <map>
#include <utility>

#include "base/error.h"
#include "io/json.h"
#include "tokenizer/components.h"

namespace hubzoo::tok {

namespace {

// ByteLevel offset trimming: leading/trailing 'Ġ' or whitespace leave the offsets.
void trim_byte_level_offsets(Encoding& e, bool add_prefix_space) {
  const char32_t space = byte_to_char(' ');
  auto is_space = [&](char32_t c) { return c == space || is_whitespace(c); };
  for (size_t i = 0; i < e.size(); ++i) {
    const std::vector<char32_t> cps = code_points(e.tokens[i]);
    size_t leading = 0, trailing = 0;
    while (leading < cps.size() && is_space(cps[leading])) ++leading;
    while (trailing < cps.size() && is_space(cps[cps.size() - 1 - trailing])) ++trailing;
    auto& [start, end] = e.offsets[i];
    if (leading > 0) {
      const bool is_first = i == 0 || start == 0;
      if (is_first && add_prefix_space && leading == 1) leading = 0;
      start = std::min(start + leading, end);
    }
    if (trailing > 0 && end >= trailing) end = std::max(end - trailing, start);
  }
}

class ByteLevelProcessor : public PostProcessor {
 public:
  ByteLevelProcessor(bool trim_offsets, bool add_prefix_space)
      : trim_offsets_(trim_offsets), add_prefix_space_(add_prefix_space) {}
  size_t added_tokens() const override { return 0; }
  Encoding process(Encoding e, bool) const override {
    if (trim_offsets_) trim_byte_level_offsets(e, add_prefix_space_);
    return e;
  }

 private:
  bool trim_offsets_, add_prefix_space_;
};

struct SpecialToken {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
};

Encoding wrap(const Encoding& e, const SpecialToken& cls, const SpecialToken& sep) {
  Encoding out;
  for (size_t k = 0; k < cls.ids.size(); ++k) out.push(cls.ids[k], cls.tokens[k], {0, 0}, 0, true);
  Encoding body = e;
  std::fill(body.type_ids.begin(), body.type_ids.end(), 0);
  out.append(body);
  for (size_t k = 0; k < sep.ids.size(); ++k) out.push(sep.ids[k], sep.tokens[k], {0, 0}, 0, true);
  return out;
}

class BertProcessor : public PostProcessor {
 public:
  BertProcessor(SpecialToken cls, SpecialToken sep) : cls_(std::move(cls)), sep_(std::move(sep)) {}
  size_t added_tokens() const override { return 2; }
  Encoding process(Encoding e, bool add_special_tokens) const override {
    if (!add_special_tokens) return e;
    return wrap(e, cls_, sep_);
  }

 private:
  SpecialToken cls_, sep_;
};

class RobertaProcessor : public PostProcessor {
 public:
  RobertaProcessor(SpecialToken cls, SpecialToken sep, bool trim_offsets, bool add_prefix_space)
      : cls_(std::move(cls)),
        sep_(std::move(sep)),
        trim_offsets_(trim_offsets),
        add_prefix_space_(add_prefix_space) {}
  size_t added_tokens() const override { return 2; }
  Encoding process(Encoding e, bool add_special_tokens) const override {
    if (trim_offsets_) trim_byte_level_offsets(e, add_prefix_space_);
    std::fill(e.type_ids.begin(), e.type_ids.end(), 0);
    if (!add_special_tokens) return e;
    return wrap(e, cls_, sep_);
  }

 private:
  SpecialToken cls_, sep_;
  bool trim_offsets_, add_prefix_space_;
};

class TemplateProcessor : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence;
    std::string id;  // special token name, or "A"/"B"
    int64_t type_id;
  };
  TemplateProcessor(std::vector<Piece> single, std::map<std::string, SpecialToken> specials)
      : single_(std::move(single)), specials_(std::move(specials)) {}

  size_t added_tokens() const override {
    size_t n = 0;
    for (const Piece& p : single_) n += p.is_sequence ? 0 : specials_.at(p.id).ids.size();
    return n;
  }
  Encoding process(Encoding e, bool add_special_tokens) const override {
    Encoding out;
    for (const Piece& p : single_) {
      if (p.is_sequence) {
        Encoding body = e;
        std::fill(body.type_ids.begin(), body.type_ids.end(), p.type_id);
        out.append(body);
      } else if (add_special_tokens) {
        const SpecialToken& s = specials_.at(p.id);
        for (size_t k = 0; k < s.ids.size(); ++k)
          out.push(s.ids[k], s.tokens[k], {0, 0}, p.type_id, true);
      }
    }
    return out;
  }

 private:
  std::vector<Piece> single_;
  std::map<std::string, SpecialToken> specials_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  size_t added_tokens() const override {
    size_t n = 0;
    for (const auto& p : parts_) n += p->added_tokens();
    return n;
  }
  Encoding process(Encoding e, bool add_special_tokens) const override {
    for (const auto& p : parts_) e = p->process(std::move(e), add_special_tokens);
    return e;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

SpecialToken token_pair(const Json& j, const Source& src) {
  if (!j.is_array() || j.size() != 2)
    throw FormatError(src.file + ": expected [token, id], got " + json_excerpt(j));
  return {{to_int(j[1], "special token id", src)}, {j[0].get<std::string>()}};
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const Source& src) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "post_processor", src);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelProcessor>(j.value("trim_offsets", true),
                                                j.value("add_prefix_space", true));
  }
  if (type == "BertProcessing") {
    return std::make_unique<BertProcessor>(token_pair(field(j, "cls", src), src),
                                           token_pair(field(j, "sep", src), src));
  }
  if (type == "RobertaProcessing") {
    return std::make_unique<RobertaProcessor>(
        token_pair(field(j, "cls", src), src), token_pair(field(j, "sep", src), src),
        j.value("trim_offsets", true), j.value("add_prefix_space", true));
  }
  if (type == "TemplateProcessing") {
    std::map<std::string, SpecialToken> specials;
    for (const auto& [name, s] : field(j, "special_tokens", src).items()) {
      specials[name] = {s.at("ids").get<std::vector<int64_t>>(),
                        s.at("tokens").get<std::vector<std::string>>()};
    }
    std::vector<TemplateProcessor::Piece> single;
    for (const Json& p : field(j, "single", src)) {
      if (p.contains("Sequence")) {
        single.push_back({true, p["Sequence"].value("id", std::string("A")),
                          int_or(p["Sequence"], "type_id", 0, src)});
      } else if (p.contains("SpecialToken")) {
        const std::string id = p["SpecialToken"].at("id").get<std::string>();
        if (!specials.count(id))
          throw FormatError(src.file + ": template uses undeclared special token '" + id + "'");
        single.push_back({false, id, int_or(p["SpecialToken"], "type_id", 0, src)});
      } else {
        throw FormatError(src.file + ": unknown template piece " + json_excerpt(p));
      }
    }
    return std::make_unique<TemplateProcessor>(std::move(single), std::move(specials));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    const Source inner = nested(src, "post_processor");
    for (const Json& p : field(j, "processors", src)) {
      if (auto q = make_post_processor(p, inner)) parts.push_back(std::move(q));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  unknown_type("post_processor", type, src);
}

}  // namespace hubzoo::tok
