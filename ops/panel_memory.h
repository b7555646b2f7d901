// Memory for packed weight panels: the dense panels of ops/matmul_pack.cc and
// the coded ones of ops/matmul_coded.cc (one allocator, one policy).
#pragma once

#include <cstddef>

namespace hubzoo {

// `bytes` (at least 64) rounded up to a multiple of 64, 64-byte aligned; from
// 16 MiB on (the embedding / lm_head) 2 MiB aligned and its whole 2 MiB pages
// advised as transparent huge pages, so that loading faults a page per 2 MiB.
// Zeroed from byte `zero_from` on (the caller writes the rest). Freed with
// std::free; std::bad_alloc when the system has none.
void* alloc_panel_memory(size_t bytes, size_t zero_from);

}  // namespace hubzoo
