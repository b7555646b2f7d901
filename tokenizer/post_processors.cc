// Post-processors: add special tokens around the encoded sequence and fix up
// offsets (HF processors/*), for one sequence or a pair (process_encodings).
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
  std::vector<Encoding> process_encodings(std::vector<Encoding> es, bool add) const override {
    for (Encoding& e : es) e = process(std::move(e), add);
    return es;
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

// Copy of e with every type id set to `type`.
Encoding typed(Encoding e, int64_t type) {
  std::fill(e.type_ids.begin(), e.type_ids.end(), type);
  return e;
}

void push_special(Encoding& out, const SpecialToken& s, int64_t type) {
  for (size_t k = 0; k < s.ids.size(); ++k) out.push(s.ids[k], s.tokens[k], {0, 0}, type, true);
}

// HF bert.rs / roberta.rs pairs: cls A sep [sep] B sep; B's part has type
// `b_type` (BERT 1, RoBERTa 0); without special tokens A and B concatenated.
Encoding wrap_pair(const std::vector<Encoding>& es, const SpecialToken& cls,
                   const SpecialToken& sep, bool double_sep, int64_t b_type, bool add) {
  Encoding out;
  if (add) push_special(out, cls, 0);
  out.append(typed(es[0], 0));
  if (add) push_special(out, sep, 0);
  if (add && double_sep) push_special(out, sep, b_type);
  out.append(typed(es[1], b_type));
  if (add) push_special(out, sep, b_type);
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
  size_t added_tokens_pair() const override { return 3; }
  std::vector<Encoding> process_encodings(std::vector<Encoding> es, bool add) const override {
    if (es.size() != 2) return PostProcessor::process_encodings(std::move(es), add);
    return {wrap_pair(es, cls_, sep_, /*double_sep=*/false, /*b_type=*/1, add)};
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
  size_t added_tokens_pair() const override { return 4; }
  std::vector<Encoding> process_encodings(std::vector<Encoding> es, bool add) const override {
    if (es.size() != 2) return PostProcessor::process_encodings(std::move(es), add);
    for (Encoding& e : es) {
      if (trim_offsets_) trim_byte_level_offsets(e, add_prefix_space_);
    }
    return {wrap_pair(es, cls_, sep_, /*double_sep=*/true, /*b_type=*/0, add)};
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
  TemplateProcessor(std::vector<Piece> single, std::vector<Piece> pair,
                    std::map<std::string, SpecialToken> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {}

  size_t added_tokens() const override { return count_added(single_); }
  size_t added_tokens_pair() const override { return count_added(pair_); }
  Encoding process(Encoding e, bool add_special_tokens) const override {
    return apply(single_, {std::move(e)}, add_special_tokens);
  }
  std::vector<Encoding> process_encodings(std::vector<Encoding> es, bool add) const override {
    if (es.size() != 2) return PostProcessor::process_encodings(std::move(es), add);
    return {apply(pair_, es, add)};
  }

 private:
  size_t count_added(const std::vector<Piece>& pieces) const {
    size_t n = 0;
    for (const Piece& p : pieces) n += p.is_sequence ? 0 : specials_.at(p.id).ids.size();
    return n;
  }
  // The template's pieces in order; sequence "A" is es[0], "B" es[1].
  Encoding apply(const std::vector<Piece>& pieces, const std::vector<Encoding>& es,
                 bool add_special_tokens) const {
    Encoding out;
    for (const Piece& p : pieces) {
      if (p.is_sequence) {
        const size_t which = p.id == "B" ? 1 : 0;
        if (which >= es.size()) throw FormatError("post-processor template names sequence B");
        out.append(typed(es[which], p.type_id));
      } else if (add_special_tokens) {
        const SpecialToken& s = specials_.at(p.id);
        for (size_t k = 0; k < s.ids.size(); ++k)
          out.push(s.ids[k], s.tokens[k], {0, 0}, p.type_id, true);
      }
    }
    return out;
  }

  std::vector<Piece> single_, pair_;
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
  size_t added_tokens_pair() const override {
    size_t n = 0;
    for (const auto& p : parts_) n += p->added_tokens_pair();
    return n;
  }
  std::vector<Encoding> process_encodings(std::vector<Encoding> es, bool add) const override {
    for (const auto& p : parts_) es = p->process_encodings(std::move(es), add);
    return es;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace

std::vector<Encoding> PostProcessor::process_encodings(std::vector<Encoding> es,
                                                       bool add_special_tokens) const {
  if (es.size() != 1) throw InvalidArgument("this post-processor does not encode pairs");
  return {process(std::move(es[0]), add_special_tokens)};
}

namespace {

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
      const Json& ids = field(s, "ids", src);
      if (!ids.is_array())
        throw FormatError(src.file + ": special token '" + name + "' ids must be an array");
      SpecialToken& st = specials[name];
      for (const Json& id : ids) st.ids.push_back(to_int(id, "special token id", src));
      st.tokens = field(s, "tokens", src).get<std::vector<std::string>>();
    }
    auto pieces = [&](const char* key) {
      std::vector<TemplateProcessor::Piece> out;
      if (!j.contains(key)) return out;
      for (const Json& p : field(j, key, src)) {
        if (p.contains("Sequence")) {
          out.push_back({true, p["Sequence"].value("id", std::string("A")),
                         int_or(p["Sequence"], "type_id", 0, src)});
        } else if (p.contains("SpecialToken")) {
          const std::string id = p["SpecialToken"].at("id").get<std::string>();
          if (!specials.count(id))
            throw FormatError(src.file + ": template uses undeclared special token '" + id + "'");
          out.push_back({false, id, int_or(p["SpecialToken"], "type_id", 0, src)});
        } else {
          throw FormatError(src.file + ": unknown template piece " + json_excerpt(p));
        }
      }
      return out;
    };
    std::vector<TemplateProcessor::Piece> single = pieces("single");
    if (single.empty()) (void)field(j, "single", src);  // names a missing 'single'
    std::vector<TemplateProcessor::Piece> pair = pieces("pair");
    if (pair.empty()) {  // HF's default pair template: $A $B:1
      pair = {{true, "A", 0}, {true, "B", 1}};
    }
    return std::make_unique<TemplateProcessor>(std::move(single), std::move(pair),
                                               std::move(specials));
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
