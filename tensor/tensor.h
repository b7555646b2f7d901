// Non-owning tensor views over mapped checkpoint bytes or activation buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace hubzoo {

using Shape = std::vector<int64_t>;

int64_t num_elements(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[4, 16]"

// A contiguous, row-major, read-only view. Does not own `data`.
struct TensorView {
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;

  int64_t numel() const { return num_elements(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

}  // namespace hubzoo
