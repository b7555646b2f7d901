// config.json mapping: the input is a config.json, written alone into a
// snapshot folder and loaded as a causal LM and as an encoder. Every family's
// config parser (llama_spec, gemma/gemma4/qwen3_moe/bert configs, the shared
// fields of models/config_fields.*) runs before any weight is read, so a
// config that parses ends at the missing checkpoint with a FileError. Anything
// but a hubzoo::Error is a finding.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "base/error.h"
#include "fuzz_util.h"
#include "models/causal_lm.h"
#include "models/encoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path snapshot = [] {
    auto dir = hubzoo::fuzz::scratch_dir() / "snapshot";
    std::filesystem::create_directories(dir);
    return dir;
  }();
  hubzoo::fuzz::write_scratch("snapshot/config.json", {reinterpret_cast<const char*>(data), size});
  hubzoo::LoadOptions options;
  options.num_threads = 1;
  try {
    hubzoo::load_causal_lm(snapshot.string(), options);
  } catch (const hubzoo::Error&) {
  }
  try {
    hubzoo::load_encoder(snapshot.string(), options);
  } catch (const hubzoo::Error&) {
  }
  return 0;
}
