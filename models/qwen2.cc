// Qwen2: Llama with biases on the q/k/v projections (none on o_proj).
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {

std::unique_ptr<CausalLM> load_qwen2(const LoadContext& ctx) {
  LlamaVariant v;
  v.qkv_bias_always = true;
  v.sliding_window_keys = true;
  v.default_vocab_size = 151936;
  v.default_max_position_embeddings = 32768;
  return load_llama_variant(ctx, v);
}

}  // namespace hubzoo
