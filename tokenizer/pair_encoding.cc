// Tokenizer::encode_pair: HF encode(text, pair). Both texts run through the
// pipeline (the pair's tokens with type id 1), are truncated together with
// the longest_first strategy of HF utils/truncation.rs, then the
// post-processor's pair template merges them.
#include <algorithm>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo {
namespace {

// HF truncate_encodings, LongestFirst, for a budget of `max` content tokens:
// the shorter text keeps what it can up to half, the longer one the rest.
void truncate_longest_first(Encoding& a, Encoding& b, size_t max, bool left) {
  if (a.size() + b.size() <= max) return;
  size_t n1 = a.size(), n2 = b.size();
  const bool swap = n1 > n2;
  if (swap) std::swap(n1, n2);
  if (n1 > max) {
    n2 = n1;
  } else {
    n2 = std::max(n1, max - n1);
  }
  if (n1 + n2 > max) {
    n1 = max / 2;
    n2 = n1 + max % 2;
  }
  if (swap) std::swap(n1, n2);
  tok::truncate_encoding(a, n1, left);
  tok::truncate_encoding(b, n2, left);
}

}  // namespace

Encoding Tokenizer::encode_pair(std::string_view text, std::string_view pair,
                                bool add_special_tokens, size_t max_length) const {
  Encoding a = encode_raw(text, 0), b = encode_raw(pair, 1);
  size_t limit = max_length;
  bool left = false;
  if (limit == 0 && truncation_) {
    limit = truncation_->max_length;
    left = truncation_->left;
  }
  if (limit > 0) {
    const size_t added =
        add_special_tokens && post_processor_ ? post_processor_->added_tokens_pair() : 0;
    if (limit < added) {
      throw InvalidArgument("max_length " + std::to_string(limit) + " leaves no room beside the " +
                            std::to_string(added) + " special tokens of a pair");
    }
    truncate_longest_first(a, b, limit - added, left);
  }
  std::vector<Encoding> parts = {std::move(a), std::move(b)};
  if (post_processor_)
    parts = post_processor_->process_encodings(std::move(parts), add_special_tokens);
  Encoding out;
  for (const Encoding& e : parts) out.append(e);
  if (padding_) pad(out, padding_->fixed.value_or(out.size()));
  return out;
}

}  // namespace hubzoo
