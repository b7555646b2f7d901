// Which class AutoTokenizer picks, and the pipeline each emulated class
// builds (transformers 5.23; the file each rebuild mirrors is named on it).
#include "tokenizer/tokenizer_class.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"
#include "tokenizer/tokenizer_class_impl.h"

namespace hubzoo::tok {

namespace {

// tokenization_auto.py's MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS: model
// types whose Hub tokenizer_class is overridden by the registered class.
constexpr std::string_view kIncorrectHubClass[] = {"arctic",
                                                   "chatlm",
                                                   "ernie4_5",
                                                   "ernie4_5_moe",
                                                   "fuyu",
                                                   "h2ovl_chat",
                                                   "hyperclovax",
                                                   "hyperclovax_vlm",
                                                   "hyperclovax_vision_v2",
                                                   "internlm2",
                                                   "internlm3",
                                                   "iquestcoder",
                                                   "jamba",
                                                   "llava",
                                                   "llava_next",
                                                   "minicpm3",
                                                   "minicpmv",
                                                   "minimax_m2",
                                                   "modernbert",
                                                   "modernbert-decoder",
                                                   "molmo",
                                                   "molmo2",
                                                   "nemotron",
                                                   "nvfp4",
                                                   "opencua",
                                                   "openvla",
                                                   "paddleocr_vl",
                                                   "phi3",
                                                   "phi3_v",
                                                   "phimoe",
                                                   "qwen2",
                                                   "qwen3_5",
                                                   "qwen3_5_moe",
                                                   "qwen3_5_moe_text",
                                                   "qwen4_exp",
                                                   "step3_vl",
                                                   "vipllava",
                                                   "cohere_asr",
                                                   "camembertv2-base",
                                                   "siglip2",
                                                   "smolvlm"};

// TOKENIZER_MAPPING_NAMES for the model types hubzoo runs or may meet next to
// them (without mistral_common installed, Mistral's entry is the backend).
// Model types not listed have no registered class: the declared one is used.
struct Registered {
  std::string_view model_type, tokenizer_class;
};
constexpr Registered kRegistered[] = {
    {"bert", "BertTokenizer"},
    {"distilbert", "BertTokenizer"},
    {"electra", "BertTokenizer"},
    {"nomic_bert", "BertTokenizer"},
    {"roberta", "RobertaTokenizer"},
    {"xlm-roberta", "XLMRobertaTokenizer"},
    {"xlm-roberta-xl", kBackendClass},
    {"t5", "T5Tokenizer"},
    {"mt5", "T5Tokenizer"},
    {"umt5", kBackendClass},
    {"gpt2", "GPT2Tokenizer"},
    {"gemma", "GemmaTokenizer"},
    {"gemma2", "GemmaTokenizer"},
    {"gemma3", "GemmaTokenizer"},
    {"gemma3_text", "GemmaTokenizer"},
    {"gemma3n", "GemmaTokenizer"},
    {"qwen2", "Qwen2Tokenizer"},
    {"qwen2_moe", "Qwen2Tokenizer"},
    {"qwen2_vl", "Qwen2Tokenizer"},
    {"qwen3", "Qwen2Tokenizer"},
    {"qwen3_moe", "Qwen2Tokenizer"},
    {"mistral", kBackendClass},
    {"mixtral", kBackendClass},
    {"ministral", kBackendClass},
    {"mistral3", kBackendClass},
    {"phi3", kBackendClass},
    {"phimoe", kBackendClass},
    {"olmo2", kBackendClass},
    {"olmo3", kBackendClass},
    {"granite", kBackendClass},
    {"granitemoe", kBackendClass},
    {"granitemoeshared", kBackendClass},
    {"granitemoehybrid", kBackendClass},
    {"modernbert", kBackendClass},
    {"stablelm", kBackendClass},
    {"persimmon", kBackendClass},
    {"glm", kBackendClass},
    {"glm4", kBackendClass},
};

bool generic(std::string_view name) {
  return name.empty() || name == kBackendClass || name == "PythonBackend" ||
         name == "PreTrainedTokenizerFast" || name == "MistralCommonBackend";
}

std::string strip_fast(std::string name) {
  if (name.ends_with("Fast") && name != "PreTrainedTokenizerFast") name.resize(name.size() - 4);
  return name;
}

// A string value "ByteLevel" anywhere in the pipeline components: transformers
// searches tokenizer.json's text for '"ByteLevel"'. Depth is bounded by the
// JSON parser's limit.
bool mentions_byte_level(const Json& j) {
  if (j.is_string()) return j.get_ref<const std::string&>() == "ByteLevel";
  if (j.is_object() || j.is_array()) {
    for (const Json& v : j) {
      if (mentions_byte_level(v)) return true;
    }
  }
  return false;
}

bool file_is_byte_level(const Json& tokenizer_json) {
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder", "post_processor"}) {
    if (tokenizer_json.contains(key) && mentions_byte_level(tokenizer_json[key])) return true;
  }
  return false;
}

[[noreturn]] void bad_setting(const Source& src, const std::string& key, const char* want) {
  throw FormatError(src.file + ": '" + key + "' must be " + want);
}

bool bool_field(const Json& j, const char* key, bool fallback, const Source& src) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) bad_setting(src, key, "true or false");
  return j[key].get<bool>();
}

