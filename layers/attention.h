// Causal self-attention with grouped KV heads (MHA/GQA/MQA), optional per-head
// q/k RMSNorm (Qwen3; Gemma's (1 + w) form), RoPE, attention-logit softcapping,
// a sliding window, and a KV cache. Rows are a ragged TokenBatch.
#pragma once

#include <optional>
#include <string>

#include "layers/batch.h"
#include "layers/kv_cache.h"
#include "layers/linear.h"
#include "layers/rope.h"
#include "layers/workspace.h"

namespace hubzoo {

// How q/k norms scale (layers/linear.h): by w after casting the normalised x
// (Qwen3, Llama's RMSNorm), by (1 + w) in fp32 (Gemma 2/3), by w in fp32 (Gemma 4).
using QkNormKind = NormKind;

// What a q/k norm normalises: each head's head_dim values (Qwen3, Gemma), or a
// row's whole projection, num_heads * head_dim (q) and num_kv_heads * head_dim
// (k) values, before the split into heads (OLMo 2).
enum class QkNormScope { kHead, kProjection };

struct AttentionOptions {
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool qkv_bias = false;
  bool o_bias = false;
  bool qk_norm = false;  // RMSNorm over head_dim of q and k before RoPE
  QkNormKind qk_norm_kind = QkNormKind::kWeight;
  QkNormScope qk_norm_scope = QkNormScope::kHead;
  // Eager bf16: RoPE's cos/sin stay fp32, so q and k rotate in fp32 and round
  // once (OLMo 2's rotary embedding does not cast them to the activations' dtype).
  bool rope_fp32 = false;
  bool v_norm = false;     // Gemma 4: unscaled RMSNorm over head_dim of v
  bool k_eq_v = false;     // Gemma 4 attention_k_eq_v: no v_proj, v is k_proj's output
  bool kv_shared = false;  // reads another layer's keys/values: no k/v tensors of its own
  bool fused_qkv = false;  // Phi-3: one {prefix}.qkv_proj [q | k | v] tensor in the checkpoint
  float rms_norm_eps = 1e-6f;
  float scale = 0.0f;    // score scale; 0: head_dim^-0.5
  float softcap = 0.0f;  // > 0: scores -> tanh(scores / softcap) * softcap
  int64_t window = 0;    // > 0: a row at position p sees positions (p - window, p]
  // An encoder's attention (EmbeddingGemma): a row at p sees every position of
  // its sequence, or (p - window, p + window) of it; the whole sequence comes
  // in one chunk from position 0.
  bool bidirectional = false;
};

// How one query head turns q k^T into attention weights.
struct ScoreOptions {
  float scale = 1.0f;
  float softcap = 0.0f;     // > 0: tanh(s / softcap) * softcap after scaling
  bool eager_bf16 = false;  // round as transformers' eager attention in bf16
  // Added to position j's score after scaling and softcapping (T5's relative
  // position bias, len floats; eager bf16 rounds the sum); null: none.
  const float* bias = nullptr;
  // Tile attention (ops/attend_tiles.h): fp32 scores without softcap or bias
  // computed as AMX-BF16 tiles compute them, for bf16 keys and values (a
  // bf16dot model whose matrices run on the tiles).
  bool tiles = false;
};

// One query head over `len` cached positions: softmax(q k^T * scale) v, with
// keys/values j at keys/values + j * row_stride. Scores reduce in position
// order in fp32. eager_bf16 rounds as transformers' eager attention in bf16:
// bf16(q k^T), bf16(* scale), softmax in fp32 cast to bf16, bf16(p v).
// scores: scratch of len floats; out: d floats.
void attend_head(const float* q, const float* keys, const float* values, int64_t row_stride,
                 int64_t len, int64_t d, float scale, bool eager_bf16, float* scores, float* out);

// The same with every score option (a position bias, softcapping): scores
// reduce in position order in fp32, as attend_head's eager path computes them.
void attend_head_scored(const float* q, const float* keys, const float* values, int64_t row_stride,
                        int64_t len, int64_t d, const ScoreOptions& o, float* scores, float* out);

// The geometry of attend_chunk.
struct ChunkOptions {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t window = 0;          // > 0: a row at position p sees positions (p - window, p]
  bool bidirectional = false;  // AttentionOptions::bidirectional
  ScoreOptions score;
};

// Attends every row of a batch to its own slot: q: [M, heads * D]; k, v:
// [M, kv_heads * D], the batch's keys and values as they are stored (rotated,
// rounded); out: [M, heads * D]. Stores k and v into `cache` layer `layer`
// (the cache's length for each slot is where the slot's rows start; the
// caller advances it). A layer the cache keeps in full is written first and
// read back; a windowed (ring-buffer) layer, which may hold fewer rows than a
// chunk needs, is read for positions before the chunk and from k, v within
// it, then written. Either way each (row, head) reduces over the same
// positions in the same order, so a ring buffer gives the bits a full cache
// with a window mask gives.
//
// store=false leaves the cache as it is (KV sharing: a layer reading another
// layer's keys, or a producer whose ring must keep its old rows until the
// layers sharing them have read them; store_chunk stores later).
// `ws.key_blocks` holds the keys transposed into blocks where the cache does
// not keep them so.
void attend_chunk(const TokenBatch& batch, const float* q, const float* k, const float* v,
                  KvCache& cache, int64_t layer, const ChunkOptions& opt, float* out,
                  ThreadPool& pool, LayerWorkspace& ws, bool store = true);

// Stores a batch's keys/values [M, row_size(layer)] into cache layer `layer`
// (a windowed layer: each slot's last `window` of them).
void store_chunk(const TokenBatch& batch, const float* k, const float* v, KvCache& cache,
                 int64_t layer);

// KV sharing (Gemma 4): a producer keeps its chunk for the layers that reuse
// it (and may defer storing it); a consumer attends to the producer's cache
// layer and chunk instead of computing keys and values.
struct KvSharing {
  KvChunk* keep = nullptr;         // producer: its chunk, computed here
  bool defer_store = false;        // producer: caller runs store_chunk after the consumers
  const KvChunk* reuse = nullptr;  // consumer: the producer's chunk
};

class Attention {
 public:
  // Tensors: {prefix}.{q,k,v,o}_proj.weight (+ .bias), {prefix}.{q,k}_norm.weight
  // ([head_dim]; kProjection: [heads * head_dim], [kv_heads * head_dim])
  // (k_eq_v: no v_proj; kv_shared: only q_proj, q_norm, o_proj; fused_qkv:
  // {prefix}.qkv_proj instead of q/k/v_proj). rope null:
  // no rotary embedding (positions enter only through the cache order).
  Attention(WeightLoader& w, const std::string& prefix, const AttentionOptions& opt,
            const Rope* rope);

  // x: [M, hidden] (already normed) -> out: [M, hidden], the o_proj output
  // (bf16 in eager mode, fp32 in fused mode for the residual add). Writes this layer's
  // keys/values for every row into `cache` (slot, pos), so a row sees its own
  // sequence's positions 0..pos (or its window of them) and nothing else.
  // With `sharing`, `layer` is the cache layer read (a consumer: its producer's).
  // q/k/v and the attention output live in `ws` (layers/workspace.h).
  void forward(const TokenBatch& batch, const float* x, float* out, KvCache& cache, int64_t layer,
               ThreadPool& pool, LayerWorkspace& ws, const KvSharing& sharing = {}) const;

 private:
  AttentionOptions opt_;
  Numerics numerics_;
  bool tiles_ = false;  // ScoreOptions::tiles: the matrices run on the tiles
  const Rope* rope_;
  // q_proj, k_proj (unless kv_shared) and v_proj (unless k_eq_v) as one
  // Linear (Linear::concat): outputs [M, q_size | kv_size | kv_size].
  Linear qkv_proj_, o_proj_;
  std::optional<RMSNorm> q_norm_, k_norm_, v_norm_;
};

}  // namespace hubzoo
