// `hubzoo generate` on an encoder-decoder (T5, FLAN-T5, mT5): the prompt is
// the encoder's input, the decoder generates from its start token.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "engine/seq2seq_causal.h"
#include "engine/seq2seq_generate.h"
#include "hub/snapshot.h"
#include "io/json.h"
#include "models/seq2seq.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo::cli {

bool is_seq2seq_model(const std::string& model, const std::string& gguf_file) {
  return hubzoo::is_seq2seq_model(model, gguf_file);
}

int run_seq2seq_generate(const Seq2SeqGenerateArgs& a) {
  auto model = load_seq2seq_lm(a.model, {a.threads, Numerics::parse(a.dtype, a.mode)});
  const std::filesystem::path snapshot = model->info().snapshot;
  std::optional<Tokenizer> tokenizer;
  if (!a.prompt.empty() || std::filesystem::exists(snapshot / "tokenizer.json")) {
    tokenizer = Tokenizer::from_pretrained(snapshot);
  }
  Seq2SeqRequest r;
  // A text prompt is encoded as transformers' tokenizer(text) does (T5 appends </s>).
  r.input_ids = a.prompt.empty() ? a.ids : tokenizer->encode(a.prompt).ids;
  if (r.input_ids.empty()) throw InvalidArgument("--prompt encodes to no tokens");
  r.max_new_tokens = a.max_new_tokens;
  r.sampling = {a.temperature, a.top_k, a.top_p, a.seed};
  r.stop_at_eos = !a.ignore_eos;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int64_t> tokens = seq2seq_generate(*model, {r})[0];
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json text = nullptr;
  if (tokenizer) text = tokenizer->decode(tokens, true);
  if (a.json) {
    std::cout << nlohmann::json({{"ids", tokens}, {"text", text}}).dump() << "\n";
    return 0;
  }
  if (tokenizer) {
    std::cout << text.get<std::string>() << "\n";
  } else {
    for (const int64_t t : tokens) std::cout << t << " ";
    std::cout << "\n";
  }
  std::fprintf(stderr, "encode %zu tokens, decode %zu tokens: %.3f s (%.2f tok/s)\n",
               r.input_ids.size(), tokens.size(), seconds, tokens.size() / std::max(seconds, 1e-9));
  return 0;
}

}  // namespace hubzoo::cli
