// The GGUF header: the input is a whole .gguf file. GgufFile::parse validates
// it from memory; every tensor it accepts must then lie inside the input and be
// readable end to end. Accepted (and very short) inputs also go through a file
// and GgufFile::open, which must agree. Anything but a hubzoo::Error is a finding.
#include <cstddef>
#include <cstdint>

#include "base/error.h"
#include "fuzz_util.h"
#include "io/gguf.h"

namespace {

void check(const hubzoo::GgufFile& file, const uint8_t* begin, size_t size, bool mapped) {
  volatile uint8_t sink = 0;
  for (const auto& t : file.tensors()) {
    if (file.find(t.name) != &t) __builtin_trap();  // the index must match the list
    if (t.dtype.has_value() == t.quant.has_value()) __builtin_trap();
    const uint8_t* d = file.data(t);
    if (!mapped &&
        (d < begin || t.nbytes > size || d - begin > static_cast<ptrdiff_t>(size - t.nbytes))) {
      __builtin_trap();  // bytes outside the input
    }
    if (t.nbytes > 0) sink = sink + d[0] + d[t.nbytes - 1];
  }
  sink = sink + file.metadata().dump().size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool parsed = false;
  try {
    const auto file = hubzoo::GgufFile::parse(data, size, "fuzz.gguf", {});
    check(*file, data, size, false);
    parsed = true;
  } catch (const hubzoo::Error&) {
  }
  // The same bytes through a file: open() must agree with parse(). Only for
  // accepted inputs and short ones (open's own size check), since writing a
  // file per input costs most of a run's time.
  if (!parsed && size >= 24) return 0;
  const auto path =
      hubzoo::fuzz::write_scratch("model.gguf", {reinterpret_cast<const char*>(data), size});
  try {
    const auto file = hubzoo::GgufFile::open(path);
    if (!parsed) __builtin_trap();  // open() accepted what parse() rejected
    check(*file, nullptr, 0, true);
    for (const auto& t : file->tensors()) file->release(t);
  } catch (const hubzoo::Error&) {
    if (parsed) __builtin_trap();  // open() rejected what parse() accepted
  }
  return 0;
}
