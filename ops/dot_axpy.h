// SIMD bodies of ops/elementwise.h's dot() and axpy() (Highway, dispatched at
// run time), bit-identical to the scalar code they replace on every target:
// products and sums are rounded separately (never fused into an FMA), and dot
// keeps the fixed 8-lane order of elementwise.h. Attention calls both once per
// (query, key) and (query, value) pair, so they sit on the prefill's hot path.
#pragma once

#include <cstdint>

namespace hubzoo {

// sum_i a[i] * b[i]: lane j (0..7) sums a[i] * b[i] for i % 8 == j over whole
// blocks of 8, lanes combined as ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)), then the
// tail added in index order.
float dot_simd(const float* a, const float* b, int64_t n);
float dot_reference(const float* a, const float* b, int64_t n);

// y[i] += a * x[i] (product rounded, then the sum).
void axpy_simd(float a, const float* x, float* y, int64_t n);
void axpy_reference(float a, const float* x, float* y, int64_t n);

// out[i] = w[i] * (x[i] * s), each product rounded (rms_norm's scaling).
void scale_mul_simd(const float* w, const float* x, float s, float* out, int64_t n);
void scale_mul_reference(const float* w, const float* x, float s, float* out, int64_t n);

// The body of ops/elementwise.h's argmax() for n > 0: the first index of the
// maximum, or of the first NaN if there is one (the greedy sampler's pick
// over a vocabulary, ~20 us per 49152 logits as a scalar loop).
int64_t argmax_simd(const float* x, int64_t n);

// Name of the SIMD target these kernels dispatch to (tests, reports).
const char* dot_axpy_target_name();

}  // namespace hubzoo
