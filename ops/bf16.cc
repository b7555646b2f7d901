#include "ops/bf16.h"

namespace hubzoo {

// Plain loops: the branch-free bit arithmetic vectorises at -O2/-O3.
void round_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

void to_bf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits(x[i]);
}

void from_bf16(const uint16_t* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(x[i]);
}

}  // namespace hubzoo
