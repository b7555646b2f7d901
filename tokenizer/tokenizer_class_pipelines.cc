// The pipelines transformers 5.23's tokenizer classes build in __init__ from
// tokenizer.json's vocabulary and merges, as tokenizer.json rewrites. Each
// builder names the file it mirrors; settings come from tokenizer_config.json
// with the class's defaults.
#include <array>
#include <string_view>

#include "base/error.h"
#include "tokenizer/tokenizer_class.h"
#include "tokenizer/tokenizer_class_impl.h"

namespace hubzoo::tok {

namespace {

const char* const kSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's space

// models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX.
const char* const kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Json byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

Json replace(const char* from, const char* to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

Json metaspace(const char* prepend_scheme, bool split) {
  return {{"type", "Metaspace"},
          {"replacement", kSpace},
          {"prepend_scheme", prepend_scheme},
          {"split", split}};
}

// Sentencepiece byte-fallback decoding (Llama, Gemma): ▁ -> space, <0x..> -> bytes.
Json sentencepiece_decoder(bool strip_prefix_space) {
  Json steps = Json::array({replace(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (strip_prefix_space)
    steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", steps}};
}

// BPE model flags of `tokenizers.models.BPE(vocab, merges, **flags)`; unset
// ones are the constructor's defaults.
struct BpeFlags {
  Json unk_token = nullptr;  // None
  Json continuing_subword_prefix = nullptr, end_of_word_suffix = nullptr;
  bool fuse_unk = false, byte_fallback = false;
};

void set_bpe(Json& model, const BpeFlags& f) {
  model["dropout"] = nullptr;
  model["unk_token"] = f.unk_token;
  model["continuing_subword_prefix"] = f.continuing_subword_prefix;
  model["end_of_word_suffix"] = f.end_of_word_suffix;
  model["fuse_unk"] = f.fuse_unk;
  model["byte_fallback"] = f.byte_fallback;
  model["ignore_merges"] = false;
}

// The file's sentencepiece charsmap, alone or inside a Sequence (what
// convert_to_native_format extracts as _spm_precompiled_charsmap), else null.
Json precompiled_of(const Json& normalizer) {
  if (!normalizer.is_object()) return nullptr;
  if (string_of(normalizer, "type") == "Precompiled" && normalizer.contains("precompiled_charsmap"))
    return normalizer;
  if (string_of(normalizer, "type") == "Sequence" && normalizer.contains("normalizers") &&
      normalizer["normalizers"].is_array()) {
    for (const Json& n : normalizer["normalizers"]) {
      if (string_of(n, "type") == "Precompiled" && n.contains("precompiled_charsmap")) return n;
    }
  }
  return nullptr;
}

// models/qwen2/tokenization_qwen2.py
void qwen2(const Settings& s, Json& t) {
  set_bpe(t["model"], {.continuing_subword_prefix = "", .end_of_word_suffix = ""});
  t["normalizer"] = {{"type", "NFC"}};
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", kQwen2Split}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({split, byte_level(s.flag("add_prefix_space", false), false)})}};
  t["decoder"] = byte_level(true, true);
}

// models/llama/tokenization_llama.py (prepend scheme: convert_slow_tokenizer's
// _get_prepend_scheme; `legacy` defaults to False).
void llama(const Settings& s, Json& t) {
  const bool prefix = s.flag("add_prefix_space", true);
  set_bpe(t["model"], {.fuse_unk = true, .byte_fallback = true});
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] =
      metaspace(prefix ? (s.flag("legacy", false) ? "always" : "first") : "never", false);
  t["decoder"] = sentencepiece_decoder(prefix);
}

// models/gemma/tokenization_gemma.py
void gemma(const Settings& s, Json& t) {
  set_bpe(t["model"],
          {.unk_token = s.token_text("unk_token"), .fuse_unk = true, .byte_fallback = true});
  t["normalizer"] = replace(" ", kSpace);
  t["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"String", " "}}},
                        {"behavior", "MergedWithPrevious"},
                        {"invert", false}};
  t["decoder"] = sentencepiece_decoder(false);
}

// models/gpt2/tokenization_gpt2.py; models/roberta/tokenization_roberta.py
// builds the same pipeline (its post-processor: class_post_processor).
void gpt2(const Settings& s, Json& t) {
  set_bpe(t["model"], {.continuing_subword_prefix = "", .end_of_word_suffix = ""});
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = byte_level(s.flag("add_prefix_space", false), true);
  t["decoder"] = byte_level(true, true);
}

// models/bert/tokenization_bert.py
void bert(const Settings& s, Json& t) {
  Json& m = t["model"];
  m["unk_token"] = s.token_text("unk_token");
  m["continuing_subword_prefix"] = "##";
  m["max_input_chars_per_word"] = 100;
  t["normalizer"] = {{"type", "BertNormalizer"},
                     {"clean_text", true},
                     {"handle_chinese_chars", s.flag("tokenize_chinese_chars", true)},
                     {"strip_accents", s.optional_flag("strip_accents")},
                     {"lowercase", s.flag("do_lower_case", true)}};
  t["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  t["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
}

// Sentencepiece Unigram classes: the charsmap kept, whitespace split, Metaspace.
void unigram(Json& t, int64_t unk_id, const char* prepend_scheme) {
  t["model"]["unk_id"] = unk_id;
  t["model"]["byte_fallback"] = false;
  t["normalizer"] = precompiled_of(t.contains("normalizer") ? t["normalizer"] : Json());
  t["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", Json::array({{{"type", "WhitespaceSplit"}},
                                                       metaspace(prepend_scheme, true)})}};
  t["decoder"] = metaspace(prepend_scheme, true);
}

// models/xlm_roberta/tokenization_xlm_roberta.py
void xlm_roberta(const Settings& s, Json& t) {
  unigram(t, 3, s.flag("add_prefix_space", true) ? "always" : "never");
}

// models/t5/tokenization_t5.py
void t5(const Settings&, Json& t) { unigram(t, 2, "always"); }

}  // namespace

const ClassSpec* find_class(std::string_view name) {
  using P = ClassPost;
  static constexpr std::array<const char*, 7> kBertTokens = {nullptr, nullptr, "[UNK]", "[SEP]",
                                                             "[PAD]", "[CLS]", "[MASK]"};
  static constexpr std::array<const char*, 7> kRobertaTokens = {"<s>",   "</s>", "<unk>", "</s>",
                                                                "<pad>", "<s>",  "<mask>"};
  static const ClassSpec kClasses[] = {
      {"Qwen2Tokenizer",
       "BPE",
       {nullptr, "<|endoftext|>", "<|endoftext|>", nullptr, "<|endoftext|>", nullptr, nullptr},
       qwen2,
       true,
       0,
       P::kFile},
      {"LlamaTokenizer", "BPE", {"<s>", "</s>", "<unk>"}, llama, false, 0, P::kFile},
      {"GemmaTokenizer",
       "BPE",
       {"<bos>", "<eos>", "<unk>", nullptr, "<pad>", nullptr, "<mask>"},
       gemma,
       false,
       0,
       P::kFile},
      {"GPT2Tokenizer",
       "BPE",
       {"<|endoftext|>", "<|endoftext|>", "<|endoftext|>"},
       gpt2,
       false,
       0,
       P::kFile},
      {"RobertaTokenizer", "BPE", kRobertaTokens, gpt2, false, 0, P::kRoberta},
      {"BertTokenizer", "WordPiece", kBertTokens, bert, false, 0, P::kBert},
      // models/distilbert/tokenization_distilbert.py: BertTokenizer's __init__.
      {"DistilBertTokenizer", "WordPiece", kBertTokens, bert, false, 0, P::kBert},
      {"XLMRobertaTokenizer", "Unigram", kRobertaTokens, xlm_roberta, false, 0, P::kXlmRoberta},
      {"T5Tokenizer",
       "Unigram",
       {nullptr, "</s>", "<unk>", nullptr, "<pad>"},
       t5,
       false,
       100,
       P::kT5},
  };
  for (const ClassSpec& c : kClasses) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace hubzoo::tok
