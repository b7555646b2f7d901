// tokenizer_config.json on top of tokenizer.json: what transformers'
// TokenizersBackend changes when it wraps the `tokenizers` pipeline.
#include <string>
#include <utility>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo {

namespace tok {

// transformers' clean_up_tokenization, a fixed list of replacements in order.
std::string clean_up_tokenization(std::string text) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    const std::string f = from, t = to;
    std::string out;
    out.reserve(text.size());
    size_t at = 0;
    for (size_t hit; (hit = text.find(f, at)) != std::string::npos; at = hit + f.size()) {
      out.append(text, at, hit - at).append(t);
    }
    out.append(text, at, std::string::npos);
    text = std::move(out);
  }
  return text;
}

}  // namespace tok

void Tokenizer::apply_tokenizer_config(const tok::Json& config, const std::string& source) {
  if (!config.is_object()) throw FormatError(source + ": top level must be an object");
  // transformers calls the backend with padding and truncation off unless asked.
  truncation_.reset();
  padding_.reset();
  // Cleanup is skipped for BPE models, where it would corrupt text.
  const tok::Json clean = config.value("clean_up_tokenization_spaces", tok::Json());
  if (!clean.is_boolean() && !clean.is_null()) {
    throw FormatError(source + ": 'clean_up_tokenization_spaces' must be true or false");
  }
  clean_up_spaces_ = clean.is_boolean() && clean.get<bool>() && !bpe_model_;

  // add_bos_token / add_eos_token are ignored when tokenizer.json exists:
  // transformers drops them and keeps the file's post-processor.
}

}  // namespace hubzoo
