// A generation model and its text side (tokenizer, chat template), loaded
// together: the text side reads on a thread of its own while the weights load.
// On Gemma 3's GGUF the two take about as long as each other (deriving the
// 262k-token vocabulary's merges vs mapping and packing the weights), so a
// server answers sooner by the shorter of them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "models/causal_lm.h"
#include "tokenizer/pretrained_text.h"

namespace hubzoo {

struct ModelWithText {
  std::unique_ptr<CausalLM> model;
  PretrainedText text;  // read from model->info().tokenizer_source()
};

// `load` loads `model` (load_causal_lm, load_generation_lm, with options).
// Its error wins over the text side's: the model's fails, the text's is dropped.
ModelWithText load_model_with_text(const std::string& model, const std::string& gguf_file,
                                   const std::function<std::unique_ptr<CausalLM>()>& load);

}  // namespace hubzoo
