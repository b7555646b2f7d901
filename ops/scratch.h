// A grow-only, uninitialised float buffer, meant as a `thread_local` per call
// site for the activations of one forward step.
//
// A std::vector of the step's size, allocated per call, costs a memset and,
// above malloc's mmap threshold, fresh pages from the kernel (page faults and
// zeroing) every layer of every step: a 2048-token prefill's gate/up output
// alone is 25 MiB. This keeps the largest size a call site has needed and
// hands it out again without touching it. The caller must not use the buffer
// past its own call (a nested call of the same site on the same thread would
// share it).
#pragma once

#include <cstddef>
#include <memory>

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

 private:
  std::unique_ptr<float[]> data_;
  size_t capacity_ = 0;
};

// The workspace of the layer forwards that run one after another within a
// decoder layer (attention, then the MLP): one buffer per thread, sized by
// the largest of them, so their step buffers never coexist (a 2048-token
// prefill would otherwise hold q/k/v, attention and gate/up outputs at once).
inline ScratchBuffer& layer_scratch() {
  thread_local ScratchBuffer buffer;
  return buffer;
}

}  // namespace hubzoo