// An added-token object from a string or an AddedToken dict as transformers
// builds it: AddedToken(content, **flags), normalized defaulting to !special.
Json added_token(const Json& v, bool special, const std::string& what, const Source& src) {
  Json t = {{"content", ""},
            {"single_word", false},
            {"lstrip", false},
            {"rstrip", false},
            {"special", special}};
  if (v.is_string()) {
    t["content"] = v;
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    t["content"] = v["content"];
    for (const char* key : {"single_word", "lstrip", "rstrip", "special"})
      t[key] = bool_field(v, key, t[key].get<bool>(), src);
    if (special) t["special"] = true;
  } else {
    bad_setting(src, what, "a token string or an object with a string 'content'");
  }
  t["normalized"] =
      bool_field(v.is_object() ? v : Json::object(), "normalized", !t["special"].get<bool>(), src);
  return t;
}

}  // namespace

std::string string_of(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

bool Settings::flag(const char* key, bool fallback) const {
  return bool_field(config_, key, fallback, src_);
}

Json Settings::optional_flag(const char* key) const {
  if (!config_.contains(key) || config_[key].is_null()) return nullptr;
  return flag(key, false);
}

std::optional<Json> Settings::token(size_t key_index) const {
  const char* key = kSpecialTokenKeys[key_index];
  if (config_.contains(key)) {
    if (config_[key].is_null()) return std::nullopt;
    return added_token(config_[key], true, key, src_);
  }
  if (defaults_ == nullptr || (*defaults_)[key_index] == nullptr) return std::nullopt;
  return added_token(Json((*defaults_)[key_index]), true, key, src_);
}

std::string Settings::token_text(const char* key) const {
  for (size_t i = 0; i < kSpecialTokenKeys.size(); ++i) {
    if (std::string_view(kSpecialTokenKeys[i]) == key) {
      const std::optional<Json> t = token(i);
      return t ? (*t)["content"].get<std::string>() : "None";
    }
  }
  return "None";
}

// AutoTokenizer.from_pretrained's choice, in its order (no auto_map, no
// remote code; the name-pattern list matches Hub ids, not local directories).
std::string auto_tokenizer_class(const Json& tokenizer_config, const Json& model_config,
                                 const Json& tokenizer_json) {
  std::string declared = string_of(tokenizer_config, "tokenizer_class");
  if (declared.empty()) declared = string_of(model_config, "tokenizer_class");
  declared = strip_fast(declared);
  const std::string model_type = string_of(model_config, "model_type");
  const bool incorrect = std::find(std::begin(kIncorrectHubClass), std::end(kIncorrectHubClass),
                                   model_type) != std::end(kIncorrectHubClass);
  std::string registered;
  for (const Registered& r : kRegistered) {
    if (r.model_type == model_type) registered = r.tokenizer_class;
  }
  // LlamaTokenizer hardcodes Metaspace: a byte-level file (Llama 3 style) is
  // loaded as it is.
  if (declared == "LlamaTokenizer" && !incorrect && file_is_byte_level(tokenizer_json)) {
    return kBackendClass;
  }
  if (!declared.empty() && !registered.empty() && registered != declared) {
    if (!generic(registered)) {
      const std::string name = incorrect ? registered : declared;
      if (!generic(name)) return name;
    }
    return kBackendClass;
  }
  if (!declared.empty()) return generic(declared) ? kBackendClass : declared;
  return generic(registered) ? kBackendClass : registered;
}

}  // namespace hubzoo::tok

