// A GGUF file's tokenizer metadata as the tokenizer.json + tokenizer_config
// transformers 5.23 builds from it for AutoTokenizer.from_pretrained(dir,
// gguf_file=...) (integrations/gguf/gguf_tokenizer_mapping.py):
//   tokenizer.ggml.model "gpt2": byte-level BPE (GPT2Tokenizer), vocabulary
//     respelled in the byte alphabet, merges from the file (or derived from the
//     scores), pre-tokenizer regex picked by tokenizer.ggml.pre;
//   "llama": sentencepiece-style BPE with byte fallback (LlamaTokenizer:
//     Metaspace, prepend "first"), merges from the file or derived from the
//     scores; for gemma/gemma2/gemma3 files GemmaTokenizer's pipeline, space
//     tokens respelled with U+2581 and merges derived from file order.
// Tokens the file marks CONTROL become special added tokens, USER_DEFINED ones
// plain added tokens; bos/eos/unk/pad come from tokenizer.ggml.*_token_id;
// add_bos_token (default true for "llama") / add_eos_token make the
// TemplateProcessing post-processor; tokenizer.chat_template goes to the config.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace hubzoo {

struct GgufTokenizerFiles {
  nlohmann::json tokenizer;       // tokenizer.json
  nlohmann::ordered_json config;  // tokenizer_config.json (bos/eos/unk/pad,
                                  // add_bos_token, add_eos_token, chat_template)
};

// ConfigError naming the key when tokenizer metadata is missing, of the wrong
// type, out of range (ids, counts, token lengths bounded before use), or names
// a tokenizer model other than gpt2/llama.
GgufTokenizerFiles gguf_tokenizer_files(const nlohmann::ordered_json& metadata);

// Only the tokenizer_config.json part (special tokens, add_bos/eos_token,
// chat_template), with the same checks of the keys it reads: what a chat
// template needs, without deriving the vocabulary and merges (seconds for
// Gemma's 262k tokens).
nlohmann::ordered_json gguf_tokenizer_config(const nlohmann::ordered_json& metadata);

// The tokenizer those files make, through Tokenizer::from_json and
// apply_tokenizer_config as for a snapshot. `source` names the file in errors.
Tokenizer tokenizer_from_gguf_metadata(const nlohmann::ordered_json& metadata,
                                       const std::string& source);

}  // namespace hubzoo
