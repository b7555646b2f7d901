// The safetensors header: the input is a whole .safetensors file (8-byte
// length, JSON header, data). Opening validates it; every tensor it accepts
// must then be readable end to end inside the mapping. Anything but a
// hubzoo::Error is a finding.
#include <cstddef>
#include <cstdint>

#include "base/error.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path =
      hubzoo::fuzz::write_scratch("model.safetensors", {reinterpret_cast<const char*>(data), size});
  try {
    const auto file = hubzoo::SafetensorsFile::open(path);
    volatile uint8_t sink = 0;
    for (const auto& [name, info] : file->tensors()) {
      const hubzoo::TensorView v = file->view(name);
      const auto* bytes = static_cast<const uint8_t*>(v.data);
      if (v.nbytes() != info.end - info.begin) __builtin_trap();  // a view must match its range
      if (v.nbytes() > 0) sink = sink + bytes[0] + bytes[v.nbytes() - 1];
    }
    for (const auto& [key, value] : file->metadata()) sink = sink + key.size() + value.size();
  } catch (const hubzoo::Error&) {
  }
  return 0;
}
