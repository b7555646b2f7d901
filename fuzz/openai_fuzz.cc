// OpenAI request parsing: the input is a request body. parse_body, then the
// generation parameters every chat/completions request reads. A 400
// (ApiError) is the only acceptable failure.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/openai_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    const hubzoo::server::Json j = hubzoo::server::parse_body(body);
    hubzoo::server::parse_generation_params(j, /*vocab_size=*/1000, /*random_seed=*/1);
  } catch (const hubzoo::server::ApiError&) {
  }
  return 0;
}
