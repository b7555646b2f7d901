// A model's text side, its tokenizer and chat template, read in one call: a
// GGUF file's metadata (Gemma 3's holds a 262k-token vocabulary, ~0.1 s to
// parse) is parsed once for both. Callers that load weights too run this on a
// thread of its own meanwhile (engine/model_with_text.h): deriving Gemma's
// merges takes about as long as mapping and packing its weights.
#pragma once

#include <exception>
#include <filesystem>
#include <optional>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo {

struct PretrainedText {
  std::filesystem::path source;  // what was read
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;
  // Why there is no chat template (a hubzoo::Error: none in the source, or malformed).
  std::exception_ptr chat_template_error;
};

// `source`: a .gguf file or a snapshot folder, as ModelInfo::tokenizer_source().
// The tokenizer throws as Tokenizer::from_pretrained; a chat template's
// hubzoo::Error is kept in chat_template_error, as ChatTemplate::from_snapshot
// would have thrown it.
PretrainedText load_pretrained_text(const std::filesystem::path& source);

}  // namespace hubzoo
