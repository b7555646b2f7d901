// Attention of query rows over a range of cached positions in fp32, one pass
// over the keys with an online softmax (the "flash attention" order), the
// keys read as 16-position blocks transposed to [dim][16] so that the scores
// of 16 positions are one vector.
//
// Positions are grouped into blocks of kKeyBlock that are aligned to the
// sequence (block b holds positions 16b .. 16b + 15), whatever range a row
// reads: a row with visible positions [lo, p] starts in block lo / 16 at lane
// lo % 16 (`lane0`). The arithmetic of one (query row, head), exactly, is:
//
//   per block, for each visible lane i (key k_i, value v_i):
//     s_i = (c0 + c1) + (c2 + c3), c_r = fma chain over the dims d with
//           d % 4 == r, in order, from 0: c_r = fma(q[d], k_i[d], c_r)
//     s_i = s_i * scale                     (lanes not visible: -inf)
//     m'  = max(m, max_i s_i)               (m = -inf before the first block)
//     a   = exp(m - m'),  p_i = exp(s_i - m')
//     l_i = fma(l_i, a, p_i)                (16 lanes of l kept apart, from 0)
//     o[d] = o[d] * a, then o[d] = fma(p_i, v_i[d], o[d]) over visible i in order
//   out[d] = o[d] / L, L = sum of the 16 lanes of l: lanes i and i + 8 first,
//   then i + 4, i + 2, i + 1 (pairwise, fixed order)
//
// exp is the polynomial of exp_f32() below, the same bits in every
// implementation. So a row's result depends only on its query, its visible
// keys and values and their positions: not on the other rows of a batch, the
// thread count or the SIMD target (targets without a native FMA run the
// scalar reference). Rows that share a key/value head are passed together so
// that each key and value is loaded once for all of them.
#pragma once

#include <cstdint>

namespace hubzoo {

constexpr int64_t kKeyBlock = 16;

// How a paged KV cache keeps keys or values (layers/kv_cache.h): float32, or
// 16-bit elements, bf16 or IEEE binary16 (half) bits, each standing for the
// float it widens to exactly.
enum class KvElement : uint8_t { kF32, kBF16, kF16 };
// "float32", "bfloat16", "float16" (torch's names).
inline const char* kv_element_name(KvElement e) {
  return e == KvElement::kBF16 ? "bfloat16" : e == KvElement::kF16 ? "float16" : "float32";
}

// Number of blocks a range of `len` positions starting at lane `lane0` spans.
inline int64_t key_blocks(int64_t lane0, int64_t len) {
  return (lane0 + len + kKeyBlock - 1) / kKeyBlock;
}

// Keys j = 0..len-1 (key j at keys + j * stride, d floats) into blocks
// kt[key_blocks(lane0, len)][d][16]: key j is lane (lane0 + j) % 16 of block
// (lane0 + j) / 16. Lanes outside the range are set to 0.
void transpose_key_blocks(const float* keys, int64_t stride, int64_t lane0, int64_t len, int64_t d,
                          float* kt);
void transpose_key_blocks_reference(const float* keys, int64_t stride, int64_t lane0, int64_t len,
                                    int64_t d, float* kt);

// One call of attend_online_f32: nq query rows (row g at q + g * q_stride, d
// floats) over positions j = 0..len-1. Keys are in `kt`, block b at
// kt + b * kt_stride (as transpose_key_blocks wrote them for this lane0,
// kt_stride = d * 16, or a blocked KV cache's; lanes before lane0 and past the
// range may hold anything finite); value j at values + j * v_stride. Row g's
// result goes to out + g * out_stride. len == 0 gives zeros.
struct OnlineAttention {
  const float* q = nullptr;
  int64_t q_stride = 0;
  int64_t nq = 1;
  const float* kt = nullptr;
  int64_t kt_stride = 0;
  const float* values = nullptr;
  int64_t v_stride = 0;
  int64_t lane0 = 0;  // lane of position 0 in block 0
  int64_t len = 0;
  int64_t d = 0;
  float scale = 1.0f;
  float* out = nullptr;
  int64_t out_stride = 0;
  // Paged keys and values (a paged KV cache, layers/kv_cache.h): when set,
  // block b's keys are at kt_pages[b] + kt_offset elements instead of
  // kt + b * kt_stride, and the value of lane i of block b at v_pages[b] +
  // v_offset + i * v_stride elements instead of values + j * v_stride. The
  // elements are floats, or 16-bit ones where kt_type / v_type say so (pages
  // only), read as the floats they stand for. Only addresses and loads
  // change: the arithmetic, and so every bit of the result, is the same.
  const void* const* kt_pages = nullptr;
  int64_t kt_offset = 0;
  const void* const* v_pages = nullptr;
  int64_t v_offset = 0;
  KvElement kt_type = KvElement::kF32;
  KvElement v_type = KvElement::kF32;
  // With pages: fetch the keys and values of the block two ahead while a
  // block is computed (software prefetch; the hardware prefetcher stops at
  // every page). For pages that are cold, a decode step's; a prompt's rows
  // read their pages one after another, hot after the first. No effect on
  // the result.
  bool fetch_ahead = false;
};

void attend_online_f32(const OnlineAttention& a);

// The same arithmetic in scalar code (std::fma), one row and one lane at a time.
void attend_online_f32_reference(const OnlineAttention& a);

// attend_online_f32's work in two parts that threads can share, every bit of
// the result the same: the scores first, blocks [b0, b1) of them for every
// row (any split of the blocks), then the output dims [dim0, dim1) of every
// row from all the scores (dim0 a multiple of kKeyBlock, so that any SIMD
// vector of dims lies in one part; any split of the dims). A decode step's
// few rows are then split over the positions for the keys and over the dims
// for the values, each thread reading its part of them rather than all of
// them for its heads. scores: nq * key_blocks(lane0, len) * kKeyBlock
// floats, row g's block b at (g * blocks + b) * kKeyBlock (lanes outside
// the range -inf).
void attend_online_scores(const OnlineAttention& a, int64_t b0, int64_t b1, float* scores);
void attend_online_values(const OnlineAttention& a, const float* scores, int64_t dim0,
                          int64_t dim1);
void attend_online_scores_reference(const OnlineAttention& a, int64_t b0, int64_t b1,
                                    float* scores);
void attend_online_values_reference(const OnlineAttention& a, const float* scores, int64_t dim0,
                                    int64_t dim1);

// exp(x) for x <= 0 as the kernel computes it (Cephes' expf polynomial with
// round-to-nearest range reduction; relative error < 2^-22): 0 below -87,
// exactly 1 at 0.
float exp_f32(float x);

const char* attend_online_target_name();

// The 16 lanes of l summed pairwise as the contract above sums L: lane i
// and i + 8 first, then i + 4, i + 2, i + 1 (l is overwritten).
inline float sum_lanes16(float* l) {
  for (int w = 8; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) l[i] = l[i] + l[i + w];
  }
  return l[0];
}

}  // namespace hubzoo
