// Precompiled normalizer (the sentencepiece charsmap). Not implemented yet:
// refusing is better than silently normalizing differently from HF.
#include "base/error.h"
#include "tokenizer/components.h"

namespace hubzoo::tok {

std::unique_ptr<Normalizer> make_precompiled(const Json&, const Source& src) {
  throw FormatError(src.file + ": normalizer type 'Precompiled' is not supported yet");
}

}  // namespace hubzoo::tok
