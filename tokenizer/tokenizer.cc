#include "tokenizer/tokenizer.h"

#include "io/gguf.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer_class.h"

#include <limits>

#include "base/error.h"
#include "base/heap.h"
#include "io/json.h"

namespace hubzoo {

using tok::Json;
using tok::Source;

namespace {

// Padding lengths tokenizer.json may ask for (Fixed, pad_to_multiple_of): every
// encoding is padded to them, so 10^18 would allocate until memory runs out.
constexpr uint64_t kMaxPadLength = uint64_t{1} << 20;

// Byte offsets in `text` -> character offsets (HF BytesToCharOffsetConverter).
class CharOffsets {
 public:
  explicit CharOffsets(std::string_view text) : char_at_(text.size() + 1, 0) {
    size_t chars = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && i > 0) ++chars;
      char_at_[i] = chars;
    }
    size_ = text.size();
  }
  tok::Offsets convert(tok::Offsets o) const {
    if (o.first >= size_) return o;
    if (o.second < size_) return {char_at_[o.first], char_at_[o.second]};
    const size_t last =
        o.second >= 1 && o.second - 1 < size_ ? char_at_[o.second - 1] : char_at_[o.first] + 1;
    return {char_at_[o.first], last + 1};
  }

 private:
  std::vector<size_t> char_at_;
  size_t size_;
};

}  // namespace

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  return from_json(read_json_file(path), path.string());
}

Tokenizer Tokenizer::from_pretrained(const std::filesystem::path& dir) {
  std::error_code ec;
  if (dir.extension() == ".gguf" && std::filesystem::is_regular_file(dir, ec)) {
    Tokenizer t = tokenizer_from_gguf_metadata(GgufFile::open(dir)->metadata(), dir.string());
    release_free_heap();  // the metadata's JSON values
    return t;
  }
  const std::filesystem::path file = dir / "tokenizer.json";
  if (!std::filesystem::exists(file)) throw FileError(dir.string() + " has no tokenizer.json");
  Json tokenizer_json = read_json_file(file);
  const std::filesystem::path config_file = dir / "tokenizer_config.json";
  const std::filesystem::path model_file = dir / "config.json";
  const Json config =
      std::filesystem::exists(config_file) ? read_json_file(config_file) : Json::object();
  if (!config.is_object())
    throw FormatError(config_file.string() + ": top level must be an object");
  const Json model = std::filesystem::exists(model_file) ? read_json_file(model_file) : Json();
  // The class AutoTokenizer picks rebuilds parts of tokenizer.json (tokenizer_class.h).
  const std::string name = tok::auto_tokenizer_class(config, model, tokenizer_json);
  const Source config_src{config_file.string()};
  bool rebuilt = false;
  if (tokenizer_json.is_object()) {
    try {
      rebuilt = tok::apply_tokenizer_class(name, config, tokenizer_json, config_src);
    } catch (const Json::exception& e) {
      throw FormatError(config_file.string() + ": " + e.what());
    }
  }
  Tokenizer t = from_json(tokenizer_json, file.string());
  if (rebuilt) {
    auto id_of = [&t](const std::string& token) { return t.token_to_id(token); };
    Json processor = tok::class_post_processor(name, config, id_of, config_src);
    if (!processor.is_null()) t.post_processor_ = tok::make_post_processor(processor, config_src);
  }
  t.apply_tokenizer_config(config, config_file.string());
  return t;
}

Tokenizer Tokenizer::from_json(const Json& j, const std::string& file) {
  return from_json(j, nullptr, file);
}