namespace hubzoo::tok {

namespace {

// Added tokens in the order they are added; a token already present is
// updated in place (tokenizers' add_tokens keeps its id). Indexed by content:
// Gemma's files carry thousands.
class AddedList {
 public:
  Json* find(const Json& content) {
    auto it = index_.find(content.is_string() ? content.get<std::string>() : content.dump());
    return it == index_.end() ? nullptr : &tokens_[it->second];
  }
  void upsert(const Json& token) {
    const Json& content = token.contains("content") ? token["content"] : Json();
    if (Json* t = find(content)) {
      *t = token;
    } else {
      index_.emplace(content.is_string() ? content.get<std::string>() : content.dump(),
                     tokens_.size());
      tokens_.push_back(token);
    }
  }
  // A special token the config names: one already added keeps its flags and
  // is marked special (transformers maps the name to that AddedToken, and
  // add_special_tokens sets the flag); a new one is added.
  void add_special(const Json& token) {
    if (Json* t = find(token["content"])) {
      (*t)["special"] = true;
    } else {
      upsert(token);
    }
  }
  Json release() { return Json(std::move(tokens_)); }

 private:
  std::vector<Json> tokens_;
  std::unordered_map<std::string, size_t> index_;
};

// tokenizer_config.json's added_tokens_decoder ({"<id>": AddedToken}) sorted
// by id, as TokenizersBackend.__init__ adds them.
std::vector<Json> config_added_tokens(const Json& config, const Source& src) {
  std::vector<std::pair<int64_t, Json>> by_id;
  const Json& decoder = config["added_tokens_decoder"];
  if (!decoder.is_object()) bad_setting(src, "added_tokens_decoder", "an object");
  for (const auto& [key, value] : decoder.items()) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || id < 0) bad_setting(src, "added_tokens_decoder key " + key, "an id");
    by_id.emplace_back(id, added_token(value, false, "added_tokens_decoder " + key, src));
  }
  std::stable_sort(by_id.begin(), by_id.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Json> out;
  for (auto& [id, token] : by_id) out.push_back(std::move(token));
  return out;
}

// extra_special_tokens (a list, or a dict of named tokens) or the older
// additional_special_tokens.
std::vector<Json> extra_special_tokens(const Json& config, const Source& src) {
  std::vector<Json> out;
  for (const char* key : {"extra_special_tokens", "additional_special_tokens"}) {
    if (!config.contains(key) || config[key].is_null()) continue;
    const Json& v = config[key];
    if (!v.is_array() && !v.is_object()) bad_setting(src, key, "a list of tokens");
    if (v.is_array() && v.empty()) continue;
    for (const Json& t : v) out.push_back(added_token(t, true, key, src));
    break;
  }
  return out;
}

// Model-specific named tokens ("image_token": "<image>"): other *_token keys
// holding a string or a serialized AddedToken, as tokenization_utils_base.py
// collects them (in key order here, file order there: it only changes the ids
// of several such tokens that are all new).
std::vector<Json> model_specific_tokens(const Json& config, const Source& src) {
  std::vector<Json> out;
  for (const auto& [key, value] : config.items()) {
    if (!key.ends_with("_token") || std::find(kSpecialTokenKeys.begin(), kSpecialTokenKeys.end(),
                                              key) != kSpecialTokenKeys.end()) {
      continue;
    }
    if (value.is_string() || (value.is_object() && string_of(value, "__type") == "AddedToken"))
      out.push_back(added_token(value, true, key, src));
  }
  return out;
}

// The added tokens AutoTokenizer ends with (TokenizersBackend.__init__ and
// _post_init): a class that rebuilds the pipeline starts from the config's
// added_tokens_decoder when present, TokenizersBackend from the file's with
// the config's on top; then every named special token missing is added.
void apply_added_tokens(const ClassSpec* spec, const Json& config, Json& tokenizer_json,
                        const Source& src) {
  AddedList list;
  const bool from_config = config.contains("added_tokens_decoder");
  if (!from_config || spec == nullptr) {
    const Json& file =
        tokenizer_json.contains("added_tokens") ? tokenizer_json["added_tokens"] : Json::array();
    for (const Json& t : file.is_array() ? file : Json::array()) list.upsert(t);
  }
  if (from_config) {
    for (const Json& t : config_added_tokens(config, src)) list.upsert(t);
  }
  const Settings settings(config, spec ? &spec->defaults : nullptr, src);
  std::vector<Json> specials;
  for (size_t i = 0; i < kSpecialTokenKeys.size(); ++i) {
    if (std::optional<Json> t = settings.token(i)) {
      list.add_special(*t);
      specials.push_back(std::move(*t));
    }
  }
  for (Json& t : model_specific_tokens(config, src)) {
    list.add_special(t);
    specials.push_back(std::move(t));
  }
  std::vector<Json> extra = extra_special_tokens(config, src);
  if (extra.empty() && spec && spec->extra_ids > 0) {
    const uint64_t n = uint_or(config, "extra_ids", spec->extra_ids, 1000, src);
    for (uint64_t i = 0; i < n; ++i)
      extra.push_back(added_token(Json("<extra_id_" + std::to_string(i) + ">"), true, "", src));
  }
  for (Json& t : extra) {
    list.add_special(t);
    specials.push_back(std::move(t));
  }
  if (spec && spec->plain_specials) {
    for (const Json& t : specials) list.upsert(added_token(t["content"], true, "", src));
  }
  tokenizer_json["added_tokens"] = list.release();
}

}  // namespace

