// The step buffers of the layer forwards (Attention, GatedMlp, SparseMoe),
// owned by the model that runs them (models/decoder.h keeps one) and reused
// from step to step: allocated once, grown only when a bigger batch comes,
// freed with the model. Not thread-safe: one forward at a time uses a
// workspace (the engine's Scheduler runs a model's steps one after another);
// the parallel jobs inside a forward only read what the calling thread
// prepared in it, or write disjoint parts of it.
#pragma once

#include <vector>

#include "ops/scratch.h"

namespace hubzoo {

// The keys and values one attention layer computed for a batch, as stored:
// [M, kv_heads * D] each.
struct KvChunk {
  std::vector<float> k, v;
};

struct LayerWorkspace {
  // The buffers of the sublayers that run one after another within a decoder
  // layer, sized by the largest of them, so they never coexist (a 2048-token
  // prefill would otherwise hold q/k/v, attention and gate/up outputs at
  // once): Attention's [M, q | k | v], q, attention output, keys and values;
  // GatedMlp's [M, gate | up].
  ScratchBuffer step;
  // Attention over a full cache without blocked keys: each slot's keys
  // transposed into blocks (ops/attend_online.h) for the batch's rows; or,
  // tile attention, each slot's keys and values packed into the tile
  // layouts (ops/attend_tiles.h, TileKv), 64-byte aligned within it.
  ScratchBuffer key_blocks;
  // A decode step's attention split over the threads: each call's scores
  // (ops/attend_online.h, attend_online_scores).
  ScratchBuffer scores;
  // SparseMoe: the gathered rows of an expert, its output, and the weighted
  // (token, rank) cells (layers/moe.h).
  ScratchBuffer expert_rows, expert_out, moe_cells;
  // SparseMoe's shared expert: its output [M, H] and gate [M].
  ScratchBuffer shared_out, shared_gate;

  void release() {
    for (ScratchBuffer* b : {&step, &key_blocks, &scores, &expert_rows, &expert_out, &moe_cells,
                             &shared_out, &shared_gate}) {
      b->release();
    }
  }
};

}  // namespace hubzoo