Tokenizer Tokenizer::from_json(const Json& j, std::unique_ptr<tok::Model> model,
                               const std::string& file) {
  const Source src{file};
  if (!j.is_object()) throw FormatError(file + ": top level must be an object");
  // A value that did not come through parse_json (a C++ caller's) is bounded
  // here: the builders below copy and walk it recursively.
  if (json_depth(j, JsonLimits{}.max_depth) > JsonLimits{}.max_depth) {
    throw FormatError(file + ": JSON nested deeper than the limit of " +
                      std::to_string(JsonLimits{}.max_depth) + " levels");
  }
  Tokenizer t;
  try {
    // A reference, not a copy: copying a JSON value recurses once per nesting level.
    static const Json kNull;
    auto get = [&](const char* key) -> const Json& { return j.contains(key) ? j[key] : kNull; };
    t.normalizer_ = tok::make_normalizer(get("normalizer"), src);
    t.pre_tokenizer_ = tok::make_pre_tokenizer(get("pre_tokenizer"), src);
    t.model_ = model ? std::move(model) : tok::make_model(get("model"), src);
    t.bpe_model_ = tok::model_type(get("model")) == "BPE";
    t.post_processor_ = tok::make_post_processor(get("post_processor"), src);
    t.decoder_ = tok::make_decoder(get("decoder"), src);

    std::vector<tok::AddedToken> added;
    for (const Json& a : get("added_tokens").is_array() ? j["added_tokens"] : Json::array()) {
      tok::AddedToken token;
      token.content = tok::field(a, "content", src).get<std::string>();
      token.single_word = a.value("single_word", false);
      token.lstrip = a.value("lstrip", false);
      token.rstrip = a.value("rstrip", false);
      token.special = a.value("special", false);
      token.normalized = a.value("normalized", !token.special);
      added.push_back(std::move(token));
    }
    t.added_.add(added, *t.model_, t.normalizer_.get());

    if (const Json& tr = get("truncation"); !tr.is_null()) {
      Truncation trunc;
      trunc.max_length = tok::to_uint(tok::field(tr, "max_length", src), "truncation 'max_length'",
                                      src, std::numeric_limits<size_t>::max());
      trunc.left = tr.value("direction", std::string("Right")) == "Left";
      t.truncation_ = trunc;
    }
    if (const Json& pd = get("padding"); !pd.is_null()) {
      Padding pad;
      const Json& strategy = tok::field(pd, "strategy", src);
      if (strategy.is_object() && strategy.contains("Fixed"))
        pad.fixed = tok::to_uint(strategy["Fixed"], "padding 'Fixed'", src, kMaxPadLength);
      if (pd.contains("pad_to_multiple_of") && pd["pad_to_multiple_of"].is_number()) {
        pad.multiple_of =
            tok::to_uint(pd["pad_to_multiple_of"], "'pad_to_multiple_of'", src, kMaxPadLength);
      }
      pad.left = pd.value("direction", std::string("Right")) == "Left";
      pad.pad_id = tok::int_or(pd, "pad_id", 0, src);
      pad.pad_type_id = tok::int_or(pd, "pad_type_id", 0, src);
      pad.pad_token = pd.value("pad_token", std::string("[PAD]"));
      t.padding_ = pad;
    }
  } catch (const Json::exception& e) {
    throw FormatError(file + ": " + e.what());
  }
  return t;
}

Encoding Tokenizer::encode_unpadded(std::string_view text, bool add_special_tokens) const {
  Encoding e = encode_raw(text, 0);
  if (truncation_) {
    const size_t added =
        add_special_tokens && post_processor_ ? post_processor_->added_tokens() : 0;
    const size_t max = truncation_->max_length > added ? truncation_->max_length - added : 0;
    tok::truncate_encoding(e, max, truncation_->left);
  }
  if (post_processor_) e = post_processor_->process(std::move(e), add_special_tokens);
  return e;
}

Encoding Tokenizer::encode_raw(std::string_view text, int64_t type_id) const {
  tok::validate_utf8(text);
  tok::PreTokenizedString p = added_.extract_and_normalize(normalizer_.get(), text);
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(p);
  p.tokenize([&](const tok::NormalizedString& n) { return model_->tokenize(n.get()); });

  Encoding e;
  const CharOffsets chars(text);
  int64_t word = 0;
  for (const tok::Split& s : p.splits()) {
    const size_t shift = s.normalized.offsets_original().first;
    for (const tok::Token& t : *s.tokens) {
      tok::Offsets o = t.offsets;
      if (auto r = s.normalized.normalized_to_original(t.offsets))
        o = {shift + r->first, shift + r->second};
      e.push(t.id, t.value, chars.convert(o), type_id, false, word);
    }
    ++word;
  }
  return e;
}

