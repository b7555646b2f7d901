// Qwen3: Llama with RMSNorm on each query and key head (before RoPE), an
// explicit head_dim (default 128, independent of hidden_size) and optional
// attention biases.
#include "models/families.h"
#include "models/llama.h"

namespace hubzoo {

std::unique_ptr<CausalLM> load_qwen3(const LoadContext& ctx) {
  LlamaVariant v;
  v.attention_bias_key = true;
  v.qk_norm = true;
  v.sliding_window_keys = true;
  v.default_head_dim = 128;
  v.default_vocab_size = 151936;
  v.default_max_position_embeddings = 32768;
  return load_llama_variant(ctx, v);
}

}  // namespace hubzoo
