// Tile attention: attention of bf16 queries over bf16 keys and values with
// both products on the tile chain (ops/matmul.h), the arithmetic Intel
// AMX-BF16 computes, for the models whose matrices run on the tiles (bf16dot
// where matmul_bf16_tiles()). Scores are computed whole before the softmax
// (two passes over the keys, not an online softmax), so the probabilities
// multiply the values in one chain over all positions.
//
// The arithmetic of one query row q (d floats) over its visible positions
// [lo, end), exactly; every operation flushes denormal operands and results
// to zero (DAZ/FTZ), written flush() below:
//
//   qb[c] = flush(bf16(flush(q[c]))) (nearest even), 0 for c in [d, dk),
//           dk = d rounded up to 32
//   s_j   = the tile chain of qb and key j over dk: per 32-dim block an
//           even-dim chain e and an odd-dim chain o of flush(fma), each
//           from 0, then s = flush(s + flush(e + o)), s from 0
//   t_j   = flush(s_j * scale);  m = max of t_j over [lo, end)
//   p_j   = bf16(exp_f32(flush(t_j - m)))  (exp_f32: ops/attend_online.h)
//   L     = sum of p_j: position j into lane j % 16 of 16 lanes from 0
//           (flush(l + p_j), positions in order), lanes then summed as
//           attend_online.h sums them (i + 8, i + 4, i + 2, i + 1)
//   O[c]  = the tile chain of p and values column c over positions in
//           blocks of 32 aligned to the sequence (block b: positions
//           32b .. 32b + 31; p_j = 0 outside [lo, end)): per block an
//           even-position chain and an odd-position chain, as for s
//   out[c] = flush(O[c] / L);  end <= lo: zeros
//
// A zero product leaves a chain as it is (a chain from +0 never becomes -0),
// so blocks without a visible position add nothing, and a row's result
// depends only on its query, its visible keys and values and their
// positions: not on the other rows of its group, the group's range, or the
// batch. Keys and values of invisible positions in a row's blocks are
// multiplied by p = 0, so they must be finite (the packing below writes
// zeros where nothing was put).
#pragma once

#include <cstdint>

namespace hubzoo {

constexpr int64_t kTileBlock = 32;  // positions per block (one tile of probabilities)

// Keys and values of one KV head for the positions of blocks [block0,
// block0 + blocks), in the layouts the tile products read (uint16_t bf16
// bits, 64-byte aligned):
//   keys:   [block][half][dk / 32][16 dim pairs][16 positions][2]: per 16
//           positions and 32 dims one 1 KiB tile of (dim 2i, dim 2i + 1)
//           pairs of 16 positions;
//   values: [block][16 position pairs][dv][2]: per 32 positions the pairs
//           (position 2i, 2i + 1) of every column, dv = d rounded up to 16.
struct TileKv {
  int64_t d = 0;
  int64_t block0 = 0;
  int64_t blocks = 0;
  uint16_t* keys = nullptr;
  uint16_t* values = nullptr;

  int64_t dk() const { return (d + 31) / 32 * 32; }
  int64_t dv() const { return (d + 15) / 16 * 16; }
  int64_t key_elements() const { return blocks * kTileBlock * dk(); }
  int64_t value_elements() const { return blocks * kTileBlock * dv(); }
  // Zeros both (what no position is put into stays 0).
  void clear() const;
  // Puts position `pos` (within the blocks) of a key and a value row (d
  // floats each, bf16 values: the bf16 KV cache's, exact) into the tiles.
  void put(int64_t pos, const float* key, const float* value) const;
  // The same from bf16 bits: the key's dim c at key[c * key_stride], the
  // value's at value[c] (a bf16 KV cache page's rows, blocked keys or not).
  void put_bits(int64_t pos, const uint16_t* key, int64_t key_stride, const uint16_t* value) const;
};

// Up to 16 query rows of one KV head: row r's query at q[r], its result to
// out[r] (d floats each), its visible positions [lo[r], end[r]), which lie
// within the TileKv's blocks.
constexpr int64_t kTileRows = 16;
struct TileRows {
  int64_t rows = 0;
  const float* q[kTileRows] = {};
  float* out[kTileRows] = {};
  int64_t lo[kTileRows] = {};
  int64_t end[kTileRows] = {};
  float scale = 1.0f;
};

// The same rows read straight from a bf16 KV cache's pages with blocked keys
// (layers/kv_cache.h): page b holds positions 16b .. 16b + 15, this KV
// head's keys [d][16] at key_pages[b] + key_offset and the value of lane i
// at value_pages[b] + value_offset + i * value_stride (bf16 bits). The
// chains run on vector FMAs, a row at a time: what a decode step's few rows
// take instead of packing the whole sequence into tiles for one row.
struct TilePages {
  int64_t d = 0;
  const void* const* key_pages = nullptr;
  int64_t key_offset = 0;
  const void* const* value_pages = nullptr;
  int64_t value_offset = 0;
  int64_t value_stride = 0;
};
void attend_tiles_pages(const TilePages& kv, const TileRows& rows);

// The rows' attention over kv: on AMX-BF16 tiles where the CPU has them
// (amx_bf16_ready()), else the reference.
void attend_tiles(const TileKv& kv, const TileRows& rows);
// The arithmetic above in scalar code, row by row.
void attend_tiles_reference(const TileKv& kv, const TileRows& rows);
// Whether attend_tiles runs on AMX tiles here (the CPU has AMX-BF16 and the
// dispatched SIMD target is AVX-512), and how many calls did (tests).
bool attend_tiles_amx();
int64_t attend_tiles_amx_calls();

}  // namespace hubzoo
