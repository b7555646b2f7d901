// Row and elementwise ops on contiguous fp32 arrays.
//
// Batch invariance (docs/design.md): every reduction here runs in an order
// that depends only on n, never on where the row sits in a batch or on the
// thread count, so a row gives the same bits alone or batched.
#pragma once

#include <cstdint>

namespace hubzoo {

// out = x * (1 / sqrt(mean(x^2) + eps)) * weight, as PyTorch's Llama RMSNorm:
// variance in fp32, x * rsqrt(variance + eps), then * weight (skipped when
// weight is null). out may alias x.
void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* out);

// out = (x - mean) / sqrt(var + eps) * weight + bias with fp32 statistics, as
// torch.nn.functional.layer_norm: mean first, then the (biased) variance as the
// mean of squared deviations, each reduced in a fixed order. weight and bias
// may each be null (skipped). out may alias x.
void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t n,
                float* out);

// y += x
void add_inplace(float* y, const float* x, int64_t n);

// x = softmax(x): exp(x - max(x)) / sum, fp32 throughout.
void softmax_inplace(float* x, int64_t n);

// First index of the maximum, as torch.argmax (a NaN counts as the maximum).
// Throws InvalidArgument when n <= 0.
int64_t argmax(const float* x, int64_t n);
// The same as a scalar scan (the test's reference).
int64_t argmax_reference(const float* x, int64_t n);

// sum_i a[i] * b[i] in a fixed order.
float dot(const float* a, const float* b, int64_t n);

// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);

}  // namespace hubzoo
