// Transcendental row kernels in SIMD (Highway, dispatched at run time), each
// with a scalar reference beside it.
//
// Batch invariance: every element goes through the same vector arithmetic
// wherever it sits (tails are padded into a full vector, not finished in
// scalar code), and a row's reductions run in an order that depends only on
// its length, so a row gives the same bits alone or inside a batch.
#pragma once

#include <cstdint>

namespace hubzoo {

// GELU with erf (torch.nn.functional.gelu, approximate='none'), in place:
// 0.5 x (1 + erf(x / sqrt(2))), with erf the Abramowitz-Stegun 7.1.26 formula
// PyTorch's vectorized CPU kernel uses (|error| <= 1.5e-7):
// erf(|z|) = 1 - t (p1 + t (p2 + t (p3 + t (p4 + t p5)))) exp(-z^2), t = 1 / (1 + 0.3275911 |z|).
void gelu_erf(float* x, int64_t n);
void gelu_erf_reference(float* x, int64_t n);  // the same formula, scalar, std::exp

// out = silu(gate) * up with silu(g) = g / (1 + exp(-g)), exp Highway's
// (a few ulps), every element through the vector path. out may alias gate or up.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void silu_mul_reference(const float* gate, const float* up, int64_t n, float* out);  // std::exp

// out = gelu_tanh(gate) * up, GELU's tanh form (torch approximate='tanh'):
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), tanh Highway's (a few
// ulps), every element through the vector path. out may alias gate or up.
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
void gelu_tanh_mul_reference(const float* gate, const float* up, int64_t n, float* out);

// x = softmax(x) over n floats in fp32: exp(x - max) / sum. n >= 1.
void softmax_row(float* x, int64_t n);
void softmax_row_reference(float* x, int64_t n);  // scalar, std::exp, sum in index order

}  // namespace hubzoo