bool apply_tokenizer_class(const std::string& name, const Json& config, Json& tokenizer_json,
                           const Source& src) {
  const ClassSpec* spec = find_class(name);
  const Json& model = tokenizer_json.contains("model") ? tokenizer_json["model"] : Json();
  if (spec && model.is_object() && string_of(model, "type") == spec->model) {
    spec->pipeline(Settings(config, &spec->defaults, src), tokenizer_json);
  } else {
    spec = nullptr;  // transformers would build another model from the vocabulary
  }
  apply_added_tokens(spec, config, tokenizer_json, src);
  return spec != nullptr;
}

namespace {

Json template_piece(const std::string& id, int type_id = 0) {
  return {{"SpecialToken", {{"id", id}, {"type_id", type_id}}}};
}
Json sequence_piece(const char* id, int type_id) {
  return {{"Sequence", {{"id", id}, {"type_id", type_id}}}};
}

// TemplateProcessing as the class's converter writes it: single = `before`
// $A `after`; pair = `before` $A `after` `between` $B `after`, the pair's
// second part (between, $B and the last `after`) with type id `b_type`.
Json template_processing(const std::vector<std::string>& before,
                         const std::vector<std::string>& after,
                         const std::vector<std::string>& between, int b_type,
                         const std::vector<std::pair<std::string, int64_t>>& ids) {
  Json single = Json::array(), pair = Json::array();
  for (const std::string& t : before) single.push_back(template_piece(t));
  single.push_back(sequence_piece("A", 0));
  for (const std::string& t : after) single.push_back(template_piece(t));
  pair = single;
  for (const std::string& t : between) pair.push_back(template_piece(t, b_type));
  pair.push_back(sequence_piece("B", b_type));
  for (const std::string& t : after) pair.push_back(template_piece(t, b_type));
  Json specials = Json::object();
  for (const auto& [token, id] : ids) {
    specials[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
  }
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

}  // namespace

Json class_post_processor(const std::string& name, const Json& config,
                          const std::function<std::optional<int64_t>(const std::string&)>& id_of,
                          const Source& src) {
  const ClassSpec* spec = find_class(name);
  if (spec == nullptr) return nullptr;
  const Settings s(config, &spec->defaults, src);
  auto id = [&](const std::string& token, std::optional<int64_t> fallback) -> int64_t {
    if (std::optional<int64_t> v = id_of(token)) return *v;
    if (fallback) return *fallback;
    throw FormatError(src.file + ": " + std::string(name) + " needs the id of special token '" +
                      token + "', which is not in the vocabulary");
  };
  if (spec->post == ClassPost::kBert) {  // models/bert/tokenization_bert.py
    const std::string cls = s.token_text("cls_token"), sep = s.token_text("sep_token");
    // [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1
    return template_processing({cls}, {sep}, {}, 1, {{cls, id(cls, 2)}, {sep, id(sep, 3)}});
  }
  if (spec->post == ClassPost::kRoberta) {  // models/roberta/tokenization_roberta.py
    const std::string cls = s.token_text("cls_token"), sep = s.token_text("sep_token");
    return {{"type", "RobertaProcessing"},
            {"sep", {sep, id(sep, std::nullopt)}},
            {"cls", {cls, id(cls, std::nullopt)}},
            {"trim_offsets", s.flag("trim_offsets", true)},
            {"add_prefix_space", s.flag("add_prefix_space", false)}};
  }
  if (spec->post == ClassPost::kXlmRoberta) {  // models/xlm_roberta/tokenization_xlm_roberta.py
    const std::string bos = s.token_text("bos_token"), eos = s.token_text("eos_token");
    // <s> $A </s> / <s> $A </s> </s> $B </s>, type ids 0
    return template_processing({bos}, {eos}, {eos}, 0,
                               {{bos, id(bos, std::nullopt)}, {eos, id(eos, std::nullopt)}});
  }
  if (spec->post == ClassPost::kT5) {  // models/t5/tokenization_t5.py: "</s>" with eos_token's id
    // $A </s> / $A </s> $B </s>, type ids 0
    return template_processing({}, {"</s>"}, {}, 0,
                               {{"</s>", id(s.token_text("eos_token"), std::nullopt)}});
  }
  return nullptr;
}

}  // namespace hubzoo::tok
