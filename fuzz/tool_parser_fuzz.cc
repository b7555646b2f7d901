// Tool-call parsing of model output (server/tool_parser.h): the first byte
// picks the format and the chunk size the text is streamed in, the rest is
// the output. Untrusted output must never crash the parser, and an answer
// in which no call was found must come back whole as content.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/tool_parser.h"

using hubzoo::server::ToolCallParser;
using hubzoo::server::ToolFormat;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr ToolFormat kFormats[] = {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral,
                                     ToolFormat::kGemma};
  const ToolFormat format = kFormats[data[0] % 4];
  const size_t chunk = 1 + (data[0] >> 2) % 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  ToolCallParser parser(format);
  std::string content;
  size_t calls = 0;
  for (size_t i = 0; i < text.size(); i += chunk) {
    auto d = parser.feed(text.substr(i, chunk));
    content += d.content;
    calls += d.calls.size();
  }
  auto d = parser.finish();
  content += d.content;
  calls += d.calls.size();
  if (calls == 0 && content != text) std::abort();  // text was lost
  if (calls != parser.call_count()) std::abort();
  return 0;
}
