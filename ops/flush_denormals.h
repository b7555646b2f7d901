// Denormal flushing as the CPU's bf16 products compute (DAZ on operands, FTZ
// on results): flush_denormal for scalar references, FlushDenormals for
// kernels, which set MXCSR so that every vector operation flushes.
#pragma once

#include <cmath>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // _mm_getcsr, _mm_setcsr
#endif

namespace hubzoo {

// Denormals flushed to a zero of their sign (DAZ on operands, FTZ on results).
inline float flush_denormal(float v) {
  return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v;
}

// MXCSR flush-to-zero and denormals-are-zero on this thread while alive
// (when `on`), restored after.
class FlushDenormals {
 public:
  explicit FlushDenormals(bool on) {
#if defined(__x86_64__) || defined(__i386__)
    if (on) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
      active_ = true;
    }
#else
    (void)on;
#endif
  }
  ~FlushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
    if (active_) _mm_setcsr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_ = 0;
  bool active_ = false;
};

}  // namespace hubzoo