void Tokenizer::pad(Encoding& e, size_t length) const {
  if (padding_->multiple_of && *padding_->multiple_of > 0 && length % *padding_->multiple_of) {
    length += *padding_->multiple_of - length % *padding_->multiple_of;
  }
  if (e.size() >= length) return;
  const size_t n = length - e.size();
  const auto at = [&](auto& v) { return padding_->left ? v.begin() : v.end(); };
  e.ids.insert(at(e.ids), n, padding_->pad_id);
  e.type_ids.insert(at(e.type_ids), n, padding_->pad_type_id);
  e.tokens.insert(at(e.tokens), n, padding_->pad_token);
  e.word_ids.insert(at(e.word_ids), n, -1);
  e.attention_mask.insert(at(e.attention_mask), n, 0);
  e.special_tokens_mask.insert(at(e.special_tokens_mask), n, 1);
  e.offsets.insert(at(e.offsets), n, tok::Offsets{0, 0});
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  Encoding e = encode_unpadded(text, add_special_tokens);
  if (padding_) pad(e, padding_->fixed.value_or(e.size()));
  return e;
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                              bool add_special_tokens) const {
  std::vector<Encoding> out;
  out.reserve(texts.size());
  size_t longest = 0;
  for (const std::string& text : texts) {
    out.push_back(encode(text, add_special_tokens));
    longest = std::max(longest, out.back().size());
  }
  if (padding_) {
    for (Encoding& e : out) pad(e, padding_->fixed.value_or(longest));
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string text = decode_raw(ids, skip_special_tokens);
  return clean_up_spaces_ ? tok::clean_up_tokenization(std::move(text)) : text;
}

std::string Tokenizer::decode_raw(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    std::optional<std::string> t = id_to_token(id);
    if (!t || (skip_special_tokens && added_.is_special(*t))) continue;
    tokens.push_back(std::move(*t));
  }
  if (decoder_) {
    std::string out;
    for (const std::string& piece : decoder_->decode_chain(std::move(tokens))) out += piece;
    return out;
  }
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
  return out;
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.token_to_id(token)) return *id;
  if (auto id = model_->token_to_id(token)) return *id;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id > UINT32_MAX) return std::nullopt;
  const auto u = static_cast<uint32_t>(id);
  if (auto t = added_.id_to_token(u)) return t;
  return model_->id_to_token(u);
}

bool Tokenizer::is_special_id(int64_t id) const {
  if (id < 0 || id > UINT32_MAX) return false;
  const auto t = added_.id_to_token(static_cast<uint32_t>(id));
  return t && added_.is_special(*t);
}

size_t Tokenizer::vocab_size() const { return model_->vocab_size() + added_.count_not_in(*model_); }

std::optional<std::string> DecodeStream::step(int64_t id) {
  if (prefix_.empty() && !ids_.empty()) {
    std::string p = tokenizer_->decode_raw(ids_, skip_special_tokens_);
    if (!p.ends_with("\xEF\xBF\xBD")) {
      prefix_ = std::move(p);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  const std::string text = tokenizer_->decode_raw(ids_, skip_special_tokens_);
  if (text.size() <= prefix_.size() || text.ends_with("\xEF\xBF\xBD")) return std::nullopt;
  if (!text.starts_with(prefix_)) {
    throw InvalidArgument("DecodeStream: decoding token " + std::to_string(id) +
                          " changed text already returned");
  }
  std::string fresh = text.substr(prefix_.size());
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_->decode_raw(ids_, skip_special_tokens_);
  prefix_index_ = new_prefix_index;
  return fresh;
}

}  // namespace hubzoo
