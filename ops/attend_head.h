// One (query row, head) of attention over cached positions, fp32, in one SIMD
// call: the body of layers/attention.cc's attend_head() in fused mode, bit for
// bit, without a dispatched dot()/axpy() call per position (at 2048 positions
// those calls are most of a prefill).
//
//   scores[j] = dot(q, k_j) * scale          (dot: ops/elementwise.h's fixed 8-lane order)
//   softmax_inplace(scores, len)             (ops/elementwise.h)
//   out = 0; for j in order: out += scores[j] * v_j   (each product rounded, then added)
//
// k_j = keys + j * row_stride, v_j = values + j * row_stride; scores holds len
// floats. Every row reduces over its own positions in position order only, so
// batch invariance holds as before. layers/attention.cc uses it for fp32 scores
// without softcapping over a full cache; bench/attention_bench measures it.
#pragma once

#include <cstdint>

namespace hubzoo {

void attend_head_f32(const float* q, const float* keys, const float* values, int64_t row_stride,
                     int64_t len, int64_t d, float scale, float* scores, float* out);

// The same with the scalar ops it replaces (dot_reference, softmax_inplace, axpy_reference).
void attend_head_f32_reference(const float* q, const float* keys, const float* values,
                               int64_t row_stride, int64_t len, int64_t d, float scale,
                               float* scores, float* out);

const char* attend_head_target_name();

}  // namespace hubzoo
