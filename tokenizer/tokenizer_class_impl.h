// Internals of tokenizer_class.cc shared with tokenizer_class_pipelines.cc.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/components.h"

namespace hubzoo::tok {

// SPECIAL_TOKENS_ATTRIBUTES of tokenization_utils_base.py, in its order.
inline constexpr std::array<const char*, 7> kSpecialTokenKeys = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

// A string field of an object, or "" when absent or not a string.
std::string string_of(const Json& j, const char* key);

// tokenizer_config.json's settings, with a class's defaults.
class Settings {
 public:
  Settings(const Json& config, const std::array<const char*, 7>* defaults, const Source& src)
      : config_(config), defaults_(defaults), src_(src) {}
  // A boolean setting; `fallback` when absent or null, FormatError otherwise.
  bool flag(const char* key, bool fallback) const;
  // null or a boolean (BertTokenizer's strip_accents).
  Json optional_flag(const char* key) const;
  // A named special token as an added-token object (content, flags), or
  // nullopt when the config sets it to null or neither it nor the class has one.
  std::optional<Json> token(size_t key_index) const;
  // The text the class passes as str(token): "None" when unset, as Python.
  std::string token_text(const char* key) const;

 private:
  const Json& config_;
  const std::array<const char*, 7>* defaults_;  // nullptr: no class defaults
  const Source& src_;
};

// The post-processor a class sets after its tokens are added.
enum class ClassPost { kFile, kBert, kRoberta, kXlmRoberta, kT5 };

// An emulated class: the model it builds, its special-token defaults (in
// kSpecialTokenKeys order, nullptr: none), the pipeline it sets.
struct ClassSpec {
  std::string_view name;
  std::string_view model;  // "BPE", "WordPiece", "Unigram"
  std::array<const char*, 7> defaults;
  void (*pipeline)(const Settings&, Json& tokenizer_json);
  // Qwen2Tokenizer re-adds every special token as AddedToken(t, special=True).
  bool plain_specials;
  // T5Tokenizer's default extra_ids (<extra_id_N> sentinels), 0 for others.
  int extra_ids;
  ClassPost post;
};

const ClassSpec* find_class(std::string_view name);

}  // namespace hubzoo::tok
