#include "tokenizer/pretrained_text.h"

#include "base/error.h"
#include "base/heap.h"
#include "io/gguf.h"
#include "tokenizer/gguf_tokenizer.h"

namespace hubzoo {

PretrainedText load_pretrained_text(const std::filesystem::path& source) {
  std::error_code ec;
  if (source.extension() == ".gguf" && std::filesystem::is_regular_file(source, ec)) {
    std::optional<Tokenizer> tokenizer;
    std::optional<ChatTemplate> chat_template;
    std::exception_ptr chat_template_error;
    {
      const std::unique_ptr<GgufFile> file = GgufFile::open(source);
      tokenizer.emplace(tokenizer_from_gguf_metadata(file->metadata(), source.string()));
      try {
        chat_template.emplace(ChatTemplate::from_gguf_metadata(file->metadata(), source.string()));
      } catch (const Error&) {
        chat_template_error = std::current_exception();
      }
    }
    release_free_heap();  // the metadata's JSON values
    return {source, std::move(*tokenizer), std::move(chat_template), chat_template_error};
  }
  PretrainedText text{source, Tokenizer::from_pretrained(source), std::nullopt, nullptr};
  try {
    text.chat_template.emplace(ChatTemplate::from_snapshot(source));
  } catch (const Error&) {
    text.chat_template_error = std::current_exception();
  }
  return text;
}

}  // namespace hubzoo
