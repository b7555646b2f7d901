// Entry points of the model families, one per models/*.cc file; the registry
// (models/registry.cc) maps config.json `architectures` to them.
#pragma once

#include <memory>

#include "models/causal_lm.h"

namespace hubzoo {

std::unique_ptr<CausalLM> load_llama(const LoadContext& ctx);
std::unique_ptr<CausalLM> load_qwen2(const LoadContext& ctx);
std::unique_ptr<CausalLM> load_qwen3(const LoadContext& ctx);
std::unique_ptr<CausalLM> load_qwen3_moe(const LoadContext& ctx);
std::unique_ptr<CausalLM> load_gemma2(const LoadContext& ctx);       // models/gemma.cc
std::unique_ptr<CausalLM> load_gemma3_text(const LoadContext& ctx);  // models/gemma.cc
std::unique_ptr<CausalLM> load_gemma4_text(const LoadContext& ctx);  // models/gemma4.cc
std::unique_ptr<CausalLM> load_olmo2(const LoadContext& ctx);        // models/olmo2.cc
std::unique_ptr<CausalLM> load_granite(const LoadContext& ctx);      // models/granite.cc
std::unique_ptr<CausalLM> load_qwen2_moe(const LoadContext& ctx);    // models/qwen2_moe.cc
std::unique_ptr<CausalLM> load_mistral(const LoadContext& ctx);      // models/mistral.cc
std::unique_ptr<CausalLM> load_phi3(const LoadContext& ctx);         // models/phi3.cc
std::unique_ptr<CausalLM> load_smollm3(const LoadContext& ctx);      // models/smollm3.cc
// The text towers of multimodal checkpoints (models/gemma_multimodal.cc).
std::unique_ptr<CausalLM> load_gemma3_conditional(const LoadContext& ctx);
std::unique_ptr<CausalLM> load_gemma4_conditional(const LoadContext& ctx);

}  // namespace hubzoo
