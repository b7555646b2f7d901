// A grow-only, uninitialised float buffer for the activations of a forward
// step, owned by whoever runs the steps (a model's workspace,
// layers/workspace.h) and destroyed with it.
//
// A std::vector of the step's size, allocated per call, costs a memset and,
// above malloc's mmap threshold, fresh pages from the kernel (page faults and
// zeroing) every layer of every step: a 2048-token prefill's gate/up output
// alone is 25 MiB. This keeps the largest size asked for and hands it out
// again without touching it; it grows only when a bigger batch comes. The
// contents are not kept when it grows. Its owner frees it (release()) after a
// step much bigger than the usual ones, so a long prompt does not leave its
// buffers resident for the model's lifetime.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

#include "hwy/aligned_allocator.h"

namespace hubzoo {

class ScratchBuffer {
 public:
  float* get(size_t n) {
    if (n > capacity_) {
      data_.reset(new float[n]);  // default-initialised: not zeroed
      capacity_ = n;
    }
    return data_.get();
  }
  void release() {
    data_.reset();
    capacity_ = 0;
  }

 private:
  std::unique_ptr<float[]> data_;
  size_t capacity_ = 0;
};

// The same for a kernel's own buffers (usually thread_local): grow-only,
// uninitialised, 64-byte aligned (tile and vector rows each one cache line).
template <typename T>
class AlignedScratch {
 public:
  T* get(size_t n) {
    if (n > capacity_) {
      data_ = hwy::AllocateAligned<T>(n);
      if (!data_) throw std::bad_alloc();
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  hwy::AlignedFreeUniquePtr<T[]> data_;
  size_t capacity_ = 0;
};

}  // namespace hubzoo
