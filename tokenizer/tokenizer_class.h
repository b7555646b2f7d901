// transformers 5.23's tokenizer classes, emulated on tokenizer.json.
//
// AutoTokenizer.from_pretrained(dir) picks a Python class from
// tokenizer_config.json's `tokenizer_class` and config.json's `model_type`
// (models/auto/tokenization_auto.py). TokenizersBackend (alias
// PreTrainedTokenizerFast) loads tokenizer.json as it is. A class with its own
// __init__ (Qwen2Tokenizer, LlamaTokenizer, GemmaTokenizer, GPT2Tokenizer,
// BertTokenizer, RobertaTokenizer, XLMRobertaTokenizer, T5Tokenizer) keeps only
// the vocabulary, merges and post-processor of tokenizer.json and builds the
// rest itself: model flags, normalizer, pre-tokenizer, decoder and, for the
// encoder classes, the post-processor. Added tokens then come from
// tokenizer_config.json's `added_tokens_decoder` when present, and named
// special tokens (bos/eos/unk/sep/pad/cls/mask, other *_token keys,
// extra_special_tokens) missing from them are added as special tokens, for
// every class.
// Where the file disagrees with its class, AutoTokenizer follows the class;
// so does Tokenizer::from_pretrained(dir).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "tokenizer/components.h"

namespace hubzoo::tok {

inline constexpr const char* kBackendClass = "TokenizersBackend";

// The class AutoTokenizer instantiates, "Fast" suffix dropped; kBackendClass
// when it loads tokenizer.json as is (also for classes not emulated here).
// `model_config` is config.json (an empty object when there is none).
std::string auto_tokenizer_class(const Json& tokenizer_config, const Json& model_config,
                                 const Json& tokenizer_json);

// Rewrites `tokenizer_json` in place into the pipeline class `name` builds
// from it, with tokenizer_config.json's settings (add_prefix_space, legacy,
// do_lower_case, special tokens ...). A class not emulated, or whose model
// type differs from the file's (where transformers would build a different
// model from the vocabulary), only gets the added-token step. True when the
// class's pipeline was applied. FormatError naming the field when a setting
// has the wrong type.
bool apply_tokenizer_class(const std::string& name, const Json& tokenizer_config,
                           Json& tokenizer_json, const Source& src);

// The post-processor class `name` sets once its tokens are added (Bert,
// RoBERTa, XLM-R, T5 build theirs from the special tokens' ids), or null to
// keep the file's. Only after apply_tokenizer_class returned true. `id_of` looks a token up in the
// finished tokenizer.
Json class_post_processor(const std::string& name, const Json& tokenizer_config,
                          const std::function<std::optional<int64_t>(const std::string&)>& id_of,
                          const Source& src);

}  // namespace hubzoo::tok
