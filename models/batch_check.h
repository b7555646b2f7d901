// Validation every decoder's forward() does on a TokenBatch before it runs.
#pragma once

#include <cstdint>
#include <map>

#include "layers/batch.h"
#include "layers/kv_cache.h"

namespace hubzoo {

// Checks ids against the vocabulary, slots against the cache, and that each
// slot's positions continue its cache in order; returns each touched slot's
// new length. Throws InvalidArgument naming what is wrong.
std::map<int64_t, int64_t> check_token_batch(const TokenBatch& batch, const KvCache& cache,
                                             int64_t vocab_size);

}  // namespace hubzoo
