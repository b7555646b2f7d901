#include "engine/model_with_text.h"

#include <future>

namespace hubzoo {

ModelWithText load_model_with_text(const std::string& model, const std::string& gguf_file,
                                   const std::function<std::unique_ptr<CausalLM>()>& load) {
  std::future<PretrainedText> reading =
      std::async(std::launch::async, load_pretrained_text,
                 resolve_model_source(model, gguf_file).tokenizer_source());
  std::unique_ptr<CausalLM> lm = load();  // on throwing, ~future waits for the reader
  PretrainedText text = reading.get();
  // The loader resolves the reference as resolve_model_source does; should it
  // ever read elsewhere, the text side follows the model.
  const std::filesystem::path& source = lm->info().tokenizer_source();
  if (text.source != source) text = load_pretrained_text(source);
  return {std::move(lm), std::move(text)};
}

}  // namespace hubzoo
