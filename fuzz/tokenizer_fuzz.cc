// tokenizer.json load + encode/decode. Input: `<tokenizer.json>\0<text>`
// (fuzz_util.h). The JSON is written to a file and loaded with from_file, so it
// takes read_json_file's checks (size, depth) as a snapshot's does; a tokenizer that loads then
// encodes the text with and without special tokens, decodes the ids back, and
// decodes ids taken from the text's bytes (out-of-range ones included).
// Anything but a hubzoo::Error is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [json_text, text] = hubzoo::fuzz::split_at_nul(data, size);
  const auto path = hubzoo::fuzz::write_scratch("tokenizer.json", json_text);
  try {
    const hubzoo::Tokenizer tok = hubzoo::Tokenizer::from_file(path);
    for (const bool special : {true, false}) {
      try {
        const auto enc = tok.encode(text, special);
        tok.decode(enc.ids, /*skip_special_tokens=*/false);
        tok.decode(enc.ids, /*skip_special_tokens=*/true);
      } catch (const hubzoo::InvalidArgument&) {  // text not UTF-8
      }
    }
    std::vector<int64_t> ids;
    for (size_t i = 0; i + 1 < text.size() && ids.size() < 64; i += 2) {
      ids.push_back(static_cast<int8_t>(text[i]) * 256 + static_cast<uint8_t>(text[i + 1]));
    }
    tok.decode(ids, false);
    for (const int64_t id : ids) tok.id_to_token(id);
    tok.token_to_id(text);
  } catch (const hubzoo::Error&) {
  }
  return 0;
}
