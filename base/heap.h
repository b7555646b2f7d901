// Returning a load's freed heap to the system.
#pragma once

#include <cstddef>  // defines __GLIBC__ where the C library is glibc
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hubzoo {

// Gives the heap's free pages back to the system. A load allocates and frees
// many small objects (a GGUF's vocabulary as JSON values: ~20 MB for Gemma's
// 262k tokens); glibc keeps those pages, so they would stay in the process's
// resident memory next to the weights. No-op without glibc.
inline void release_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace hubzoo
